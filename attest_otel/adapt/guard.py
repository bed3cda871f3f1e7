"""What the run assembler does with broken traces: every decision counted, and logged once
per trace, never an exception or a hang.

    duplicate_span_ids  the same span id twice in a trace (an exporter retried): the first
                        span is kept, the others are dropped
    self_parents        a span that names itself as parent: treated as a root
    parent_cycles       spans whose parents form a loop (A -> B -> A): the loop is cut above
                        its earliest span, which becomes a root
    missing_parents     a span whose parent never arrived (partial trace): treated as a root
                        of its own subtree
    clock_skew          a span that ends before it starts, or starts more than a day from
                        the trace's median start (a clock far in the future or past): kept,
                        ordered by its own times
    unreadable_spans    a span no dialect could classify without an error (a value of a
                        type no convention uses): treated as a span no dialect claims

Duplicates and missing parents are routine in at-least-once, streamed delivery and are
logged at INFO; the others mean broken instrumentation and are logged as a WARNING.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

log = logging.getLogger("attest_otel.adapt.runs")

DAY_NS = 86_400 * 1_000_000_000

DUPLICATE_SPAN_IDS = "duplicate_span_ids"
SELF_PARENTS = "self_parents"
PARENT_CYCLES = "parent_cycles"
MISSING_PARENTS = "missing_parents"
CLOCK_SKEW = "clock_skew"
UNREADABLE_SPANS = "unreadable_spans"
ADAPTER_ERRORS = "adapter_errors"

_ROUTINE = frozenset((DUPLICATE_SPAN_IDS, MISSING_PARENTS))
_WHAT = {
    DUPLICATE_SPAN_IDS: "duplicate span ids (first kept)",
    SELF_PARENTS: "spans their own parent (made roots)",
    PARENT_CYCLES: "parent cycles (cut at the earliest span)",
    MISSING_PARENTS: "spans whose parent never arrived (made roots)",
    CLOCK_SKEW: "spans with a clock far off or ending before they start (kept)",
    UNREADABLE_SPANS: "spans no dialect could read (ignored)",
    ADAPTER_ERRORS: "errors rebuilding the runs (trace skipped)",
}


class TreeNode(Protocol):
    parent: Any

    @property
    def key(self) -> tuple[int, int, str]: ...


def link(nodes: dict[str, Any], anomalies: dict[str, int]) -> list[Any]:
    """Link each node to its parent node; return the roots. Self-parents, missing parents and
    parent cycles become roots, counted in `anomalies`. Linear, iterative."""
    roots: list[Any] = []
    self_parents = missing = 0
    for node in nodes.values():
        parent_id = node.span.parent_id
        if not parent_id:
            roots.append(node)
            continue
        parent = nodes.get(parent_id)
        if parent is None:
            missing += 1
            roots.append(node)
        elif parent is node:
            self_parents += 1
            roots.append(node)
        else:
            node.parent = parent
    cycles = _cut_cycles(nodes.values(), roots)
    for name, count in ((SELF_PARENTS, self_parents), (MISSING_PARENTS, missing)):
        if count:
            anomalies[name] = anomalies.get(name, 0) + count
    if cycles:
        anomalies[PARENT_CYCLES] = anomalies.get(PARENT_CYCLES, 0) + cycles
    return roots


def _cut_cycles(nodes: Iterable[Any], roots: list[Any]) -> int:
    """Cut every parent loop at its earliest node (which becomes a root); how many loops."""
    done: set[int] = set()
    cycles = 0
    for start in nodes:
        if id(start) in done:
            continue
        path: list[Any] = []
        on_path: dict[int, int] = {}
        node = start
        while node is not None:
            key = id(node)
            if key in done:
                break
            if key in on_path:
                loop = path[on_path[key] :]
                head = min(loop, key=lambda n: n.key)
                head.parent = None
                roots.append(head)
                cycles += 1
                break
            on_path[key] = len(path)
            path.append(node)
            node = node.parent
        done.update(on_path)
    return cycles


def clock_skew(spans: list[Any]) -> int:
    """Spans ending before they start, or starting more than a day from the median start."""
    starts = sorted([s.start_ns for s in spans])
    median = starts[len(starts) // 2] if starts else 0
    skewed = 0
    for s in spans:  # a loop, not `sum(1 for ...)`: this runs for every span of a trace
        start = s.start_ns
        if s.end_ns < start or abs(start - median) > DAY_NS:
            skewed += 1
    return skewed


def report(trace_id: str, anomalies: dict[str, int]) -> None:
    """One log record for a trace's anomalies: INFO if all routine, else WARNING."""
    if not anomalies:
        return
    level = logging.INFO if anomalies.keys() <= _ROUTINE else logging.WARNING
    if not log.isEnabledFor(level):
        return
    text = ", ".join(f"{count} {_WHAT.get(name, name)}" for name, count in anomalies.items())
    log.log(level, "trace %s: %s", trace_id, text)


class Claimable:
    """Tool calls that a model request may still claim by name (`runs._claim_by_name`):
    the first in list order that is unclaimed, has no call id and started at or after a
    time. A max-tree per name over the eligible calls' starts answers in O(log n); a plain
    scan is quadratic when a large trace's tool spans carry no call ids."""

    __slots__ = ("_by_name", "_eligible")

    def __init__(self, eligible: Callable[[Any], bool]) -> None:
        self._eligible = eligible
        self._by_name: dict[Any, _MaxTree] = {}

    def add(self, call: Any) -> None:
        if not self._eligible(call):
            return
        name = call.name if _hashable(call.name) else repr(call.name)
        tree = self._by_name.get(name)
        if tree is None:
            tree = self._by_name[name] = _MaxTree()
        tree.append(call, call.start)

    def first(self, name: Any, since: int) -> Any:
        """The first eligible call named `name` that started at or after `since`, or None."""
        tree = self._by_name.get(name if _hashable(name) else repr(name))
        if tree is None:
            return None
        while True:
            index = tree.first_at_least(since)
            if index < 0:
                return None
            call = tree.items[index]
            if self._eligible(call):
                return call
            tree.remove(index)  # claimed since, or given an id: never eligible again


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


_NONE = float("-inf")


class _MaxTree:
    """Append-only items with a key; remove one; find the first with key >= x."""

    __slots__ = ("items", "size", "tree")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.size = 1
        self.tree: list[float] = [_NONE, _NONE]

    def append(self, item: Any, key: int) -> None:
        index = len(self.items)
        self.items.append(item)
        if index >= self.size:
            self._grow()
        self._set(index, key)

    def remove(self, index: int) -> None:
        self._set(index, _NONE)

    def first_at_least(self, key: int) -> int:
        tree = self.tree
        if tree[1] < key:
            return -1
        node = 1
        while node < self.size:
            node = 2 * node if tree[2 * node] >= key else 2 * node + 1
        return node - self.size

    def _set(self, index: int, key: float) -> None:
        tree = self.tree
        node = index + self.size
        tree[node] = key
        node //= 2
        while node:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2

    def _grow(self) -> None:
        old_size, old = self.size, self.tree
        self.size *= 2
        self.tree = [_NONE] * (2 * self.size)
        self.tree[self.size : self.size + old_size] = old[old_size : 2 * old_size]
        for node in range(self.size - 1, 0, -1):
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])


def number(nodes: Iterable[Any], roots: list[Any]) -> None:
    """Give each node of a forest its `place`: (entry, exit, depth) of an iterative walk, so
    that "is A an ancestor of B" is two comparisons. Every node is reached: `link` made a
    root of every node whose parent chain did not end in one."""
    children: dict[int, list[Any]] = {}
    for node in nodes:
        parent = node.parent
        if parent is not None:
            below = children.get(id(parent))
            if below is None:
                children[id(parent)] = [node]
            else:
                below.append(node)
    clock = 0
    stack: list[tuple[Any, int, bool]] = [(root, 0, False) for root in reversed(roots)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth, leaving = pop()
        if leaving:
            node.place = (node.place[0], clock, depth)
            clock += 1
            continue
        below = children.get(id(node))
        if below is None:
            # A leaf (most spans): entered and left in one step, as the walk would.
            node.place = (clock, clock + 1, depth)
            clock += 2
            continue
        node.place = (clock, clock, depth)
        clock += 1
        push((node, depth, True))
        for child in below:
            push((child, depth + 1, False))
