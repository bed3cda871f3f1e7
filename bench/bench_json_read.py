"""Issue 30's goal for OTLP/JSON: `grade --file` at >= 1.5x the rate of `json.loads` of the
same file alone. Measures, in one run, CPU seconds (steadier than wall time on a shared
machine) and MiB/s of:

- `json.loads` and `orjson.loads` of each line (or of the whole file, if it is one document);
- reading alone: `ingest.stream.iter_file` over the file, in a child process (the loop's own
  CPU time, the interpreter's start left out);
- `attest-otel grade --file FILE`, in a child process (`big_file.measure`).

    .venv/bin/python bench/bench_json_read.py /tmp/many.jsonl [--repeat 3] [--python PY]

`--python` runs the children with another checkout's interpreter (its venv), e.g. the main
checkout's for a "before" figure; the parses are this process's.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import orjson

READ_ONLY = """
import sys, time
from attest_otel.ingest.stream import iter_file
started = time.process_time()
n = sum(len(d.spans) for d in iter_file(sys.argv[1]))
print(time.process_time() - started)
"""


def _parse_cpu(loads: object, lines: list[bytes]) -> float:
    started = time.process_time()
    for line in lines:
        loads(line)  # type: ignore[operator]
    return time.process_time() - started


def _child_cpu(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stderr.decode(errors="replace"))
        raise SystemExit(f"{argv} failed ({done.returncode})")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    data = args.file.read_bytes()
    mib = len(data) / 2**20
    lines = [line for line in data.split(b"\n") if line.strip()]
    if len(lines) > 1:
        try:
            json.loads(lines[0])
        except ValueError:
            lines = [data]
    del data
    runs: dict[str, list[float]] = {"json.loads": [], "orjson.loads": [], "read": [], "grade": []}
    for _ in range(args.repeat):
        runs["json.loads"].append(_parse_cpu(json.loads, lines))
        runs["orjson.loads"].append(_parse_cpu(orjson.loads, lines))
        read = subprocess.run(
            [args.python, "-c", READ_ONLY, str(args.file)], capture_output=True, check=True
        )
        runs["read"].append(float(read.stdout))
        grade = [args.python, "-m", "attest_otel.cli", "grade", "--file", str(args.file)]
        runs["grade"].append(_child_cpu(grade))
    best = {what: min(cpu) for what, cpu in runs.items()}
    out = {
        "file_mib": round(mib, 1),
        "cpu_s": {what: [round(c, 2) for c in cpu] for what, cpu in runs.items()},
        "mib_per_s": {what: round(mib / cpu, 1) for what, cpu in best.items()},
        "grade_vs_json_loads": round(best["json.loads"] / best["grade"], 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
