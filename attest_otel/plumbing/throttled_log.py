"""A warning that can happen once per request, logged once per interval with a count.

A full disk fails every request's write the same way: one line each buried the first one
under thousands (12,332 lines in issue 26). The operator needs the first occurrence at
once, then how many followed, not each of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Throttled"]


class Throttled:
    """`log(message)` at `level`, at most once per `interval_s`; the occurrences in
    between are counted and the next line says how many there were."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int = logging.WARNING,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.level = level
        self.interval_s = interval_s
        self.total = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._since = 0
        self._logged_at: float | None = None

    def __call__(self, message: str, *args: object) -> None:
        with self._lock:
            self.total += 1
            self._since += 1
            now = self._clock()
            if self._logged_at is not None and now - self._logged_at < self.interval_s:
                return
            count, self._since, self._logged_at = self._since, 0, now
            total = self.total
        self.logger.log(
            self.level,
            message + " (%d time(s) since the last such line, %d in all; at most one line per %gs)",
            *args,
            count,
            total,
            self.interval_s,
        )
