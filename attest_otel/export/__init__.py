"""Findings -> OTLP out: span events on held spans, grade spans, log events, metrics.

Data flows one way through this package: `results` turns a graded run into attribute
dicts, and each output writes those same dicts its own way: `annotate` onto the spans the
sidecar holds (as bytes), and the outputs of `outputs.py` (grade span, log events, metrics)
through the OTel SDK, wired by `telemetry` and sent where `otlp_config` says.

The public API lives in its modules, imported from there:

    from attest_otel.export.annotate import annotate_spans
    from attest_otel.export.telemetry import Telemetry, build_telemetry
    from attest_otel.export.delivery import ExportReport, SignalReport

Nothing is imported here on purpose: the sidecar's grading processes import
`export.annotate` and `export.log_records`, which encode bytes directly, and importing this
package must not drag the OTel SDK's trace, log and metric pipelines in with them.
"""
