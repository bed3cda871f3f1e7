"""Which entries of the sidecar's policy name an agent no run had, said once.

The CLI warns about such an entry (`billing_agnet`) after grading a file, with the closest
name it saw; a sidecar never finishes, so it says it once its first runs are graded (after
`AFTER_RUNS` runs, or `AFTER_S` seconds after the first): one WARNING per entry in the log,
and the same words in `/readyz`'s answer, where an operator checking the sidecar looks.
An entry that matches no run grades nothing, and its agent runs with every tool allowed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from attest_otel.policy import Policy

__all__ = ["AFTER_RUNS", "AFTER_S", "PolicyWatch"]

log = logging.getLogger(__name__)

AFTER_RUNS = 10
AFTER_S = 60.0


class PolicyWatch:
    def __init__(
        self,
        policy: Policy,
        *,
        after_runs: int = AFTER_RUNS,
        after_s: float = AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.after_runs = after_runs
        self.after_s = after_s
        self.clock = clock
        self._seen: set[str] = set()
        self._runs = 0
        self._first: float | None = None
        self._said: list[str] | None = None
        self._lock = threading.Lock()

    def saw(self, agent: str | None) -> None:
        """One graded run's agent; says the unused entries once it has seen enough."""
        if self._said is not None or not self.policy.agents:
            return
        with self._lock:
            if self._said is not None:
                return
            if agent:
                self._seen.add(agent)
            self._runs += 1
            now = self.clock()
            if self._first is None:
                self._first = now
            if self._runs < self.after_runs and now - self._first < self.after_s:
                return
            self._said = self.policy.unused(self._seen)
        for line in self._said:
            log.warning(line)

    @property
    def detail(self) -> str:
        """The unused entries, for `/readyz`; empty until said, or when there are none."""
        return "; ".join(self._said or ())
