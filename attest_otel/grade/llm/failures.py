"""Turns an exception from a model call into the short sentence a finding's reason shows.

The judge never raises: a failed call becomes `unchecked` (or `review`) in the report, and
the user reads why there, so the sentence names the cause plainly ("model call failed:
500 Internal Server Error", "model call timed out") without an SDK traceback.
"""

from __future__ import annotations

import logging
from http import HTTPStatus

__all__ = ["describe_failure"]

logger = logging.getLogger(__name__)

_MAX_DETAIL_CHARS = 160
# Anthropic's own status codes that http.HTTPStatus does not know.
_EXTRA_PHRASES = {529: "Overloaded"}


def _short(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _MAX_DETAIL_CHARS:
        return text[: _MAX_DETAIL_CHARS - 3].rstrip() + "..."
    return text


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return _EXTRA_PHRASES.get(status, "error")


def describe_failure(exc: BaseException) -> str:
    # Imported here, not at module level: only a failed call pays for it.
    import anthropic

    if isinstance(exc, anthropic.APITimeoutError):
        logger.debug("model call timed out", exc_info=exc)
        return "model call timed out"
    if isinstance(exc, anthropic.APIConnectionError):
        logger.debug("model call could not connect", exc_info=exc)
        return "model call failed: could not connect to the model API"
    if isinstance(exc, anthropic.APIStatusError):
        logger.debug("model call failed with HTTP %s", exc.status_code, exc_info=exc)
        text = f"model call failed: {exc.status_code} {_phrase(exc.status_code)}"
        detail = getattr(exc, "api_message", None)
        if isinstance(detail, str) and detail.strip().lower() != _phrase(exc.status_code).lower():
            text += f" ({_short(detail)})"
        return text
    if isinstance(exc, anthropic.AnthropicError):
        logger.debug("model call failed", exc_info=exc)
        return f"model call failed: {_short(str(exc)) or type(exc).__name__}"
    if isinstance(exc, ValueError):
        # The SDK decodes the body itself and lets a decoding error through as it is: a
        # garbage reply (not JSON, not UTF-8) is the server's fault, and one line says so.
        logger.debug("model reply could not be decoded", exc_info=exc)
        detail = _short(str(exc))
        logger.warning("model reply could not be read: %s: %s", type(exc).__name__, detail)
        return f"model call failed: the reply could not be read ({type(exc).__name__})"
    # Not the SDK's: a custom client or a bug of ours. Worth a warning with the traceback.
    logger.warning("model call failed unexpectedly", exc_info=exc)
    detail = _short(str(exc))
    return f"model call failed: {type(exc).__name__}" + (f": {detail}" if detail else "")
