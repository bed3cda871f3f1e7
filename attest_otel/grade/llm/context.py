"""Where the grader finds a model: an explicit `using(client)` block, else the environment.

`using` is a context variable, not a global: threads and asyncio tasks each see their own
binding, nested blocks restore the outer one, and tests cannot leak a client into each other.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import cast

from attest_otel.grade.llm.judge import AnthropicJudge, MessagesClient
from attest_otel.grade.questions import Judge

__all__ = ["API_KEY_ENV", "current_judge", "judge_from_env", "using"]

API_KEY_ENV = "ANTHROPIC_API_KEY"

# The SDK waits up to ten minutes by default; one verdict should never take more than one.
_ENV_CLIENT_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class _Binding:
    client: MessagesClient | None = None
    judge: Judge | None = None


_binding: ContextVar[_Binding | None] = ContextVar("attest_otel_llm_binding", default=None)


def _bind(target: object) -> _Binding:
    if callable(getattr(getattr(target, "messages", None), "create", None)):
        return _Binding(client=cast(MessagesClient, target))
    if callable(getattr(target, "answer", None)) and callable(getattr(target, "choose", None)):
        return _Binding(judge=cast(Judge, target))
    raise TypeError(
        "using() takes an anthropic.Anthropic client (or any object with .messages.create) "
        f"or a Judge, not {type(target).__name__}"
    )


@contextmanager
def using(client: MessagesClient | Judge) -> Iterator[None]:
    """Make a model available to grading code inside the block.

    `client` is an `anthropic.Anthropic` (or look-alike), or a ready `Judge` such as an
    `AnthropicJudge` with its own settings, or a fake in tests.
    """
    token = _binding.set(_bind(client))
    try:
        yield
    finally:
        _binding.reset(token)


def current_judge(model: str | None = None) -> Judge | None:
    """The judge of the innermost `using` block, or None outside any.

    Over a bound client this is a new `AnthropicJudge` for `model`; a bound `Judge` is
    returned as it is (it already knows its model).
    """
    binding = _binding.get()
    if binding is None:
        return None
    if binding.judge is not None:
        return binding.judge
    if binding.client is None:
        return None
    return AnthropicJudge(binding.client, model)


def judge_from_env(model: str | None = None) -> Judge | None:
    """`current_judge()` if inside `using`, else a judge when `ANTHROPIC_API_KEY` is set.

    The SDK reads the key and `ANTHROPIC_BASE_URL` itself, exactly as it documents.
    """
    judge = current_judge(model)
    if judge is not None:
        return judge
    if not os.environ.get(API_KEY_ENV, "").strip():
        return None
    import anthropic  # only now: offline commands never pay for the import

    return AnthropicJudge(anthropic.Anthropic(timeout=_ENV_CLIENT_TIMEOUT_S), model)
