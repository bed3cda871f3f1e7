"""Module-level work for grading processes in tests (spawned processes import it by name)."""

from __future__ import annotations

import re


def backtrack(n: int) -> bool:
    """Python's re on a pattern that backtracks: minutes in C, holding the interpreter."""
    return re.search(r"(x+x+)+y", "x" * n) is not None


def allocate(mib: int) -> int:
    return len(bytearray(mib << 20))


def echo(value: int) -> int:
    return value
