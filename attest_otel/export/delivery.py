"""What an export sent where, and what failed: the exporters' silent FAILUREs made visible.

The SDK's exporters never raise: they log and return FAILURE, and the batch processors
drop the result. A CLI that must exit 4 when telemetry did not arrive, and a sidecar that
must count failed exports, both need that result, so every exporter we build is wrapped
in one that tallies it (`tally.py`), and a flush turns the tallies into this report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attest_otel.errors import ExportError

__all__ = ["ENCODE_SIGNAL", "ExportReport", "SignalReport"]


_NOT_IN_TIME = "not sent before the flush timed out"
ENCODE_SIGNAL = "encode"
"""Pseudo-signal of grades whose telemetry could not even be built (a bug, or bad data)."""


def _base(destination: str, signal: str) -> str:
    """`http://host:4318/v1/logs (http/protobuf)` -> `http://host:4318 (http/protobuf)`."""
    return destination.replace(f"/v1/{signal} ", " ")


def _n(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


@dataclass(frozen=True, slots=True)
class SignalReport:
    """One output: `signal` is traces, logs, metrics or prometheus.

    `pending` counts items handed to the SDK but neither sent nor failed when the report
    was taken: after a flush, those did not get out in time (or a full queue dropped them).
    """

    signal: str
    destination: str
    unit: str
    sent: int = 0
    failed: int = 0
    pending: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.pending == 0 and self.error is None

    def describe(self) -> str:
        if self.signal == ENCODE_SIGNAL and not self.ok:
            return f"could not build the telemetry of {_n(self.failed, self.unit)}: {self.error}"
        if self.ok:
            return f"{_n(self.sent, self.unit)} to {self.destination}"
        lost = self.failed + self.pending
        what = _n(lost, self.unit) if lost else self.signal
        reason = self.error or _NOT_IN_TIME
        return f"could not export {what} to {self.destination}: {reason}"


@dataclass(frozen=True, slots=True)
class ExportReport:
    signals: Sequence[SignalReport] = ()

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.signals)

    @property
    def failures(self) -> list[SignalReport]:
        return [s for s in self.signals if not s.ok]

    def get(self, signal: str) -> SignalReport | None:
        return next((s for s in self.signals if s.signal == signal), None)

    def summary(self) -> str:
        """One line for the CLI: what was sent, or else what failed.

        Failures with the same reason at the same endpoint are said once ("could not export
        1 span, 13 log records and 19 metric points to ...: connection refused"), since a
        dead collector fails all three signals alike.
        """
        if not self.signals:
            return "no telemetry outputs configured"
        failures = self.failures
        if not failures:
            return "sent " + ", ".join(s.describe() for s in self.signals)
        groups: dict[tuple[str, str], list[SignalReport]] = {}
        for s in failures:
            key = (_base(s.destination, s.signal), s.error or _NOT_IN_TIME)
            groups.setdefault(key, []).append(s)
        lines = []
        for (destination, reason), members in groups.items():
            if len(members) == 1:
                lines.append(members[0].describe())
                continue
            amounts = [_n(m.failed + m.pending, m.unit) for m in members]
            what = ", ".join(amounts[:-1]) + " and " + amounts[-1]
            lines.append(f"could not export {what} to {destination}: {reason}")
        return "; ".join(lines)

    def raise_for_failure(self) -> None:
        """ExportError (exit 4) naming every output that failed; nothing when all arrived."""
        if not self.ok:
            raise ExportError(self.summary())
