"""CPU per span of `attest-otel serve` under direct load, by process, and a profile.

    .venv/bin/python bench/sidecar_cpu.py agent|mixed [REQUESTS] [PROFILE.raw]

Sends REQUESTS (default 60) pre-serialised requests of 504 spans (bench/sidecar_workload.py:
every span GenAI, or 10 % GenAI) into a sidecar configured as `bench/bench_pipeline.py`
runs it (store on), forwarding to that bench's parse-only backend, and prints spans/s, the
sidecar's CPU per span (receiving process and grading processes) and the receiving
process's alone. With PROFILE, py-spy (not in the lock: `uv pip install py-spy`) records
the sidecar meanwhile in its raw format; SPYARGS (default `--subprocesses`) and RATE pass
through. The figures are in docs/measurements.md, "The sidecar's CPU per GenAI span".
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_pipeline import SIDECAR_CONFIG, Backend, cpu_seconds  # noqa: E402
from bench_sidecar import SidecarRun, _spans, send_all  # noqa: E402
from sidecar_workload import build_requests  # noqa: E402


def own_cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` alone (its threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "agent"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    profile = sys.argv[3] if len(sys.argv) > 3 else ""
    requests = build_requests(count + 4, 24, 1.0 if kind == "agent" else 0.1)
    with tempfile.TemporaryDirectory() as tmp:
        backend = Backend()
        sidecar = SidecarRun(Path(tmp), backend.endpoint, config_text=SIDECAR_CONFIG)
        try:
            warm, measured = requests[-4:], requests[:-4]
            send_all(sidecar.endpoint, warm)
            backend.wait_count(_spans(warm))
            spy = None
            if profile:
                spy = subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "-p",
                        str(sidecar.proc.pid),
                        *os.environ.get("SPYARGS", "--subprocesses").split(),
                        "-r",
                        os.environ.get("RATE", "250"),
                        "-f",
                        "raw",
                        "-o",
                        profile,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.5)
            main0, all0 = own_cpu_seconds(sidecar.proc.pid), cpu_seconds(sidecar.proc.pid)
            start = time.time()
            _, retries = send_all(sidecar.endpoint, measured)
            last = backend.wait_count(_spans(requests))
            all1, main1 = cpu_seconds(sidecar.proc.pid), own_cpu_seconds(sidecar.proc.pid)
            spans = _spans(measured)
            print(
                f"{kind}: {spans} spans, {spans / (last - start):,.0f} spans/s, sidecar CPU "
                f"{1e6 * (all1 - all0) / spans:.1f} us/span, receiving process "
                f"{1e6 * (main1 - main0) / spans:.1f} us/span, {retries} retried requests"
            )
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
        finally:
            sidecar.stop()
            backend.stop()


if __name__ == "__main__":
    main()
