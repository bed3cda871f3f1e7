"""What validating a request as protobuf costs the sidecar (issue 26, item 5), per span.

`wire.check_message` parses every request with upb before it is acknowledged, so nothing
the next hop would refuse (invalid UTF-8, nesting past the parser's limit) is taken. The
baselines, measured in the same run on the same requests: the wire walk every plain
request already gets (`GENAI_KEY_BYTES` over the bytes, then `plain_request`) and the cut
into spans a GenAI request gets (`split_request`). Workload: HTTP server spans with six
attributes, 4 spans a trace, requests of 100 and 1000 spans. Best of 5 runs of 30 each.

    .venv/bin/python bench/bench_validate.py
"""

import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.sidecar.wire import GENAI_KEY_BYTES, check_message, plain_request, split_request


def request(spans: int) -> bytes:
    r = ExportTraceServiceRequest()
    rs = r.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key = "service.name"
    kv.value.string_value = "shop"
    ss = rs.scope_spans.add()
    ss.scope.name = "opentelemetry.instrumentation.flask"
    for i in range(spans):
        s = ss.spans.add()
        s.trace_id = (i // 4 + 1).to_bytes(16, "big")
        s.span_id = (i + 1).to_bytes(8, "big")
        s.parent_span_id = (i).to_bytes(8, "big")
        s.name = "GET /orders/{id}"
        s.start_time_unix_nano = 1
        s.end_time_unix_nano = 2
        s.kind = 2
        for k, v in (
            ("http.request.method", "GET"),
            ("http.route", "/orders/{id}"),
            ("url.path", f"/orders/{i}"),
            ("http.response.status_code", 200),
            ("user_agent.original", "curl/8.5"),
            ("server.address", "shop.internal"),
        ):
            a = s.attributes.add()
            a.key = k
            if isinstance(v, int):
                a.value.int_value = v
            else:
                a.value.string_value = v
    return r.SerializeToString()


def best(fn, data, n=30):
    out = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn(data)
        out.append((time.perf_counter() - t) / n)
    return min(out)


if __name__ == "__main__":
    for spans in (100, 1000):
        data = request(spans)
        walk = best(lambda d: (GENAI_KEY_BYTES.search(d), plain_request(d)), data)
        split = best(split_request, data)
        check = best(lambda d: check_message(d, ExportTraceServiceRequest), data)
        print(
            f"{spans} spans, {len(data)} B: plain walk {walk / spans * 1e6:.2f} us/span, "
            f"split {split / spans * 1e6:.2f} us/span, "
            f"protobuf check {check / spans * 1e6:.2f} us/span "
            f"({check / walk:.2f}x the plain walk)"
        )
