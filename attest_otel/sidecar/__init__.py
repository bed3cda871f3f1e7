"""`attest-otel serve`: the sidecar between two Collector pipelines.

OTLP in (`receivers`), requests split by scope on the wire (`wire`), GenAI traces held per
trace (`buffer`, made durable by `wal`), graded (`grading`), annotated and forwarded with
retry and back-pressure (`forward`); self-metrics (`stats`), the model budget (`gate`), the
Grader gRPC API (`api`), and the lifecycle that wires them from their config (`service`,
`config`). Everything here reads downward: ingest, adapt, grade, export, store.
"""
