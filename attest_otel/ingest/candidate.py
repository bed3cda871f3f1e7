"""Is this span (or log record) possibly GenAI? One cheap, liberal test used by every decoder.

The decoders call it for every span before they build any attribute dict: a span that passes is
decoded in full, a span that fails becomes a skeleton (ids, parent, name, times, kind, status,
resource and scope, but no attributes or events). It only looks at the span name, the attribute
*keys* (never the values) and the instrumentation scope name, with prefix tests.

It must stay a superset of every dialect detector in `attest_otel.adapt` (docs/dialects.md):
a false positive costs one attribute walk, a false negative hides a span from grading. When a
detector learns a new marker, add its key prefix or span name here too.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

GENAI_KEY_PREFIXES: tuple[str, ...] = (
    "gen_ai.",  # OTel GenAI semconv (old and latest), Vercel v7, Strands, pydantic-ai v3+
    "llm.",  # OpenInference llm.*, OpenLLMetry llm.request.type / llm.request.functions.N
    "openinference.",  # openinference.span.kind
    "traceloop.",  # traceloop.span.kind / entity.* / workflow.name
    "ai.",  # Vercel AI SDK legacy: ai.operationId, ai.toolCall.*, ai.prompt...
    "tool_",  # pydantic-ai v1-2: tool_arguments, tool_response
    "tool.",  # OpenInference tool.name / tool.parameters
    "logfire.",  # Logfire spans (pydantic-ai, openai-agents through logfire)
    "gcp.vertex.agent.",  # Google ADK
    "langsmith.",  # LangSmith OTel export
    "agent",  # agent_name, agent.name, ...
    "final_result",  # pydantic-ai output
    "pydantic_ai.",  # pydantic_ai.all_messages, pydantic_ai.new_message_index
    "all_messages",  # pydantic-ai v1 all_messages_events
    "model_request_parameters",  # pydantic-ai
    "mcp.",  # MCP client/server spans (duplicate tool spans)
    "attest.",  # attest.allowed_tools / attest.tool_fallbacks set by the user
)
"""A span with any attribute key starting with one of these is a GenAI candidate."""

GENAI_NAME_PREFIXES: tuple[str, ...] = (
    "invoke_agent",  # GenAI agent span
    "create_agent",
    "execute_tool",  # GenAI tool span
    "chat",  # GenAI model span `chat {model}`
    "text_completion",
    "generate_content",
    "embeddings",
    "agent",  # pydantic-ai `agent run`, ADK `agent_run [x]`
    "Agent",  # Logfire openai-agents `Agent run: ...`
    "running tool",  # pydantic-ai v1-2 `running tool` / `running tools`
    "tool",  # MCP `tools/call x`, misc `tool ...`
    "Tool",
    "Function:",  # Logfire openai-agents tool spans
    "ai.",  # Vercel legacy `ai.generateText`, `ai.streamText`, `ai.toolCall` ...
    "invocation",  # ADK root
    "call_llm",  # ADK model step
    "execute_event_loop_cycle",  # Strands
    "AutoFunctionInvocationLoop",  # Semantic Kernel
    "handoff",  # OpenAI Agents / Traceloop
    "Handoff",
    "gen_ai",
    "llm",
    "LLM",
    "openai.",  # OpenLLMetry `openai.chat`
    "anthropic.",
    "final_result",
    "step ",  # Vercel v7 `step N`
)
"""A span whose name starts with one of these is a GenAI candidate."""

GENAI_NAME_SUFFIXES: tuple[str, ...] = (
    ".tool",  # Traceloop `{name}.tool`
    ".agent",
    ".workflow",
    ".task",
    ".chat",
    ".completion",
    ".embeddings",
    ".doGenerate",  # Vercel `ai.generateText.doGenerate`
    ".doStream",
)
"""A span whose name ends with one of these is a GenAI candidate."""

GENAI_SCOPE_MARKERS: tuple[str, ...] = (
    "gen_ai",
    "genai",
    "openai",
    "anthropic",
    "bedrock",
    "vertex",
    "openinference",
    "traceloop",
    "pydantic-ai",
    "pydantic_ai",
    "strands",
    "langchain",
    "langsmith",
    "llama_index",
    "llamaindex",
    "crewai",
    "smolagents",
    "semantickernel",
    "semantic_kernel",
    "autogen",
    "agents",
    "mistral",
    "cohere",
    "ollama",
    "groq",
    "litellm",
    "haystack",
    "mlflow",  # MLflow tracing: `mlflow.tracing.provider`
    "openlit",  # OpenLIT: a failed tool span may carry no attribute at all
    "mcp",
)
"""A scope whose (lower-cased) name contains one of these marks all its spans as candidates."""

GENAI_EVENT_PREFIXES: tuple[str, ...] = ("gen_ai.", "ai.", "llm.")
"""A log record whose event name starts with one of these is kept."""


def _by_first_char(prefixes: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for prefix in prefixes:
        out.setdefault(prefix[:1], []).append(prefix)
    return {first: tuple(group) for first, group in out.items()}


# `str.startswith` with a tuple of 17 prefixes costs ~0.7 us per key; looking up the prefixes
# that share the key's first character first costs ~0.1 us for the usual non-matching key.
KEY_PREFIXES_BY_FIRST_CHAR = _by_first_char(GENAI_KEY_PREFIXES)
NAME_PREFIXES_BY_FIRST_CHAR = _by_first_char(GENAI_NAME_PREFIXES)
NAME_SUFFIXES = frozenset(GENAI_NAME_SUFFIXES)
"""Every suffix is `.word`: compare the text after the name's last dot."""


def is_genai_key(key: str) -> bool:
    prefixes = KEY_PREFIXES_BY_FIRST_CHAR.get(key[:1])
    return prefixes is not None and key.startswith(prefixes)


_SCOPE_MARKERS = re.compile("|".join(re.escape(marker) for marker in GENAI_SCOPE_MARKERS))


def is_genai_scope(scope_name: str) -> bool:
    """Whether every span of this instrumentation scope is a candidate (checked once per scope).

    The Vercel AI SDK's scope is literally `ai`.
    """
    if not scope_name:
        return False
    if type(scope_name) is str and len(scope_name) <= 1024:  # a cache must not pin huge names
        return _scope_verdict(scope_name)
    return _scope_check(scope_name)  # malformed input fails exactly as it always did


@functools.lru_cache(maxsize=1024)
def _scope_verdict(scope_name: str) -> bool:
    """`_scope_check`, remembered: an SDK exporting one span per request repeats its scope in
    every request, and a request repeats it per resource, so the walkers ask again and again
    about a handful of names. Bounded, since scope names come from the senders."""
    return _scope_check(scope_name)


def _scope_check(scope_name: str) -> bool:
    low = scope_name.lower()
    return low == "ai" or _SCOPE_MARKERS.search(low) is not None


def is_genai_name(name: str) -> bool:
    """Whether the span name alone marks a candidate."""
    prefixes = NAME_PREFIXES_BY_FIRST_CHAR.get(name[:1])
    if prefixes is not None and name.startswith(prefixes):
        return True
    dot = name.rfind(".")
    return dot >= 0 and name[dot:] in NAME_SUFFIXES


def is_genai_candidate(name: str, keys: Iterable[str], scope_name: str = "") -> bool:
    """Cheap, liberal test: may this span matter to grading?

    `keys` are the span's attribute keys; only their prefixes are looked at, and the loop stops
    at the first hit. The decoders inline the same test over their own attribute containers.
    """
    if is_genai_name(name) or is_genai_scope(scope_name):
        return True
    return any(is_genai_key(key) for key in keys)


def is_genai_log(event_name: str, keys: Iterable[str], scope_name: str = "") -> bool:
    """The same test for a log record: old GenAI conventions put message content in log events."""
    if event_name.startswith(GENAI_EVENT_PREFIXES) or is_genai_scope(scope_name):
        return True
    return any(is_genai_key(key) for key in keys)
