"""`attest_otel.v1.Grader` on the gRPC port (proto/attest_otel/v1/grader.proto)."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format  # type: ignore[import-untyped]

from attest_otel._proto.attest_otel.v1 import grader_pb2, result_pb2
from attest_otel.errors import InputError
from attest_otel.ingest.decode import decode_bytes
from attest_otel.model import run_from_dict, run_to_dict
from attest_otel.pipeline import Reading, grade_traces


class GraderApi:
    """`attest_otel.v1.Grader` on the gRPC port (see proto/attest_otel/v1/grader.proto)."""

    def __init__(self, service: Any) -> None:
        """`service`: the running `Service` (its grader, store and policy)."""
        self.service = service

    def GradeRun(self, request: Any, context: Any) -> Any:
        data = json_format.MessageToDict(request, preserving_proto_field_name=True)
        try:
            run = run_from_dict(data)
        except InputError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        grader = self.service.grader
        if grader is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the sidecar is starting")
            raise AssertionError("abort raises")
        result = grader.grade_run(run)
        return json_format.ParseDict(result.to_dict(), result_pb2.CheckResult(),
                                     ignore_unknown_fields=True)

    def GradeTrace(self, request: Any, context: Any) -> Any:
        trace_id = request.trace_id.strip().lower()
        store = self.service.store
        if store is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the store is turned off")
            raise AssertionError("abort raises")
        stored = store.get_trace(trace_id)
        if stored is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"trace {trace_id} is not in the store")
            raise AssertionError("abort raises")
        decoded = decode_bytes(stored.data, "application/x-protobuf",
                               source=f"store trace {trace_id}")
        policy = self.service.policy
        graded = grade_traces(
            decoded.spans,
            decoded.logs,
            Reading(policy) if policy is not None else None,
            stored={g.span_id: g.result for g in stored.grades},
        )
        response = grader_pb2.GradeTraceResponse(trace_id=trace_id)
        for trace in graded:
            for one in trace.runs:
                response.runs.append(
                    grader_pb2.GradedRun(
                        span_id=one.run.span_id or "",
                        agent=one.run.agent or "",
                        run=json_format.ParseDict(run_to_dict(one.run), result_pb2.Run(),
                                                  ignore_unknown_fields=True),
                        result=json_format.ParseDict(one.result.to_dict(),
                                                     result_pb2.CheckResult(),
                                                     ignore_unknown_fields=True),
                    )
                )
        return response
