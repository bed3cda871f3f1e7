"""agentevals against attest-otel's full path: spans/s on the same fixture traces, same run.

Issue 12 asks for `grade --file` on the fixtures to be ahead of agentevals (0.11), measured
with agentevals in a venv of its own. Both sides get every `tests/fixtures/traces/*.json` file as
its bytes (OTLP/JSON lines) and do, per fixture:

- attest-otel: `bench_grade.full_path`, row (a) of bench_grade.py: `decode_bytes` +
  `runs_from_spans` + `grade(run, judge=None)`.
- agentevals-cli: what `agentevals run FILE --eval-set GOLDEN -m tool_trajectory_avg_score` does
  once its process is up, through the library calls that command makes (so no CLI start-up is
  timed): `loader.load_telemetry_text` (decode the OTLP/JSON, build the traces) and
  `runner.run_evaluation_from_traces` with the built-in `tool_trajectory_avg_score` metric
  (extract the conversation, turn it into ADK invocations, score its tool calls against the
  golden ones with ADK's TrajectoryEvaluator). That metric is agentevals' only tool-use check
  that needs no LLM judge, so it is the closest to attest's rules without a model. Its golden
  eval set is built once per fixture, untimed, from the fixture's own turns with agentevals'
  `adk_bridge.eval_set_from_turns`, so every trajectory matches in full.

Fairness:
- agentevals runs in bench/.venv-agentevals (`make bench-agentevals`), never in .venv: this file
  re-runs itself there as a worker, started once, so its imports and set-up are not timed. The
  worker times its own rounds and answers each with one JSON line.
- Both sides run the same `_timed` loop on the same CPU (the worker inherits the pin) and take
  turns round by round; spans/s is the median over the rounds, both from the same run.
- Both are timed on the same fixtures: those in which agentevals finds at least one tool call.
  The rest are counted and named by framework: files it cannot load, traces from which it
  extracts no invocation, and invocations without tool calls (it would only compare two empty
  trajectories). Spans per pass are attest's count of the file's spans, the same for both.
- The worker switches agentevals' log warnings off, so no time goes to writing stderr.

Run: `make bench-agentevals`, or `.venv/bin/python bench/bench_agentevals.py [--quick]`. Not a
test. bench_grade.py prints this comparison's summary line when the venv exists.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures" / "traces"
VENV_PYTHON = HERE / ".venv-agentevals" / "bin" / "python"
NOT_INSTALLED = (
    "agentevals (0.11): not compared (no bench/.venv-agentevals; `make bench-agentevals` "
    "builds it and runs bench/bench_agentevals.py)"
)


def _timed(one_pass: Callable[[], object], seconds: float) -> tuple[int, float]:
    """Whole passes until `seconds` have gone by: the one loop both sides are timed with."""
    gc.collect()
    passes = 0
    start = time.perf_counter()
    while True:
        one_pass()
        passes += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return passes, elapsed


# -- the agentevals side: runs in bench/.venv-agentevals -----------------------------------


def worker() -> int:
    """Set up, print {"version", "status"}, then answer each line on stdin (seconds) with one
    timed round, {"passes", "elapsed"}. Imports only agentevals and the standard library."""
    import asyncio
    import logging
    from importlib.metadata import version

    from agentevals.adk_bridge import eval_set_from_turns, load_eval_set_from_dict
    from agentevals.config import BuiltinMetricDef, EvalParams
    from agentevals.genai.extract import extract_conversation
    from agentevals.loader import load_telemetry_text
    from agentevals.runner import evaluation_groups, run_evaluation_from_traces

    reply, sys.stdout = sys.stdout, sys.stderr  # nothing agentevals prints can garble a reply
    logging.disable(logging.WARNING)
    params = EvalParams(evaluators=[BuiltinMetricDef(name="tool_trajectory_avg_score")])
    loop = asyncio.new_event_loop()

    async def evaluate(body: bytes, golden: Any) -> Any:
        traces = load_telemetry_text(body.decode()).traces
        return await run_evaluation_from_traces(traces, params, golden)

    timed: list[tuple[bytes, Any]] = []
    status: dict[str, str] = {}
    for path in sorted(FIXTURES.glob("*.json")):
        if path.name.endswith(".labels.json"):
            continue
        body = path.read_bytes()
        try:
            traces = load_telemetry_text(body.decode()).traces
        except ValueError:
            status[path.stem] = "cannot load"
            continue
        turns = [
            turn
            for key, members in evaluation_groups(traces, "auto")
            for turn in extract_conversation(members, key).turns
        ]
        if not turns:
            status[path.stem] = "no invocation"
            continue
        if not any(turn.tool_calls for turn in turns):
            status[path.stem] = "no tool call"
            continue
        golden = load_eval_set_from_dict(eval_set_from_turns(path.stem, turns))
        result = loop.run_until_complete(evaluate(body, golden))
        scores = [m.score for t in result.trace_results for m in t.metric_results]
        if result.errors or scores != [1.0]:
            status[path.stem] = f"not scored: {result.errors or scores}"
            continue
        status[path.stem] = "ok"
        timed.append((body, golden))

    async def one_pass() -> None:
        for body, golden in timed:
            await evaluate(body, golden)

    print(
        json.dumps({"version": version("agentevals-cli"), "status": status}), file=reply, flush=True
    )
    while line := sys.stdin.readline():
        passes, elapsed = _timed(lambda: loop.run_until_complete(one_pass()), float(line))
        print(json.dumps({"passes": passes, "elapsed": elapsed}), file=reply, flush=True)
    return 0


# -- the comparison: runs in .venv -------------------------------------------------------------


@dataclass
class Comparison:
    version: str
    pinned: str
    status: dict[str, str]
    """Per fixture: "ok" (timed) or why agentevals was not timed on it."""
    spans: int
    """Spans in one pass over the timed fixtures."""
    rates: dict[str, list[float]] = field(default_factory=dict)
    """spans/s per round: "attest", "agentevals"."""

    def median(self, side: str) -> float:
        return statistics.median(self.rates[side])

    def summary(self) -> str:
        ours, theirs = self.median("attest"), self.median("agentevals")
        timed = sum(s == "ok" for s in self.status.values())
        return (
            f"agentevals-cli {self.version}: {theirs:,.0f} spans/s; attest-otel full path: "
            f"{ours:,.0f} spans/s ({ours / theirs:.1f}x), on the {timed} of {len(self.status)} "
            "fixtures where agentevals finds tool calls"
        )


def compare(rounds: int, min_seconds: float) -> Comparison:
    """Start the worker, then time both sides, taking turns, `rounds` times."""
    from bench_grade import full_path, load_fixtures, pin_to_one_core

    pinned = pin_to_one_core()  # before the worker starts, so it inherits the same CPU
    fixtures = {f.name: f for f in load_fixtures()}
    proc = subprocess.Popen(
        [str(VENV_PYTHON), __file__, "--worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def ask(line: str | None = None) -> dict[str, Any]:
        if line is not None:
            stdin.write(line + "\n")
            stdin.flush()
        answer = stdout.readline()
        if not answer:
            raise SystemExit(f"the agentevals worker exited ({proc.wait()}); see stderr")
        return dict(json.loads(answer))

    try:
        ready = ask()
        names = [name for name, s in ready["status"].items() if s == "ok"]
        bodies = [fixtures[name].json_body for name in names]
        result = Comparison(
            ready["version"],
            pinned,
            ready["status"],
            sum(fixtures[n].spans for n in names),
            {"attest": [], "agentevals": []},
        )

        def attest_pass() -> None:
            for body in bodies:
                full_path([body])

        attest_pass()  # warm-up, as the worker's set-up pass is one
        for n in range(rounds):
            passes, elapsed = _timed(attest_pass, min_seconds)
            result.rates["attest"].append(passes * result.spans / elapsed)
            answer = ask(str(min_seconds))
            result.rates["agentevals"].append(answer["passes"] * result.spans / answer["elapsed"])
            print(f"  round {n + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        stdin.close()
        proc.wait()
    return result


def summary_line(rounds: int, min_seconds: float) -> str:
    """bench_grade.py's agentevals line: the comparison's summary, or how to get it."""
    if not VENV_PYTHON.exists():
        return NOT_INSTALLED
    return compare(rounds, min_seconds).summary()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="per side and round")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.3 s")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker()
    if not VENV_PYTHON.exists():
        print(NOT_INSTALLED)
        return 1
    if args.quick:
        args.rounds, args.min_seconds = 3, 0.3
    c = compare(args.rounds, args.min_seconds)
    timed = [name for name, s in c.status.items() if s == "ok"]
    print(f"python {platform.python_version()}, agentevals-cli {c.version}, {c.pinned}")
    print(
        f"timed on {len(timed)} of {len(c.status)} fixtures ({c.spans} spans per pass); "
        "agentevals was not timed on:"
    )
    skipped = Counter((s, name.split("__")[0]) for name, s in c.status.items() if s != "ok")
    for reason in sorted({s for s, _ in skipped}):
        frameworks = sorted((fw, k) for (s, fw), k in skipped.items() if s == reason)
        print(
            f"  {reason}: {sum(k for _, k in frameworks)} fixtures, "
            + ", ".join(f"{fw} ({k})" for fw, k in frameworks)
        )
    print(f"{args.rounds} rounds x >= {args.min_seconds} s per side, sides interleaved; median")
    print()
    print(f"{'side':72} {'spans/s':>9} {'best':>9}")
    for side, what in (
        ("attest", "attest-otel: decode_bytes + runs_from_spans + grade"),
        ("agentevals", "agentevals: load_telemetry_text + run_evaluation_from_traces(trajectory)"),
    ):
        print(f"{what:72} {c.median(side):>9,.0f} {max(c.rates[side]):>9,.0f}")
    print()
    print(c.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
