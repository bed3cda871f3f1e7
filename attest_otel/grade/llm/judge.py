"""The Anthropic judge: one Messages call per question, verdicts through a forced tool call.

A batch is what one run asks. Its calls go out together (bounded by `max_concurrency`),
identical questions are asked once, and answers already paid for come from the cache.
Nothing here raises into the grader: every problem becomes a `ModelFailure` with a reason.

The `anthropic` package is not imported here at run time: the judge only needs an object
with `.messages.create`, and the CLI's offline commands should not pay for the SDK import.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from attest_otel.content import KEEP, ContentPolicy, truncate
from attest_otel.grade.llm.cache import DEFAULT_CACHE, AnswerCache, CheckKind, cache_key
from attest_otel.grade.llm.failures import describe_failure
from attest_otel.grade.llm.prompts import (
    ANSWER_SYSTEM,
    CHOICE_SYSTEM,
    answer_content,
    choice_content,
    choice_prefix,
)
from attest_otel.grade.llm.schemas import (
    answer_tool,
    choice_tool,
    parse_answer,
    parse_choice,
    verdict_input,
)
from attest_otel.grade.questions import (
    AnswerQuestion,
    AnswerVerdict,
    ChoiceQuestion,
    ChoiceVerdict,
    ModelFailure,
)

__all__ = [
    "CONTENT_DROPPED",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MODEL",
    "MODEL_ENV",
    "AnthropicJudge",
    "MessagesClient",
    "resolve_model",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-haiku-4-5"
MODEL_ENV = "ATTEST_OTEL_MODEL"
"""Environment variable naming the model; an explicit `model=` argument wins over it."""
DEFAULT_MAX_CONCURRENCY = 8

# A verdict is one enum or bool and one sentence; the cap stops a runaway reply early.
_MAX_TOKENS = 512
# Anthropic writes a prompt-cache entry only once a response has started, so calls sent all
# at once all miss. For a prefix long enough to be cached (about 1,000 tokens and up,
# depending on the model) one call goes first and the rest follow when it has answered.
_WARM_MIN_PREFIX_CHARS = 4_000


class MessagesAPI(Protocol):
    def create(self, *args: Any, **kwargs: Any) -> Any: ...


class MessagesClient(Protocol):
    """What the judge needs of `anthropic.Anthropic`, so any look-alike client works too."""

    @property
    def messages(self) -> MessagesAPI: ...


def resolve_model(model: str | None = None) -> str:
    """The argument if given, else `ATTEST_OTEL_MODEL`, else `DEFAULT_MODEL`."""
    if model:
        return model
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


Q = TypeVar("Q", AnswerQuestion, ChoiceQuestion)
V = TypeVar("V", AnswerVerdict, ChoiceVerdict)


@dataclass(frozen=True, slots=True)
class _Check(Generic[Q, V]):
    """Everything that differs between the two kinds of question."""

    kind: CheckKind
    verdict_type: type[V]
    system: str
    tool: Callable[[], Mapping[str, Any]]
    """The verdict tool; built on the first check (`schemas.answer_tool`)."""
    content: Callable[[Q], list[dict[str, Any]]]
    parse: Callable[[Mapping[str, Any]], V | ModelFailure]
    shared_prefix: Callable[[Q], str] | None = None


_ANSWER_CHECK: _Check[AnswerQuestion, AnswerVerdict] = _Check(
    "answer", AnswerVerdict, ANSWER_SYSTEM, answer_tool, answer_content, parse_answer
)
_CHOICE_CHECK: _Check[ChoiceQuestion, ChoiceVerdict] = _Check(
    "choice", ChoiceVerdict, CHOICE_SYSTEM, choice_tool, choice_content, parse_choice, choice_prefix
)


CONTENT_DROPPED = "run content is dropped (content: drop), so no model was asked"


def _truncated(question: Q, max_chars: int) -> Q:
    changes = {
        f.name: truncate(value, max_chars)
        for f in dataclasses.fields(question)
        if isinstance(value := getattr(question, f.name), str)
    }
    return dataclasses.replace(question, **changes)


class AnthropicJudge:
    """Answers the grader's questions with Anthropic's Messages API.

    Args:
        client: an `anthropic.Anthropic` (thread safe), or any object with `.messages.create`.
            Its own timeout and retry settings apply to every call.
        model: the model id; defaults to `ATTEST_OTEL_MODEL`, then `DEFAULT_MODEL`.
        max_concurrency: how many calls of one batch may be in flight at once.
        cache: where verdicts are kept; defaults to the process-wide `DEFAULT_CACHE`.
        content: what of the run may be sent (`attest_otel.content`): `keep`; `truncate`
            every field to its `max_chars` (marker included); `drop`: nothing is sent and
            every question comes back a `ModelFailure` (the call is then `unchecked`).
    """

    def __init__(
        self,
        client: MessagesClient,
        model: str | None = None,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        cache: AnswerCache | None = None,
        content: ContentPolicy = KEEP,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be 1 or more, got {max_concurrency}")
        self.content = content
        self.model = resolve_model(model)
        self._client = client
        self._max_concurrency = max_concurrency
        self._cache = DEFAULT_CACHE if cache is None else cache

    def configured(
        self, model: str | None, *, max_concurrency: int, content: ContentPolicy
    ) -> AnthropicJudge:
        """This judge's client (its key, base URL, timeout and retries) with another model,
        concurrency and content policy: the sidecar's settings over a judge the environment
        made."""
        return AnthropicJudge(
            self._client,
            model,
            max_concurrency=max_concurrency,
            cache=self._cache,
            content=content,
        )

    def __repr__(self) -> str:
        return f"AnthropicJudge(model={self.model!r}, max_concurrency={self._max_concurrency})"

    def answer(self, questions: Sequence[AnswerQuestion]) -> list[AnswerVerdict | ModelFailure]:
        return self._judge(_ANSWER_CHECK, questions)

    def choose(self, questions: Sequence[ChoiceQuestion]) -> list[ChoiceVerdict | ModelFailure]:
        return self._judge(_CHOICE_CHECK, questions)

    def _judge(self, check: _Check[Q, V], questions: Sequence[Q]) -> list[V | ModelFailure]:
        if self.content.mode == "drop":
            dropped = ModelFailure(CONTENT_DROPPED)
            return [dropped for _ in questions]
        if self.content.mode == "truncate":
            questions = [_truncated(q, self.content.max_chars) for q in questions]
        try:
            return self._judge_batch(check, questions)
        except Exception as exc:  # a bug of ours must not take the grade down with it
            logger.exception("the %s check failed", check.kind)
            failure = ModelFailure(f"model check failed: {type(exc).__name__}")
            return [failure for _ in questions]

    def _judge_batch(self, check: _Check[Q, V], questions: Sequence[Q]) -> list[V | ModelFailure]:
        results: list[V | ModelFailure | None] = [None] * len(questions)
        waiting: dict[str, list[int]] = {}  # cache key -> indices of the questions it answers
        for index, question in enumerate(questions):
            key = cache_key(check.kind, self.model, question)
            hit = self._cache.get(key)
            if isinstance(hit, check.verdict_type):
                results[index] = dataclasses.replace(hit, cached=True)
            else:
                waiting.setdefault(key, []).append(index)

        asked = {key: questions[indices[0]] for key, indices in waiting.items()}
        for key, outcome in self._ask(check, asked).items():
            first, *repeats = waiting[key]
            results[first] = outcome
            if isinstance(outcome, ModelFailure):
                for index in repeats:
                    results[index] = outcome
                continue
            self._cache.put(key, outcome)
            for index in repeats:
                results[index] = dataclasses.replace(outcome, cached=True)
        return [r if r is not None else ModelFailure("model was not asked") for r in results]

    def _ask(self, check: _Check[Q, V], asked: Mapping[str, Q]) -> dict[str, V | ModelFailure]:
        outcomes: dict[str, V | ModelFailure] = {}
        for wave in self._waves(check, asked):
            answers = self._map(check, list(wave.values()))
            outcomes.update(zip(wave, answers, strict=True))
        return outcomes

    def _waves(self, check: _Check[Q, V], asked: Mapping[str, Q]) -> list[dict[str, Q]]:
        """One wave, or two when a long shared prefix is worth warming the prompt cache."""
        if check.shared_prefix is None:
            return [dict(asked)]
        groups: dict[str, list[str]] = {}
        for key, question in asked.items():
            groups.setdefault(check.shared_prefix(question), []).append(key)
        first: dict[str, Q] = {}
        later: dict[str, Q] = {}
        for prefix, keys in groups.items():
            warm = len(keys) > 1 and len(prefix) >= _WARM_MIN_PREFIX_CHARS
            for position, key in enumerate(keys):
                (later if warm and position > 0 else first)[key] = asked[key]
        return [wave for wave in (first, later) if wave]

    def _map(self, check: _Check[Q, V], questions: list[Q]) -> list[V | ModelFailure]:
        ask = functools.partial(self._ask_one, check)
        if len(questions) <= 1 or self._max_concurrency == 1:
            return [ask(question) for question in questions]
        workers = min(self._max_concurrency, len(questions))
        with ThreadPoolExecutor(workers, thread_name_prefix="attest-otel-judge") as pool:
            return list(pool.map(ask, questions))

    def _ask_one(self, check: _Check[Q, V], question: Q) -> V | ModelFailure:
        tool = check.tool()
        tool_name = tool["name"]
        try:
            reply = self._client.messages.create(
                model=self.model,
                max_tokens=_MAX_TOKENS,
                system=check.system,
                tools=[tool],
                tool_choice={"type": "tool", "name": tool_name},
                messages=[{"role": "user", "content": check.content(question)}],
            )
        except Exception as exc:  # SDK errors of every kind become the finding's reason
            return ModelFailure(describe_failure(exc))
        try:
            tool_input = verdict_input(reply, tool_name)
            if isinstance(tool_input, ModelFailure):
                return tool_input
            return check.parse(tool_input)
        except Exception as exc:  # a reply shaped unlike the SDK's: the server's fault, one line
            logger.debug("could not read the model reply", exc_info=True)
            logger.warning(
                "could not read the model reply: %s: %s", type(exc).__name__, _first(exc)
            )
            return ModelFailure("model reply could not be read")


def _first(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
