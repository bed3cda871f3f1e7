"""What the stores keep of a graded trace, whichever store it is (SQLite or PostgreSQL):
the trace's OTLP bytes and each run's grade, and how a grade's JSON is written and read."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["StoredGrade", "StoredTrace", "encode_result", "grades_from_rows"]


def encode_result(result: dict[str, Any]) -> str:
    """A result dict as the stores keep it: orjson, which takes 7 us for a run of 10 calls
    where the standard library's encoder takes 35. The standard encoder still writes what
    orjson refuses (integers past 64 bits)."""
    try:
        return orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(result, ensure_ascii=False)


class StoredGrade:
    """One graded run: `span_id` is the run's agent span (hex), `result` the CheckResult JSON.

    A run graded in a grading process arrives as the text the store writes (`encoded`, made
    there by `encode_result`) with its verdict and score: the receiving process then neither
    builds the dict nor encodes it, and decodes it only when something reads `result` (a
    content policy's scrub, the shared store), as a read of the store would. Immutable.
    """

    __slots__ = ("_encoded", "_head", "_result", "agent", "graded_ns", "span_id", "trace_id")

    trace_id: str
    span_id: str
    agent: str | None
    graded_ns: int
    _result: dict[str, Any] | None
    _encoded: str | None
    _head: tuple[str, float]

    def __init__(
        self,
        trace_id: str,
        span_id: str,
        agent: str | None,
        graded_ns: int,
        result: dict[str, Any] | None = None,
        *,
        encoded: str | None = None,
        verdict: str = "",
        score: float = 0.0,
    ) -> None:
        """`result`, or `encoded` (its text) with the result's `verdict` and `score`."""
        if result is None and encoded is None:
            raise TypeError("StoredGrade needs its result or the result's JSON text")
        setattr_ = object.__setattr__
        setattr_(self, "trace_id", trace_id)
        setattr_(self, "span_id", span_id)
        setattr_(self, "agent", agent)
        setattr_(self, "graded_ns", graded_ns)
        setattr_(self, "_result", result)
        setattr_(self, "_encoded", encoded)
        setattr_(self, "_head", (verdict, float(score)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"StoredGrade is immutable (cannot set {name})")

    @property
    def result(self) -> dict[str, Any]:
        result = self._result
        if result is None:
            assert self._encoded is not None
            result = json.loads(self._encoded)
            object.__setattr__(self, "_result", result)
        return result

    @property
    def verdict(self) -> str:
        """The result's verdict, as the store's column keeps it."""
        if self._result is None:
            return self._head[0]
        return str(self._result.get("verdict", ""))

    @property
    def score(self) -> float:
        if self._result is None:
            return self._head[1]
        return float(self._result.get("score", 0.0))

    def result_json(self) -> str:
        """`result` as the stores keep it (`encode_result`)."""
        if self._encoded is not None:
            return self._encoded
        return encode_result(self.result)

    def _key(self) -> tuple[Any, ...]:
        return (self.trace_id, self.span_id, self.agent, self.graded_ns, self.result)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredGrade):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # the result is a dict

    def __repr__(self) -> str:
        return (
            f"StoredGrade(trace_id={self.trace_id!r}, span_id={self.span_id!r}, "
            f"agent={self.agent!r}, graded_ns={self.graded_ns!r}, result={self.result!r})"
        )


@dataclass(frozen=True, slots=True)
class StoredTrace:
    trace_id: str
    data: bytes
    """OTLP `TracesData` (= `ExportTraceServiceRequest`) protobuf bytes."""
    span_count: int
    first_ns: int
    updated_ns: int
    grades: tuple[StoredGrade, ...]
    parts: tuple[str, ...] = ()
    """Digests of the stored parts the data joins (the shared store's; empty here)."""


def grades_from_rows(rows: Iterable[Sequence[Any]]) -> list[StoredGrade]:
    """(trace_id, span_id, agent, graded_ns, result JSON) rows as grades. A row whose JSON
    does not parse is skipped: one bad row must not hide a week of grades from the report."""
    out: list[StoredGrade] = []
    for trace_id, span_id, agent, graded_ns, text in rows:
        try:
            result = json.loads(text) if isinstance(text, str | bytes) else text
        except (TypeError, ValueError):
            continue
        if isinstance(result, dict):
            out.append(StoredGrade(str(trace_id), str(span_id), agent, int(graded_ns), result))
    return out
