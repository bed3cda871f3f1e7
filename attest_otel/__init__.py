"""attest-otel: grade AI-agent tool use from attest run files or OpenTelemetry traces.

The public API is what `__all__` below lists, importable from here; anything else is
internal and may move. `grader` and `llm` keep attest's names:
`attest_otel.grader.tool_use(run)`, `with attest_otel.llm.using(client): ...`. Every error
raised on purpose is an `AttestOtelError` with an `exit_code` (the tree is in `errors`);
`Verdict`, `Severity`, `FindingVerdict` and `Recovery` are the words a grade uses, as
`Literal` types; docs/rules.md says when each applies.

Importing this package stays cheap (no `anthropic`, protobuf, OpenTelemetry or YAML): the
model client is built only when a model check runs, and traces are read by
`attest_otel.pipeline`, which is imported on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attest_otel import grader, llm
from attest_otel.errors import (
    AttestOtelError,
    ExportError,
    InputError,
    ListenError,
    ModelError,
    PolicyError,
    SourceError,
    TraceNotFoundError,
    UsageError,
)
from attest_otel.grade.grader import check_tool_use
from attest_otel.model import (
    CheckResult,
    Finding,
    FindingVerdict,
    Recovery,
    Run,
    Severity,
    Step,
    ToolCall,
    Verdict,
    read_runs,
)

if TYPE_CHECKING:
    from attest_otel.sdk import grade_spans

__all__ = [
    "AttestOtelError",
    "CheckResult",
    "ExportError",
    "Finding",
    "FindingVerdict",
    "InputError",
    "ListenError",
    "ModelError",
    "PolicyError",
    "Recovery",
    "Run",
    "Severity",
    "SourceError",
    "Step",
    "ToolCall",
    "TraceNotFoundError",
    "UsageError",
    "Verdict",
    "__version__",
    "check_tool_use",
    "grade_spans",
    "grader",
    "llm",
    "read_runs",
]

__version__: str


def __getattr__(name: str) -> Any:
    """`__version__` and `grade_spans`, loaded on first use rather than at import.

    `importlib.metadata` is a large share of what importing this package costs
    (docs/measurements.md, "Import cost of the version"), and most imports (the CLI, a test)
    never read the version.
    """
    if name == "__version__":
        version = _version()
        globals()["__version__"] = version  # later reads are a plain attribute
        return version
    if name == "grade_spans":  # imports protobuf and the pipeline: only when used
        from attest_otel.sdk import grade_spans

        globals()["grade_spans"] = grade_spans
        return grade_spans
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _version() -> str:
    """The installed distribution's version; a source tree that was never installed (a
    checkout on `PYTHONPATH`) has no metadata, and says so instead of failing to import."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attest-otel")
    except PackageNotFoundError:
        return "0+unknown"
