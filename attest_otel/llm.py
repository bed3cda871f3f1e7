"""Give attest-otel a model to grade with.

    import anthropic
    from attest_otel import llm

    with llm.using(anthropic.Anthropic()):
        result = grader.tool_use(run)   # unrecovered errors get their final answer read

Without a `using` block, `run`, `grade` and `grader.evaluate` use `ANTHROPIC_API_KEY` when
it is set. The model is `ATTEST_OTEL_MODEL`, else `DEFAULT_MODEL`.
"""

from __future__ import annotations

from attest_otel.grade.llm import DEFAULT_MODEL as DEFAULT_MODEL
from attest_otel.grade.llm import AnthropicJudge as AnthropicJudge
from attest_otel.grade.llm import current_judge as current_judge
from attest_otel.grade.llm import judge_from_env as judge_from_env
from attest_otel.grade.llm import using as using

__all__ = ["DEFAULT_MODEL", "AnthropicJudge", "current_judge", "judge_from_env", "using"]
