"""Every attribute, event and metric name (and unit) attest-otel reads or writes.

One module, so the exporters, the adapters and the README's telemetry table cannot drift
apart: a dashboard or a TraceQL query written against these names is a contract. Names from the
OpenTelemetry GenAI semantic conventions are copied as strings rather than imported from
`opentelemetry.semconv._incubating`, because that module is unstable by name (its leading
underscore) and may move between SDK releases; ours must not.

Non-standard names live under `attest.`; if the semantic conventions later define one of
them, rename it here and keep the old name for a release.
"""

from __future__ import annotations

from typing import Final

# --- GenAI evaluation event (semantic conventions, gen-ai events) --------------------------

GEN_AI_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
"""Event name of one evaluation result, on a span (span event) or as a log-based event."""

GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"

EVALUATION_NAME_TOOL_USE: Final = "attest.tool_use"
"""Our value of `gen_ai.evaluation.name`: the tool-use check, per call and per run."""

EVENT_NAME: Final = "event.name"
"""Attribute carrying the event name on log records, for readers older than the
LogRecord `event_name` field (OTLP 1.5)."""

# --- GenAI attributes we read and repeat ---------------------------------------------------

GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"

# --- attest.* on each graded tool call (span attributes and event attributes) -------------

ATTEST_VERDICT: Final = "attest.verdict"
"""Verdict of one call: disallowed_tool, error_claimed_success, error_silent, incorrect,
review, correct."""
ATTEST_SEVERITY: Final = "attest.severity"
"""fail, warn or pass."""
ATTEST_STEP: Final = "attest.step"
"""Index of the call in the run's steps (for spans: the tool calls in start-time order)."""
ATTEST_RECOVERY: Final = "attest.recovery"
"""How an errored call was handled: retried, fallback, acknowledged, silent,
claimed_success, unchecked. Absent when the call did not error."""
ATTEST_RECOVERED_AT: Final = "attest.recovered_at"
"""Step of the call that recovered this one; absent when none did."""
ATTEST_ALLOWED: Final = "attest.allowed"
"""Whether the tool is in the run's allowed tools."""
ATTEST_APPROPRIATE: Final = "attest.appropriate"
"""The tool-choice check's answer; absent unless the check ran and answered."""
ATTEST_SPAN_ID: Final = "attest.span_id"
"""On events of the `attest.grade` span: the hex id of the span the event is about."""

# --- attest.tool_use.* on the agent span (the run) ----------------------------------------

ATTEST_TOOL_USE_SCORE: Final = "attest.tool_use.score"
"""Correct calls / all calls, 0..1 (1.0 for a run without tool calls)."""
ATTEST_TOOL_USE_VERDICT: Final = "attest.tool_use.verdict"
"""pass, fail or review."""
ATTEST_TOOL_USE_CALLS: Final = "attest.tool_use.calls"
"""Number of graded tool calls."""
ATTEST_TOOL_USE_FAILED_CALLS: Final = "attest.tool_use.failed_calls"
"""Number of calls whose severity is fail."""
ATTEST_TOOL_USE_UNGRADED: Final = "attest.tool_use.ungraded"
"""Why the run was not graded (its trace broke grading's time or memory budget, or was
quarantined): set with `attest.tool_use.verdict` = review on the agent spans of a trace the
sidecar forwarded ungraded."""
ATTEST_TOOL_USE_GAPS: Final = "attest.tool_use.gaps"
"""Why the run could not be read whole (its `review`), one sentence per gap; only on such runs."""

# --- the grade span -------------------------------------------------------------------------

GRADE_SPAN_NAME: Final = "attest.grade"
DEFAULT_SERVICE_NAME: Final = "attest-otel"
INSTRUMENTATION_SCOPE: Final = "attest_otel"

# --- metrics --------------------------------------------------------------------------------

METRIC_SCORE: Final = "attest.tool_use.score"
METRIC_SCORE_UNIT: Final = "1"
METRIC_SCORE_BUCKETS: Final[tuple[float, ...]] = (0, 0.25, 0.5, 0.75, 0.9, 1)
"""Explicit bucket bounds of the score histogram; the SDK default (0, 5, 10, ...) is
meaningless for a ratio."""

METRIC_RUNS: Final = "attest.tool_use.runs"
METRIC_RUNS_UNIT: Final = "{run}"
METRIC_CALLS: Final = "attest.tool_use.calls"
METRIC_CALLS_UNIT: Final = "{call}"
METRIC_ERRORS: Final = "attest.tool_use.errors"
METRIC_ERRORS_UNIT: Final = "{error}"

OTHER_LABEL_VALUE: Final = "other"
"""Stands in for data-derived label values (tool, agent) beyond the cardinality cap."""

# What the OpenTelemetry Prometheus exporter (0.66b2) makes of the names above: dots to
# underscores, `_total` on counters, unit `1` and `{...}` annotations dropped, histogram
# series `_bucket`/`_sum`/`_count`. Asserted against a real Prometheus in the tests.
PROMETHEUS_SCORE: Final = "attest_tool_use_score"
PROMETHEUS_RUNS: Final = "attest_tool_use_runs_total"
PROMETHEUS_CALLS: Final = "attest_tool_use_calls_total"
PROMETHEUS_ERRORS: Final = "attest_tool_use_errors_total"
