"""The run and the result, as attest writes them: plain dataclasses and their JSON.

Everything downstream of the adapters speaks these types, so the rules never see a span and
the exporters never see a file. Reading is strict about the types of the fields attest
defines (a wrong type is an input error naming the field) and lenient about extra keys, since
attest's own run files may carry fields this grader does not use.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from attest_otel.errors import InputError

JSONValue = Any
"""Any value `json.loads` can return."""

# The words of a grade, as types: attest's finding JSON carries them as strings, and a
# misspelt one ("error_slient") would still be a string; as Literals mypy refuses it where
# the rules make a finding. docs/rules.md says when each applies.

Verdict = Literal["pass", "review", "fail"]
"""A run's verdict (`CheckResult.verdict`): `fail` if any call fails, else `review` if any
call warns, else `pass`. `review` counts as passed (exit 0): it flags a check that could not
be made, not a wrong call."""

Severity = Literal["pass", "warn", "fail"]
"""How much one finding counts (`Finding.severity`); each `FindingVerdict` has exactly one."""

FindingVerdict = Literal[
    "disallowed_tool", "error_claimed_success", "error_silent", "incorrect", "review", "correct"
]
"""One call's verdict (`Finding.verdict`), in the order the rules try them: the first that
applies wins."""

Recovery = Literal["retried", "fallback", "acknowledged", "silent", "claimed_success", "unchecked"]
"""What became of a call that errored (`Finding.metadata["recovery"]`): a later call of the
same tool worked (`retried`) or of one of its fallbacks (`fallback`); else what the final
answer says about it, as a model read it (`acknowledged`, `claimed_success`, `silent`), or
`unchecked` when no model could read it."""


@dataclass(slots=True)
class ToolCall:
    """One call of a tool.

    `output_captured` is False when the trace carried no result at all (content capture off,
    redacted): the output is then unknown rather than empty, and only `is_error` decides.
    `error_text` is what to show for an error when the output is not the error (the span's
    status description or exception event).
    """

    name: str
    arguments: JSONValue = None
    output: JSONValue = None
    is_error: bool | None = None
    output_captured: bool = True
    error_text: str | None = None
    span_id: str | None = None
    call_id: str | None = None
    disagreement: str | None = None
    """Where the call's span and the model's conversation tell it differently (a result the
    model was told was an error from a span that shows none, other arguments, a call no
    request asked for): the grade's reason says so. Rebuilt from spans only, like `span_id`."""


@dataclass(slots=True)
class Step:
    tool_call: ToolCall | None = None
    thought: str | None = None


@dataclass(slots=True)
class Run:
    """attest's run.json, plus where the run came from when it was rebuilt from spans.

    `allowed_tools` None allows every tool; an empty list allows none. `tool_definitions`
    are the tools the model was offered (from spans); the tool-choice check reads them, or
    `system_prompt` when there are none.
    """

    task: str = ""
    steps: list[Step] = field(default_factory=list)
    final_answer: str | None = None
    system_prompt: str | None = None
    allowed_tools: list[str] | None = None
    tool_fallbacks: dict[str, list[str]] = field(default_factory=dict)
    tool_definitions: list[dict[str, Any]] = field(default_factory=list)
    agent: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    content_captured: bool = True
    """False when the trace recorded no content at all (no task, no answer, no tool arguments
    or results: capture off, the default of most instrumentations). The calls are then known by
    name and span status only, so nothing can be asked of a model about them, and a clean
    grade means less than it says. Written to run JSON only when False, so attest's own run
    files stay as they were."""
    gaps: list[str] = field(default_factory=list)
    """What kept this run from being read whole, one reason each (a call the model asked for
    that nothing accounts for, a tool-like span no dialect claimed, content not received, a
    span refused or cut). A run with gaps is never a plain `pass`: the rules make it
    `review` with these reasons (docs/rules.md). Written to run JSON only when non-empty."""

    @property
    def tool_calls(self) -> list[tuple[int, ToolCall]]:
        """(step index, call) of each step with a call; thought-only steps keep their index."""
        return [(i, s.tool_call) for i, s in enumerate(self.steps) if s.tool_call is not None]


@dataclass(slots=True)
class Finding:
    severity: Severity
    verdict: FindingVerdict
    subject: str
    reason: str
    evidence: str | None
    step: int
    metadata: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "verdict": self.verdict,
            "subject": self.subject,
            "reason": self.reason,
            "evidence": self.evidence,
            "step": self.step,
            "metadata": dict(self.metadata),
        }


@dataclass(slots=True)
class CheckResult:
    check: str
    passed: bool
    verdict: Verdict
    score: float
    summary: str
    findings: list[Finding]
    metadata: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "passed": self.passed,
            "verdict": self.verdict,
            "score": self.score,
            "summary": self.summary,
            "findings": [f.to_dict() for f in self.findings],
            "metadata": dict(self.metadata),
        }


# --- spans, as every reader after ingest sees them -------------------------------------
# The light span: ids as hex, attributes as plain Python values. Only spans that may matter
# to grading are built as `Span`s; the decoders recognise the rest from a few attributes and
# leave them as they came (see `ingest.decode`). It lives here, beside the run, because every
# stage after ingest reads it and none of them should depend on ingest for a type.

STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2


@dataclass(slots=True)
class Event:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int = 0
    end_ns: int = 0
    kind: int = 0
    status_code: int = STATUS_UNSET
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope_name: str = ""
    scope_version: str = ""
    source: Any = field(default=None, repr=False, compare=False)
    """Where the span came from (e.g. the protobuf Span), so export can annotate it in place."""

    @property
    def is_error(self) -> bool:
        return self.status_code == STATUS_ERROR


@dataclass(slots=True)
class LogRecord:
    """A log record tied to a span: old GenAI conventions put message content in log events."""

    trace_id: str
    span_id: str
    event_name: str
    time_ns: int
    body: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)


def shown_score(score: float, digits: int = 2) -> float:
    """`score` cut (never rounded up) to `digits` decimals: 29,999 of 30,000 calls correct
    shows as 0.99, not as the perfect 1.00 a rounding would print for a failing run."""
    scale = float(10**digits)
    return math.floor(score * scale + 1e-9) / scale


def output_text(output: JSONValue) -> str:
    """The text the error test and every display use: strings as they are, other JSON compact.

    An absent or null output counts as empty: the tool gave nothing back.
    """
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    return json.dumps(output, separators=(",", ":"), ensure_ascii=False, default=_not_json)


def json_safe(value: JSONValue) -> JSONValue:
    """`value` with what JSON cannot hold made text: bytes (an OTLP `bytesValue`) as UTF-8,
    invalid sequences replaced, at any depth; anything else non-JSON as `str`. A run's
    arguments and outputs go through this, so every writer can dump them."""
    kind = type(value)
    if kind in _JSON_SCALARS:  # the exact types first: most values are parsed JSON
        return value
    if kind is dict:
        return {
            key if type(key) is str else str(key): item
            if type(item) in _JSON_SCALARS
            else json_safe(item)
            for key, item in value.items()
        }
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [item if type(item) in _JSON_SCALARS else json_safe(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    return _not_json(value)


_JSON_SCALARS = frozenset((str, bool, int, float, type(None)))


def _not_json(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


# --- reading attest's run files ------------------------------------------------------------


class _Field:
    """Reads one object's fields with their JSON path, so a wrong type names where it is."""

    def __init__(self, obj: Mapping[str, Any], path: str) -> None:
        self.obj = obj
        self.path = path

    def _fail(self, key: str, want: str) -> InputError:
        return _TypeProblem(f"{self.path}{key}: expected {want}, got {_json_type(self.obj[key])}")

    def str_(self, key: str, *, required: bool = False) -> str | None:
        value = self.obj.get(key)
        if value is None:
            if required:
                raise _TypeProblem(f"{self.path}{key}: required string is missing")
            return None
        if not isinstance(value, str):
            raise self._fail(key, "a string")
        return value

    def bool_(self, key: str) -> bool | None:
        value = self.obj.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self._fail(key, "true, false or null")
        return value

    def str_list(self, key: str) -> list[str] | None:
        value = self.obj.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, "a list of strings")
        return list(value)

    def obj_list(self, key: str) -> list[Any]:
        value = self.obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(key, "a list")
        return value


class _TypeProblem(InputError):
    """A problem found inside one run; the reader adds the file and line."""

    def __init__(self, problem: str) -> None:
        super().__init__("", problem)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def run_from_dict(data: Any) -> Run:
    """One run from attest's JSON object; raises InputError naming the field that is wrong."""
    if not isinstance(data, dict):
        raise _TypeProblem(f"a run must be a JSON object, got {_json_type(data)}")
    f = _Field(data, "")
    steps: list[Step] = []
    for i, raw in enumerate(f.obj_list("steps")):
        if not isinstance(raw, dict):
            raise _TypeProblem(f"steps[{i}]: expected an object, got {_json_type(raw)}")
        sf = _Field(raw, f"steps[{i}].")
        call = None
        raw_call = raw.get("tool_call")
        if raw_call is not None:
            if not isinstance(raw_call, dict):
                raise _TypeProblem(
                    f"steps[{i}].tool_call: expected an object, got {_json_type(raw_call)}"
                )
            cf = _Field(raw_call, f"steps[{i}].tool_call.")
            call = ToolCall(
                name=cf.str_("name", required=True) or "",
                arguments=raw_call.get("arguments"),
                output=raw_call.get("output"),
                is_error=cf.bool_("is_error"),
            )
        steps.append(Step(tool_call=call, thought=sf.str_("thought")))
    fallbacks_raw = data.get("tool_fallbacks")
    fallbacks: dict[str, list[str]] = {}
    if fallbacks_raw is not None:
        if not isinstance(fallbacks_raw, dict):
            raise f._fail("tool_fallbacks", "an object of tool name to a list of tool names")
        ff = _Field(fallbacks_raw, "tool_fallbacks.")
        for tool in fallbacks_raw:
            fallbacks[tool] = ff.str_list(tool) or []
    return Run(
        task=f.str_("task") or "",
        system_prompt=f.str_("system_prompt"),
        allowed_tools=f.str_list("allowed_tools"),
        tool_fallbacks=fallbacks,
        steps=steps,
        final_answer=f.str_("final_answer"),
        content_captured=f.bool_("content_captured") is not False,
        gaps=f.str_list("gaps") or [],
    )


def run_to_dict(run: Run) -> dict[str, Any]:
    """attest's run.json for a run (adapter-only fields left out, so attest reads it back;
    `content_captured` only when False and `gaps` only when some, the facts a reader of the
    file must not miss: both are extra keys, which attest's reader passes over)."""
    steps = []
    for step in run.steps:
        out: dict[str, Any] = {}
        if step.thought is not None:
            out["thought"] = step.thought
        if step.tool_call is not None:
            c = step.tool_call
            call: dict[str, Any] = {"name": c.name, "arguments": c.arguments, "output": c.output}
            if c.is_error is not None:
                call["is_error"] = c.is_error
            out["tool_call"] = call
        steps.append(out)
    data: dict[str, Any] = {
        "task": run.task,
        "system_prompt": run.system_prompt,
        "allowed_tools": run.allowed_tools,
        "tool_fallbacks": run.tool_fallbacks,
        "steps": steps,
        "final_answer": run.final_answer,
    }
    if not run.content_captured:
        data["content_captured"] = False
    if run.gaps:
        data["gaps"] = list(run.gaps)
    return data


RUN_KEYS = (
    "task",
    "system_prompt",
    "allowed_tools",
    "tool_fallbacks",
    "steps",
    "final_answer",
    "content_captured",
    "gaps",
)
STEP_KEYS = ("thought", "tool_call")
CALL_KEYS = ("name", "arguments", "output", "is_error")
_OTLP_KEYS = ("resourceSpans", "resource_spans")


def _unknown(obj: Mapping[str, Any], known: Sequence[str], path: str) -> list[str]:
    out = []
    for key in obj:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        out.append(f"unknown key {path}{key!r}{hint}")
    return out


def unknown_keys(data: Any) -> list[str]:
    """Keys of a run object that attest does not read: a misspelt `"taks"` or `"stepz"` would
    otherwise grade as an empty run and pass, which is the worst way to be wrong."""
    if not isinstance(data, dict):
        return []
    out = _unknown(data, RUN_KEYS, "")
    steps = data.get("steps")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict):
            continue
        out += _unknown(step, STEP_KEYS, f"steps[{i}].")
        call = step.get("tool_call")
        if isinstance(call, dict):
            out += _unknown(call, CALL_KEYS, f"steps[{i}].tool_call.")
    return out


def _not_a_run(data: Any, source: str) -> None:
    """Inputs that parse but are not a run: said here, or they would grade as a clean pass."""
    if isinstance(data, dict) and any(k in data for k in _OTLP_KEYS):
        raise InputError(
            source,
            "is OTLP traces, not an attest run file: "
            f"grade it with `attest-otel grade --file {source}`",
        )
    if data == {}:
        raise InputError(source, "an empty run object ({}): nothing to grade")


def _located(err: InputError, source: str, line: int | None) -> InputError:
    return InputError(source, err.problem, line=line)


def iter_runs(path: str | Path, *, warn: Callable[[str], None] | None = None) -> Iterator[Run]:
    """The runs of a `.json` file (one run) or a `.jsonl` file (one run per non-blank line);
    `warn` hears of every key attest does not read."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(p), "no such file") from None
    except IsADirectoryError:
        raise InputError(str(p), "is a directory, not a run file") from None
    except UnicodeDecodeError as e:
        raise InputError(
            str(p),
            f"not UTF-8 text ({e.reason} at byte {e.start}); for OTLP protobuf or gzip "
            f"traces use `attest-otel grade --file {p}`",
        ) from None
    except OSError as e:
        raise InputError(str(p), e.strerror or str(e)) from None
    if p.suffix == ".jsonl":
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(
                    str(p), f"not valid JSON ({e.msg} at column {e.colno})", line=lineno
                ) from None
            _not_a_run(data, f"{p}:{lineno}")
            if warn is not None:
                for problem in unknown_keys(data):
                    warn(f"{p}:{lineno}: {problem}")
            try:
                yield run_from_dict(data)
            except InputError as e:
                raise _located(e, str(p), lineno) from None
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if any(f'"{k}"' in text[:4096] for k in _OTLP_KEYS):  # OTLP JSON lines
            _not_a_run({_OTLP_KEYS[0]: []}, str(p))
        raise InputError(str(p), f"not valid JSON ({e.msg})", line=e.lineno) from None
    _not_a_run(data, str(p))
    if warn is not None:
        for problem in unknown_keys(data):
            warn(f"{p}: {problem}")
    try:
        yield run_from_dict(data)
    except InputError as e:
        raise _located(e, str(p), None) from None


def read_runs(path: str | Path, *, warn: Callable[[str], None] | None = None) -> list[Run]:
    """All runs of a file, validated before any is graded, so a bad line fails fast."""
    return list(iter_runs(path, warn=warn))
