"""The README's telemetry table is the contract: every name semconv writes must stand in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from attest_otel import semconv

README = (Path(__file__).parents[1] / "README.md").read_text()
WRITTEN = sorted(
    {
        value
        for name, value in vars(semconv).items()
        if isinstance(value, str)
        and (name.startswith(("ATTEST_", "GEN_AI_EVALUATION", "METRIC_", "PROMETHEUS_")))
        and not name.endswith("_UNIT")
    }
)


@pytest.mark.parametrize("name", WRITTEN)
def test_every_name_we_emit_is_in_the_readme_table(name: str) -> None:
    assert f"`{name}" in README, f"{name} is emitted but not documented in README.md"


def test_the_quick_start_is_make_demo_and_make_test() -> None:
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    assert "make demo" in quick and "make test" in quick
