"""Spans -> runs: one module per span dialect, the per-span detection, and the run assembler.

`attest_otel.pipeline` calls exactly `runs_from_spans`; everything else
here is for the dialect modules and their tests.
"""

from attest_otel.adapt.base import Dialect, Role
from attest_otel.adapt.detect import DIALECTS, claimed, detect
from attest_otel.adapt.runs import TraceRuns, runs_from_spans

__all__ = [
    "DIALECTS",
    "Dialect",
    "Role",
    "TraceRuns",
    "claimed",
    "detect",
    "runs_from_spans",
]
