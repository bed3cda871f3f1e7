"""`attest-otel serve`: the sidecar between two Collector pipelines.

OTLP in (`receivers`), requests split by scope on the wire (`wire`), GenAI traces held per
trace (`buffer`, made durable by `wal`), graded (`grading`), annotated and forwarded with
retry and back-pressure (`forward`); self-metrics (`stats`), the model budget (`gate`), the
Grader gRPC API (`api`). Each is a component built from its own config section (`parts`,
`config`) with one lifecycle (`lifecycle`), which `service` runs: docs/architecture.md,
"The sidecar's components". Everything here reads downward: ingest, adapt, grade, export,
store.
"""
