"""Verdicts already paid for, so the same question never costs a second model call.

Graders see the same question often: the sidecar re-grades a trace when a late span
arrives, a CLI user grades a run again after changing the policy, and a run repeats a
tool call. The key is a hash of everything the model would see, so a hit is exact.
Only verdicts go in: a failure may be transient, and caching it would make it permanent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Literal

from attest_otel.grade.questions import AnswerQuestion, AnswerVerdict, ChoiceQuestion, ChoiceVerdict

__all__ = [
    "DEFAULT_CACHE",
    "DEFAULT_MAX_ENTRIES",
    "AnswerCache",
    "CheckKind",
    "Verdict",
    "cache_key",
]

CheckKind = Literal["answer", "choice"]
Verdict = AnswerVerdict | ChoiceVerdict

DEFAULT_MAX_ENTRIES = 4096


def cache_key(kind: CheckKind, model: str, question: AnswerQuestion | ChoiceQuestion) -> str:
    """A sha256 over the kind, the model and every field of the question.

    JSON of a list keeps field boundaries unambiguous ("ab" + "c" differs from "a" + "bc").
    """
    fields = [kind, model, *dataclasses.astuple(question)]
    blob = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
    """A bounded, thread-safe LRU map from `cache_key` to a verdict.

    Bounded because the sidecar lives for weeks; `max_entries=0` turns caching off.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be 0 or more, got {max_entries}")
        self._max_entries = max_entries
        self._entries: OrderedDict[str, Verdict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Verdict | None:
        with self._lock:
            verdict = self._entries.get(key)
            if verdict is not None:
                self._entries.move_to_end(key)
            return verdict

    def put(self, key: str, verdict: Verdict) -> None:
        if self._max_entries == 0:
            return
        # Stored as not-cached; the judge marks the copy it hands out on a hit.
        stored = dataclasses.replace(verdict, cached=False)
        with self._lock:
            self._entries[key] = stored
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


DEFAULT_CACHE = AnswerCache()
"""Shared by every judge that is not given its own, so `current_judge()` can build a fresh
judge per grade and still hit answers an earlier judge paid for."""
