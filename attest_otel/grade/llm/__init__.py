"""The model checks: the Anthropic judge, and where the grader finds a model.

Importing this package does not import `anthropic`; only building a client does.
"""

from __future__ import annotations

from attest_otel.grade.llm.cache import DEFAULT_CACHE as DEFAULT_CACHE
from attest_otel.grade.llm.cache import AnswerCache as AnswerCache
from attest_otel.grade.llm.context import current_judge as current_judge
from attest_otel.grade.llm.context import judge_from_env as judge_from_env
from attest_otel.grade.llm.context import using as using
from attest_otel.grade.llm.judge import DEFAULT_MODEL as DEFAULT_MODEL
from attest_otel.grade.llm.judge import MODEL_ENV as MODEL_ENV
from attest_otel.grade.llm.judge import AnthropicJudge as AnthropicJudge

__all__ = [
    "DEFAULT_CACHE",
    "DEFAULT_MODEL",
    "MODEL_ENV",
    "AnswerCache",
    "AnthropicJudge",
    "current_judge",
    "judge_from_env",
    "using",
]
