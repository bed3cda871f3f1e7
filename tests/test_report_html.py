"""`report --html`: the page renders in a real headless Chromium, its charts are there, and
opening it fetches nothing; `report --fail-under` gates a CI job on the pass rate.

Chromium runs with every request sent through a recording proxy on a loopback port
(loopback included, `<-loopback>`), so any fetch the page made would show up there; a
control page with one remote image proves the proxy does see fetches.
"""

from __future__ import annotations

import http.server
import re
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from attest_otel.cli import main
from attest_otel.report.html import render_html
from attest_otel.report.stats import GradeRecord, build_report
from attest_otel.store import StoredGrade, TraceStore
from tests.needs import program


def _finding(
    tool: str, verdict: str = "correct", severity: str = "pass", recovery: str | None = None
) -> dict[str, object]:
    return {
        "subject": tool,
        "verdict": verdict,
        "severity": severity,
        "reason": "",
        "step": 0,
        "evidence": None,
        "metadata": {"recovery": recovery} if recovery else {},
    }


def _result(findings: list[dict[str, object]], summary: str = "") -> dict[str, object]:
    failed = any(f["severity"] == "fail" for f in findings)
    correct = sum(f["verdict"] == "correct" for f in findings)
    return {
        "check": "tool_use",
        "passed": not failed,
        "verdict": "fail" if failed else "pass",
        "score": correct / len(findings) if findings else 1.0,
        "summary": summary,
        "findings": findings,
        "metadata": {},
    }


RESULTS = [
    ("a1" * 16, "billing", [_finding("lookup"), _finding("charge", recovery="retried")]),
    ("b2" * 16, "billing", [_finding("charge", "error_silent", "fail", "silent")]),
    (
        "c3" * 16,
        "billing",
        [_finding("charge", "error_claimed_success", "fail", "claimed_success")],
    ),
    ("d4" * 16, "support", [_finding("search"), _finding("search")]),
    ("e5" * 16, "support <script>", [_finding("delete", "disallowed_tool", "fail")]),
]
RECORDS = [
    GradeRecord(t, a, i, _result(f, f"summary of {t[:4]}"), span_id="00f067aa0ba902b7")
    for i, (t, a, f) in enumerate(RESULTS)
]


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def _any(self) -> None:
        type(self).seen.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_CONNECT = do_HEAD = _any

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[tuple[int, list[str]]]:
    """A recording HTTP proxy on a free loopback port, stopped after the test."""
    seen: ClassVar[list[str]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _chromium(
    page: Path, tmp: Path, proxy_port: int, *mode: str
) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{time.monotonic_ns()}"
    return subprocess.run(
        [
            program("chromium"),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--no-pings",
            "--disable-client-side-phishing-detection",
            "--disable-domain-reliability",
            "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,"
            "Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
            f"--user-data-dir={profile}",
            f"--proxy-server=http://127.0.0.1:{proxy_port}",
            "--proxy-bypass-list=<-loopback>",
            "--window-size=1200,2400",
            "--virtual-time-budget=3000",
            *mode,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


_BROWSER_OWN = re.compile(r"[ /](?:[\w.-]+\.)?(?:google\.com|googleapis\.com|gvt1\.com)[:/]")


def _png_colours(path: Path) -> int:
    """Distinct byte values in the decoded image rows: a blank page has one or two."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def test_the_html_report_renders_in_chromium_with_its_charts_and_fetches_nothing(
    tmp_path: Path, proxy: tuple[int, list[str]]
) -> None:
    port, seen = proxy
    report = build_report(RECORDS, since_ns=None, until_ns=10**9)
    page = tmp_path / "report.html"
    page.write_text(render_html(report, trace_url="http://jaeger:16686/trace/{trace_id}"))

    dom = _chromium(page, tmp_path, port, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    for chart in ("chart-agents", "chart-verdicts", "chart-errors"):
        svg = re.search(rf'<svg id="{chart}".*?</svg>', html, re.S)
        assert svg is not None, f"{chart} missing from the rendered page"
        assert len(re.findall(r'<rect class="bar"', svg.group(0))) >= 2
    assert html.count('class="interval"') == 3  # one Wilson whisker per agent
    assert '<a href="http://jaeger:16686/trace/' + "b2" * 16 + '">' in html
    assert "<script>" not in html  # the agent's name was escaped, not run
    assert "Runs passed: <b>2/5 = 40.0%</b>" in html

    shot = tmp_path / "shot.png"
    rendered = _chromium(page, tmp_path, port, f"--screenshot={shot}")
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert _png_colours(shot) > 20  # bars, text and colours, not a blank page
    # Nothing fetched by the page: no script, font, image or style from anywhere. Chromium's
    # own update and clock services still call home now and then despite the flags; they go
    # to Google hosts, which this page never names, so leaving them out hides no page fetch.
    assert [r for r in seen if not _BROWSER_OWN.search(r)] == []

    control = tmp_path / "control.html"
    control.write_text('<img src="http://example.invalid/pixel.png">')
    _chromium(control, tmp_path, port, "--dump-dom")
    assert any("example.invalid" in request for request in seen)  # the proxy does see fetches


def _store(path: Path) -> None:
    now = time.time_ns()
    with TraceStore(path) as store:
        for i, record in enumerate(RECORDS):
            grade = StoredGrade(
                record.trace_id,
                f"{i:016x}",
                record.agent,
                now - 60 * 10**9 + i,
                dict(record.result),
            )
            store.put_trace(record.trace_id, b"", 0, [grade], now_ns=now - 60 * 10**9 + i)


@pytest.mark.parametrize(
    ("flags", "code", "says"),
    [
        pytest.param(["--fail-under", "30%"], 0, None, id="above the bar passes"),
        pytest.param(
            ["--fail-under", "0.5"], 1, "all runs 40.0% < 50.0%", id="below the bar fails"
        ),
        pytest.param(
            ["--agent-fail-under", "50%"],
            1,
            "agent billing 33.3% < 50.0%",
            id="one agent below its bar fails",
        ),
        pytest.param(
            ["--fail-under", "150%"], 2, "between 0 and 1", id="a rate above 100% is a usage error"
        ),
    ],
)
def test_report_fail_under_gates_on_the_pass_rate(
    tmp_path: Path, flags: list[str], code: int, says: str | None
) -> None:
    db = tmp_path / "store.db"
    _store(db)
    result = CliRunner().invoke(main, ["report", "--from", f"store:{db}", *flags])
    assert result.exit_code == code, result.output
    if says:
        assert says in result.stderr


def test_a_fail_under_gate_over_an_empty_window_is_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    TraceStore(db).close()
    result = CliRunner().invoke(main, ["report", "--from", f"store:{db}", "--fail-under", "0.9"])
    assert result.exit_code == 2
    assert "no graded runs" in result.stderr


def test_report_html_writes_the_page_and_refuses_a_trace_url_without_a_trace_id(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store.db"
    _store(db)
    page = tmp_path / "r.html"
    result = CliRunner().invoke(
        main,
        [
            "report",
            "--from",
            f"store:{db}",
            "--html",
            str(page),
            "--trace-url",
            "http://jaeger:16686/trace/{trace_id}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert 'id="chart-agents"' in page.read_text()
    result = CliRunner().invoke(
        main,
        [
            "report",
            "--from",
            f"store:{db}",
            "--html",
            str(page),
            "--trace-url",
            "http://jaeger:16686/",
        ],
    )
    assert result.exit_code == 2
    assert "{trace_id}" in result.stderr


def test_report_html_says_where_the_page_went_instead_of_printing_the_text(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store.db"
    _store(db)
    page = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "--from", f"store:{db}", "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.strip() == f"report: wrote {page} (2/5 runs passed in the window)"
    assert 'id="chart-time"' in page.read_text()


def test_the_page_shows_the_pass_rate_per_hour_and_a_drop_after_a_deploy() -> None:
    from attest_otel.report.html import render_html
    from attest_otel.report.stats import HOUR_NS, GradeRecord, build_report

    def record(hour: int, i: int, passed: bool) -> GradeRecord:
        result = {"check": "tool_use", "passed": passed, "verdict": "pass" if passed else "fail"}
        return GradeRecord(f"t{hour}-{i}", "billing", hour * HOUR_NS + i, result)

    records = [record(h, i, True) for h in (100, 101) for i in range(4)]
    records += [record(102, i, i == 0) for i in range(4)]  # the deploy: 1 of 4 pass
    report = build_report(records, since_ns=100 * HOUR_NS, until_ns=103 * HOUR_NS)
    assert [(b.passed, b.total) for b in report.by_hour] == [(4, 4), (4, 4), (1, 4)]
    assert report.to_dict()["by_hour"][2] == {
        "start": "1970-01-05T06:00:00Z",
        "passed": 1,
        "runs": 4,
    }
    page = render_html(report)
    assert page.count('class="bucket"') == 3
    assert "1/4 passed, 25.0%" in page


def test_more_than_three_days_of_hours_are_shown_per_day() -> None:
    from attest_otel.report.stats import HOUR_NS, Bucket, coarsen

    hours = [Bucket(h * HOUR_NS, 1, 2) for h in range(0, 24 * 5)]
    days = coarsen(hours)
    assert [(b.passed, b.total) for b in days] == [(24, 48)] * 5
    assert coarsen(hours[:72]) == hours[:72]
