"""How well the code as it is reads labelled framework fixtures: calls, tasks, answers, verdicts.

Issue 10 asks that generality be measured before code is written for a framework, and again
after; this prints the figures for the note. It grades each `<name>.labels.json` in
tests/fixtures/traces the way tests/adapt/test_fixtures.py does (offline, the label's policy
unless the trace carries its own) and scores, per fixture prefix (framework):

* calls: labelled calls whose name, error flag and offline verdict came out right, in order,
  in the run matched to the label's run (same agent name, else the same position);
* task / answer: labelled runs whose task / final answer came out exactly right;
* runs: labelled runs whose agent, calls, task, answer and verdict were all right;
* extra runs: runs rebuilt that no label accounts for;
* verdicts: labelled runs whose offline verdict came out as labelled (`ok`), as `review` (the
  run could not be read whole, docs/rules.md), or otherwise (`wrong`); `fail->pass` counts the
  runs labelled `fail` that came out a plain `pass`, the worst answer a grader can give.

    .venv/bin/python tools/fixture_score.py [PREFIX ...] [--detail] [--dialects FILE ...]

PREFIX keeps fixtures whose name starts with it (e.g. `crewai`); `--detail` prints what
differed, one line per run; `--dialects FILE` (repeatable) reads the traces through the
dialects a YAML file declares (asked before the built-in ones), to measure a declared
dialect against the generic reader.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from attest_otel.grade import grader, rules
from attest_otel.model import Run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fixtures.labels import rebuild

TRACES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "traces"


DIALECTS: tuple[Any, ...] = ()
"""Declared dialects (`--dialects`), passed to every rebuild."""


def _rebuild(label_path: Path, label: dict[str, Any]) -> list[Run]:
    return rebuild(label_path, label, DIALECTS)


def _match(runs: list[Run], want: list[dict[str, Any]]) -> list[Run | None]:
    free = list(range(len(runs)))
    out: list[Run | None] = []
    for i, w in enumerate(want):
        pick = next((j for j in free if runs[j].agent == w["agent"]), None)
        if pick is None and i < len(runs) and i in free:
            pick = i
        if pick is not None:
            free.remove(pick)
        out.append(runs[pick] if pick is not None else None)
    return out


def score(label_path: Path) -> tuple[dict[str, int], list[str]]:
    label = json.loads(label_path.read_text(encoding="utf-8"))
    s: dict[str, int] = defaultdict(int)
    notes: list[str] = []
    try:
        runs = _rebuild(label_path, label)
    except Exception as exc:  # a measurement: a crash scores zero and is reported
        runs = []
        notes.append(f"crashed: {exc!r:.120}")
    want_runs = label["runs"]
    matched = _match(runs, want_runs)
    s["extra_runs"] = max(0, len(runs) - sum(m is not None for m in matched))
    for want, run in zip(want_runs, matched, strict=True):
        s["runs_total"] += 1
        s["calls_total"] += len(want["calls"])
        if run is None:
            notes.append(f"{want['agent']}: no run")
            s["verdict_wrong"] += 1
            continue
        result = grader.tool_use(run)
        if result.verdict == want["verdict_offline"]:
            s["verdict_right"] += 1
        elif result.verdict == "review":
            s["verdict_review"] += 1
        else:
            s["verdict_wrong"] += 1
        s["fail_as_pass"] += want["verdict_offline"] == "fail" and result.verdict == "pass"
        got_calls = [
            (c.name, rules.is_error(c), f.verdict)
            for (_, c), f in zip(run.tool_calls, result.findings, strict=True)
        ]
        want_calls = [(c["name"], c["is_error"], c["verdict_offline"]) for c in want["calls"]]
        right = sum(g == w for g, w in zip(got_calls, want_calls, strict=False))
        s["calls_right"] += right
        task_ok = run.task == want["task"]
        answer_ok = run.final_answer == want["final_answer"]
        s["task_right"] += task_ok
        s["answer_right"] += answer_ok
        whole = (
            run.agent == want["agent"]
            and got_calls == want_calls
            and task_ok
            and answer_ok
            and result.verdict == want["verdict_offline"]
        )
        s["runs_right"] += whole
        if not whole:
            bits = []
            if run.agent != want["agent"]:
                bits.append(f"agent {run.agent!r}")
            if got_calls != want_calls:
                bits.append(f"calls {got_calls} want {want_calls}")
            if not task_ok:
                bits.append(f"task {run.task!r:.80}")
            if not answer_ok:
                bits.append(f"answer {run.final_answer!r:.80}")
            if result.verdict != want["verdict_offline"]:
                bits.append(f"verdict {result.verdict}")
            notes.append(f"{want['agent']}: " + "; ".join(bits))
    return s, notes


def main(argv: list[str]) -> int:
    global DIALECTS
    from attest_otel.adapt.dialect_config import load_dialects
    from attest_otel.errors import PolicyError

    argv = list(argv)
    files: list[str] = []
    while "--dialects" in argv:
        at = argv.index("--dialects")
        if at + 1 >= len(argv):
            print("--dialects needs a FILE", file=sys.stderr)
            return 2
        files.append(argv.pop(at + 1))
        argv.pop(at)
    try:
        DIALECTS = tuple(d for f in files for d in load_dialects(f))
    except PolicyError as e:
        print(f"fixture_score: {e}", file=sys.stderr)
        return 2
    detail = "--detail" in argv
    prefixes = [a for a in argv if not a.startswith("--")]
    labels = sorted(TRACES.glob("*.labels.json"))
    if prefixes:
        labels = [p for p in labels if p.name.startswith(tuple(prefixes))]
    if not labels:
        print("no labelled fixtures match", file=sys.stderr)
        return 2
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path in labels:
        framework = path.name.split("__")[0]
        s, notes = score(path)
        for k, v in s.items():
            totals[framework][k] += v
        if detail:
            for n in notes:
                print(f"  {path.name.removesuffix('.labels.json')}: {n}")
    header = (
        f"{'framework':40} {'calls right':>12} {'task':>9} {'answer':>9}"
        f" {'runs right':>11} {'extra':>6}   verdict ok/review/wrong {'fail->pass':>10}"
    )
    print(header)
    grand: dict[str, int] = defaultdict(int)
    for fw, s in sorted(totals.items()):
        for k, v in s.items():
            grand[k] += v
        print(_row(fw, s))
    if len(totals) > 1:
        print(_row("all", grand))
    return 0


def _row(name: str, s: dict[str, int]) -> str:
    def frac(a: str, b: str) -> str:
        return f"{s[a]}/{s[b]}"

    return (
        f"{name:40} {frac('calls_right', 'calls_total'):>12} {frac('task_right', 'runs_total'):>9} "
        f"{frac('answer_right', 'runs_total'):>9} {frac('runs_right', 'runs_total'):>11} "
        f"{s['extra_runs']:>6}   {s['verdict_right']:>9}/{s['verdict_review']}/"
        f"{s['verdict_wrong']:<8} {s['fail_as_pass']:>10}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
