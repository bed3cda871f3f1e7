"""Spans -> runs: one module per span dialect, the per-span detection, and the run assembler.

The CLI and the sidecar call exactly `runs_from_spans` (or `runs_from_file`); everything else
here is for the dialect modules and their tests.
"""

from attest_otel.adapt.base import Dialect, Role
from attest_otel.adapt.detect import DIALECTS, detect
from attest_otel.adapt.runs import TraceRuns, runs_from_file, runs_from_spans

__all__ = [
    "DIALECTS",
    "Dialect",
    "Role",
    "TraceRuns",
    "detect",
    "runs_from_file",
    "runs_from_spans",
]
