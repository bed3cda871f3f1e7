"""Findings -> OTLP out: span events on held spans, grade spans, log events, metrics.

Data flows one way through this package: `results` turns a graded run into attribute
dicts, and each output (`annotate`, `grade_span`, `log_events`, `metrics`) writes those
same dicts its own way; `telemetry` wires the SDK providers and exporters around them.

The public API lives in its modules, imported from there:

    from attest_otel.export.annotate import annotate_spans
    from attest_otel.export.telemetry import Telemetry, build_telemetry
    from attest_otel.export.delivery import ExportReport, SignalReport

Nothing is imported here on purpose: the receivers import `export.forward`, and importing
this package must not drag the OTel SDK's trace, log and metric pipelines in with it.
"""
