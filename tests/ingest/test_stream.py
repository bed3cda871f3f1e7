"""A big file read a request at a time and handed on a trace at a time (`ingest.stream`) gives
each trace what `decode_file` gives it, in the same order, and the same errors."""

from __future__ import annotations

import gzip
import json
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.errors import InputError
from attest_otel.ingest.decode import Decoded, decode_file
from attest_otel.ingest.stream import ByTrace, iter_file
from bench.sidecar_workload import build_request
from tests.otlp_encodings import length_prefixed

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def _interleaved(tmp_path: Path) -> Path:
    """Every fixture's lines dealt into one file in a shuffled order: each trace's spans
    and log records spread over the file among other traces'."""
    lines = [
        line
        for path in sorted(TRACES.glob("*.json"))
        if not path.name.endswith(".labels.json")
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    random.Random(3).shuffle(lines)
    out = tmp_path / "all.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


def _same(by_trace: ByTrace, whole: Decoded) -> None:
    expected = whole.by_trace()
    assert by_trace.trace_ids() == list(expected)
    assert by_trace.span_count == len(whole.spans)
    genai = 0
    for trace_id, one in zip(expected, by_trace, strict=True):
        genai += one.genai_span_count
        assert [(s.span_id, s) for s in one.spans] == [(s.span_id, s) for s in expected[trace_id]]
        assert [s.source for s in one.spans] == [s.source for s in expected[trace_id]]
        logs = [r for r in whole.logs if r.trace_id == trace_id]
        assert one.logs == logs
    assert genai == whole.genai_span_count


@pytest.mark.parametrize("hold", [1, 50, 10**9])
def test_json_lines_give_each_trace_what_decode_file_gives_it(tmp_path: Path, hold: int) -> None:
    path = _interleaved(tmp_path)
    whole = decode_file(path)
    assert len(whole.by_trace()) > 50 and whole.logs
    with ByTrace.of_file(path, hold=hold) as traces:
        assert (traces.spilled > 0) == (hold < 10**9)
        _same(traces, whole)


def test_each_line_is_its_own_request(tmp_path: Path) -> None:
    path = _interleaved(tmp_path)
    lines = sum(1 for line in path.read_text().splitlines() if line.strip())
    assert sum(1 for _ in iter_file(path)) == lines


def test_length_prefixed_protobuf_is_read_a_message_at_a_time(tmp_path: Path) -> None:
    rng = random.Random(5)
    halves = []
    for _ in range(6):  # each request's spans dealt into two messages: traces spread over two
        req = ExportTraceServiceRequest.FromString(build_request(rng, 8, 0.5))
        for parity in (0, 1):
            half = ExportTraceServiceRequest()
            half.CopyFrom(req)
            for rs in half.resource_spans:
                for ss in rs.scope_spans:
                    kept = [s for i, s in enumerate(ss.spans) if i % 2 == parity]
                    del ss.spans[:]
                    ss.spans.extend(kept)
            halves.append(half)
    path = tmp_path / "traces.binpb"
    path.write_bytes(length_prefixed(*halves))
    assert sum(1 for _ in iter_file(path)) == len(halves)
    with ByTrace.of_file(path, hold=30) as traces:
        assert traces.spilled
        _same(traces, decode_file(path))


@pytest.mark.parametrize(
    "body",
    [
        b'{"resourceSpans": []}\n{"resourceSpans": [\n{}\n',  # invalid JSON on line 2
        b'{"resourceSpans": []}\n\n{"resourceSpans": [{"scopeSpans": [{"spans": 3}]}]}\n',
        b'{"resourceSpans": []}\n{"resourceSpans": [], "x": "\xff"}\n',  # not UTF-8
        b"\xef\xbb\xbf" + b'{"resourceSpans": []}\n["not a request"]\n',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": 3}]}]}\n',  # one document: no line
        b"\x00\x00\x00\x02\x0a",  # truncated protobuf
        b"\x00\x00\x00",  # truncated length prefix
    ],
)
def test_errors_are_the_ones_decode_file_gives(tmp_path: Path, body: bytes) -> None:
    path = tmp_path / "bad"
    path.write_bytes(body)
    with pytest.raises(InputError) as whole:
        decode_file(path)
    with pytest.raises(InputError) as streamed:
        ByTrace.of_file(path)
    assert str(streamed.value) == str(whole.value)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"  \n",
        json.dumps({"resourceSpans": []}, indent=2).encode(),  # pretty-printed: read whole
        b'{"resourceSpans": []}{"resourceSpans": []}',  # concatenated: read whole
    ],
)
def test_files_that_are_not_json_lines_read_as_before(tmp_path: Path, body: bytes) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(body)
    with ByTrace.of_file(path) as traces:
        assert traces.span_count == 0 and traces.trace_ids() == []


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        ByTrace.of_file(tmp_path / "missing.jsonl")


def test_an_unknown_trace_id_has_no_spans(tmp_path: Path) -> None:
    with ByTrace.of_file(_interleaved(tmp_path), hold=1) as traces:
        assert traces.trace("0" * 32).spans == []


def test_a_pipe_is_read_whole_as_before(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    body = _interleaved(tmp_path).read_bytes()
    writer = threading.Thread(target=fifo.write_bytes, args=(body,))
    writer.start()
    try:
        with ByTrace.of_file(fifo) as traces:
            (tmp_path / "copy.jsonl").write_bytes(body)
            _same(traces, decode_file(tmp_path / "copy.jsonl"))
    finally:
        writer.join()


def test_gzip_json_lines_are_inflated_as_they_are_read(tmp_path: Path) -> None:
    body = _interleaved(tmp_path).read_bytes()
    half = body.index(b"\n", len(body) // 2) + 1
    path = tmp_path / "all.jsonl.gz"  # two members, as a Collector concatenates them
    path.write_bytes(gzip.compress(body[:half]) + gzip.compress(body[half:]) + b"\0\0")
    lines = sum(1 for line in body.splitlines() if line.strip())
    assert sum(1 for _ in iter_file(path)) == lines
    with ByTrace.of_file(path, hold=50) as traces:
        assert traces.spilled
        _same(traces, decode_file(path))


@pytest.mark.parametrize("limit", [10**9, 5000])
@pytest.mark.parametrize(
    "damage",
    [
        lambda z: z[: len(z) // 2],  # truncated
        lambda z: z[:20] + bytes(b ^ 0x55 for b in z[20:40]) + z[40:],  # corrupt
        lambda z: z + b"trailing",
        lambda z: z,  # sound: only the limit can refuse it
    ],
    ids=["truncated", "corrupt", "trailing", "sound"],
)
def test_gzip_errors_are_the_ones_decode_file_gives(
    tmp_path: Path, damage: Callable[[bytes], bytes], limit: int
) -> None:
    lines = b'{"resourceSpans": []}\n' * 2000
    path = tmp_path / "bad.gz"
    path.write_bytes(damage(gzip.compress(lines)))
    try:
        decode_file(path, max_inflated_bytes=limit)
    except InputError as exc:
        expected: str | None = str(exc)
    else:
        expected = None
    try:
        list(iter_file(path, max_inflated_bytes=limit))
    except InputError as exc:
        got: str | None = str(exc)
    else:
        got = None
    assert got == expected


def test_gzip_that_is_not_json_lines_keeps_the_callers_bound(tmp_path: Path) -> None:
    pretty = json.dumps({"resourceSpans": []}, indent=2).encode() + b"\n"
    path = tmp_path / "pretty.json.gz"
    path.write_bytes(gzip.compress(pretty * (3 * 2**20 // len(pretty))))  # 3 MiB inflated
    with pytest.raises(InputError, match="inflates to more than 2097152 bytes"):
        list(iter_file(path, max_inflated_bytes=2 * 2**20))  # past what is read to sniff
