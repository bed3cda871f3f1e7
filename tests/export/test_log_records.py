"""`export.log_records` writes the bytes the SDK's log path would send, record for record."""

from __future__ import annotations

from typing import Any, cast

from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from attest_otel import semconv
from attest_otel.content import ContentPolicy
from attest_otel.export.log_events import emit_log_events
from attest_otel.export.log_records import log_records, logs_request
from attest_otel.export.otlp_config import default_resource, package_version

from .sample import graded_run, passing_run


def _sdk(run: Any, result: Any, content: ContentPolicy) -> ExportLogsServiceRequest:
    exporter: InMemoryLogRecordExporter = cast(Any, InMemoryLogRecordExporter)()
    provider = LoggerProvider(resource=default_resource(), shutdown_on_exit=False)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger(semconv.INSTRUMENTATION_SCOPE, package_version())
    emit_log_events(logger, run, result, now_ns=7, content=content)
    request: ExportLogsServiceRequest = encode_logs(list(exporter.get_finished_logs()))
    provider.shutdown()
    return request


def test_the_records_equal_what_the_sdk_sends() -> None:
    for run, result in (graded_run(), passing_run(), passing_run(trace_id=None)):
        for content in (
            ContentPolicy("keep"),
            ContentPolicy("truncate", 20),
            ContentPolicy("drop"),
        ):
            ours = ExportLogsServiceRequest.FromString(
                logs_request(log_records(run, result, now_ns=7, content=content))
            )
            theirs = _sdk(run, result, content)
            assert ours == theirs


def test_requests_concatenate_into_one() -> None:
    run, result = graded_run()
    records = log_records(run, result, now_ns=7)
    joined = ExportLogsServiceRequest.FromString(
        logs_request(records[:2]) + logs_request(records[2:])
    )
    assert sum(len(sl.log_records) for rl in joined.resource_logs for sl in rl.scope_logs) == len(
        records
    )
