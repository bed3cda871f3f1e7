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


ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("doc", ["README.md", "collector-config/README.md"])
def test_every_path_the_docs_name_is_in_the_repository(doc: str) -> None:
    """A clone is all a reader has: no link or path may lead outside it, or to nothing."""
    import re

    text = (ROOT / doc).read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert [link for link in links if link.startswith("..") or link.startswith("/")] == []
    assert "../" not in text
    named = set(
        re.findall(r"`((?:collector-config|deploy|tools|docs|examples|proto)/[\w./-]+)`", text)
    )
    assert named and [p for p in named if not (ROOT / p).exists()] == []


def test_the_quick_start_says_how_to_get_the_command_on_path_and_what_make_test_needs() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/attest-otel grade --file examples/" in quick
    assert "uv tool install ." in quick and "pipx install ." in quick
    assert "prometheus" in quick and "chromium" in quick and "CI=true" in quick


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_your_own_agent_names_the_capture_setting_of_every_dialect() -> None:
    import re

    from attest_otel.adapt.explain import CAPTURE_SETTINGS

    section = _section("Your own agent")
    for dialect, setting in CAPTURE_SETTINGS.items():
        if dialect == "generic":
            continue
        token = re.findall(r"[A-Z][A-Z_]{5,}(?:=\w+)?|\w+=\w+|recordInputs: true", setting)[0]
        assert token in section, (dialect, token)


def test_your_own_agent_runs_the_shipped_local_config() -> None:
    section = _section("Your own agent")
    assert "--config collector-config/attest-otel.local.yaml" in section
    assert (ROOT / "collector-config" / "attest-otel.local.yaml").is_file()
    assert "ANTHROPIC_BASE_URL" in _section("The command line")
