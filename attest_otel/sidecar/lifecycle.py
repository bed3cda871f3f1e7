"""One lifecycle for every part of the sidecar, in the OpenTelemetry Collector's manner.

Each part (a receiver, a forwarder, the buffer, the grading pool, the store, ...) is built
by a factory from its own config section and handed what it consumes then (`parts`), so
nothing is wired by assignment once it exists. A built part does no I/O until `start()`;
`shutdown(timeout_s)` ends it within a duration in seconds, the same verb and unit for all,
and says whether everything it held was delivered (True) or had to be left (False).

`Lifecycle` starts the parts in the order given and shuts them down in the reverse order:
the receivers, started last, stop first, and the durable buffer, opened early, closes after
everything that could still release records into it. A start that fails undoes the starts
before it (their shutdown, in reverse) and raises its own error, so a sidecar that cannot
start leaves no thread, port or lock behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

__all__ = ["UNDO_S", "Component", "Hook", "Lifecycle", "Part"]

log = logging.getLogger(__name__)

UNDO_S = 2.0
"""How long undoing a failed start may take: what was started had no traffic yet."""


class Component(Protocol):
    """What `Lifecycle` runs: a part of the sidecar."""

    def start(self) -> object: ...

    def shutdown(self, timeout_s: float) -> bool: ...


class Part(NamedTuple):
    """A component in the lifecycle, with its name in the log and the least time its
    shutdown gets even past the deadline (a flush of telemetry that would otherwise get
    none at all)."""

    name: str
    component: Component
    min_shutdown_s: float = 0.0


class Hook:
    """A component whose start and shutdown are two functions (a lock taken, released)."""

    def __init__(
        self,
        start: Callable[[], object] | None = None,
        shutdown: Callable[[float], bool | None] | None = None,
    ) -> None:
        self._start = start
        self._shutdown = shutdown

    def start(self) -> None:
        if self._start is not None:
            self._start()

    def shutdown(self, timeout_s: float) -> bool:
        if self._shutdown is None:
            return True
        return self._shutdown(timeout_s) is not False


class Lifecycle:
    """Starts parts in order, shuts them down in reverse; see the module docstring."""

    def __init__(self, parts: Sequence[Part], clock: Callable[[], float] = time.monotonic) -> None:
        self.parts = tuple(parts)
        self._clock = clock
        self._started: list[Part] = []

    @property
    def started(self) -> tuple[str, ...]:
        """The names of the parts started and not yet shut down, in start order."""
        return tuple(part.name for part in self._started)

    def start(self) -> None:
        """Starts every part in order; on a failure, shuts down those started (in reverse,
        within `UNDO_S`) and raises the failure."""
        for part in self.parts:
            try:
                part.component.start()
            except BaseException:
                self.shutdown(UNDO_S)
                raise
            self._started.append(part)

    def shutdown(self, timeout_s: float) -> bool:
        """Shuts down what was started, in reverse order, within `timeout_s` in all: each
        part gets what is left of it (at least its `min_shutdown_s`). A part that raises is
        logged and counted as not delivered; the others still shut down. Idempotent."""
        deadline = self._clock() + timeout_s
        delivered = True
        while self._started:
            part = self._started.pop()
            left = max(part.min_shutdown_s, deadline - self._clock())
            try:
                delivered &= part.component.shutdown(left)
            except Exception:
                log.exception("%s: shutdown failed", part.name)
                delivered = False
        return delivered
