"""attest-otel: grade AI-agent tool use from attest run files or OpenTelemetry traces.

The public API, re-exported here and nowhere else. `grader` and `llm` keep attest's names:
`attest_otel.grader.tool_use(run)`, `with attest_otel.llm.using(client): ...`.
"""

from attest_otel import grader, llm
from attest_otel.errors import AttestOtelError, InputError, PolicyError, UsageError
from attest_otel.grade.grader import check_tool_use
from attest_otel.model import CheckResult, Finding, Run, Step, ToolCall, read_runs

__all__ = [
    "AttestOtelError",
    "CheckResult",
    "Finding",
    "InputError",
    "PolicyError",
    "Run",
    "Step",
    "ToolCall",
    "UsageError",
    "check_tool_use",
    "grader",
    "llm",
    "read_runs",
]
