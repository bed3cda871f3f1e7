"""The public surface: what `attest_otel` exports, the error tree and its exit codes, the
Literal words of a grade, and docstrings that cite only documents a clone has."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import attest_otel
from attest_otel import errors, model
from attest_otel.grade import grader, rules

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _sources() -> list[Path]:
    return sorted(p for p in (ROOT / "attest_otel").rglob("*.py") if "_proto" not in p.parts)


# --- exports --------------------------------------------------------------------------------


def test_every_name_in_all_imports() -> None:
    names = attest_otel.__all__
    assert len(set(names)) == len(names)
    namespace: dict[str, object] = {}
    exec("from attest_otel import *", namespace)
    assert [n for n in names if n not in namespace] == []


def test_the_readme_python_api_imports_only_exported_names() -> None:
    section = README.split("## Python API", 1)[1].split("\n## ", 1)[0]
    imported = {
        name.strip()
        for line in re.findall(r"from attest_otel import ([\w, ]+)", section)
        for name in line.split(",")
    }
    assert imported and imported <= set(attest_otel.__all__)


def test_version_is_the_installed_distributions() -> None:
    assert attest_otel.__version__ == importlib.metadata.version("attest-otel")
    assert "__version__" in attest_otel.__all__


def test_version_without_metadata_says_unknown_instead_of_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert attest_otel._version() == "0+unknown"


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = attest_otel.no_such_name  # type: ignore[attr-defined]


def test_importing_the_package_stays_cheap() -> None:
    """`import attest_otel` in a CLI or a test must not pay for a model SDK, protobuf,
    OpenTelemetry, YAML, or `importlib.metadata` (read only when `__version__` is)."""
    heavy = ("anthropic", "google.protobuf", "opentelemetry", "yaml", "grpc", "importlib.metadata")
    code = f"import sys, attest_otel; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


# --- errors ---------------------------------------------------------------------------------


def _error_classes() -> list[type[errors.AttestOtelError]]:
    """The tree errors.py defines (whatever else has been imported: classes defined outside
    it are the business of the test below)."""
    found: list[type[errors.AttestOtelError]] = []
    todo: list[type[errors.AttestOtelError]] = [errors.AttestOtelError]
    while todo:
        cls = todo.pop()
        if cls.__module__ == errors.__name__ and not cls.__name__.startswith("_"):
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


def test_an_error_class_defined_outside_errors_py_is_named_there_as_internal() -> None:
    """A class defined elsewhere would escape the tree, the exports and the README unless
    errors.py says why it stays out. Read from the source, not by importing every module: a
    module failing to import is another test's business."""
    names = {c.__name__ for c in _error_classes()}
    outside: list[str] = []
    grew = True
    while grew:  # a subclass of a subclass defined elsewhere counts too
        grew = False
        for path in _sources():
            if path.name == "errors.py" and path.parent.name == "attest_otel":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef) or node.name in names:
                    continue
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                if bases & names:
                    names.add(node.name)
                    grew = True
                    module = ".".join(path.relative_to(ROOT / "attest_otel").with_suffix("").parts)
                    if not node.name.startswith("_"):
                        outside.append(f"{module}.{node.name}")
    assert [name for name in outside if f"`{name}`" not in (errors.__doc__ or "")] == []


ERRORS = _error_classes()


def _readme_codes() -> dict[str, int]:
    """Class name -> exit code, from the "raised as" column of the README's exit-code table."""
    table = README.split("Exit codes (", 1)[1].split("\n\n", 2)[1]
    codes: dict[str, int] = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        code = int(cells[0].strip("`"))
        for name in re.findall(r"`(\w+Error)`", cells[-1]):
            codes[name] = code
    return codes


def test_the_tree_has_every_error_class() -> None:
    assert {c.__name__ for c in ERRORS} == {
        "AttestOtelError",
        "UsageError",
        "ModelError",
        "InputError",
        "PolicyError",
        "SourceError",
        "TraceNotFoundError",
        "ExportError",
        "ListenError",
    }


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_error_is_exported_drawn_and_in_the_readme_with_its_exit_code(
    cls: type[errors.AttestOtelError],
) -> None:
    name = cls.__name__
    assert getattr(attest_otel, name) is cls and name in attest_otel.__all__
    assert name in errors.__all__
    drawn = re.search(
        rf"[├└]── {name}\s+exit (\d)|^    {name}\s+exit (\d)", errors.__doc__ or "", re.MULTILINE
    )
    assert drawn is not None, f"{name} is not drawn in errors.py's docstring"
    assert int(drawn.group(1) or drawn.group(2)) == cls.exit_code
    if cls is not errors.AttestOtelError:
        assert _readme_codes()[name] == cls.exit_code
    api = README.split("## Python API", 1)[1].split("\n## ", 1)[0]
    assert re.search(rf"{name}\s+({cls.exit_code}|exit_code)\b", api), f"{name} not in README"


def test_the_readme_table_names_no_class_that_does_not_exist() -> None:
    assert set(_readme_codes()) == {c.__name__ for c in ERRORS} - {"AttestOtelError"}


def test_a_run_failing_and_an_export_failing_have_different_codes() -> None:
    assert errors.ExportError.exit_code == 4 and errors.ListenError.exit_code == 5
    export = README.split("### Export configuration and failures", 1)[1].split("\n## ", 1)[0]
    assert "exits 4" in export and "exits 1" not in export


def test_asking_for_a_model_check_without_a_model_is_a_model_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    run = model.Run(task="t")
    with pytest.raises(errors.ModelError, match="ANTHROPIC_API_KEY") as raised:
        grader.tool_use(run, check_answer=True)
    assert isinstance(raised.value, errors.UsageError)  # old `except UsageError` still works
    assert raised.value.exit_code == 2


def test_the_cli_exits_2_with_one_line_when_a_model_check_has_no_model(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from attest_otel.cli import main

    run_file = tmp_path / "run.json"
    run_file.write_text('{"task": "t", "steps": []}', encoding="utf-8")
    result = CliRunner().invoke(
        main, ["tools", str(run_file), "--check-answer"], env={"ANTHROPIC_API_KEY": ""}
    )
    assert result.exit_code == 2
    assert "no model is available" in result.output and "Traceback" not in result.output


# --- the words of a grade -------------------------------------------------------------------


def test_the_literals_hold_the_words_the_readme_documents() -> None:
    assert typing.get_args(model.Verdict) == ("pass", "review", "fail")
    assert set(typing.get_args(model.Severity)) == {"pass", "warn", "fail"}
    table = re.findall(
        r"^\| `(\w+)` \| (\w+) \| ",
        README.split("## The rules", 1)[1].split("\n## ", 1)[0],
        re.MULTILINE,
    )
    assert tuple(v for v, _ in table) == typing.get_args(model.FindingVerdict)
    assert dict(table) == rules.VERDICT_SEVERITY


def test_the_dataclasses_and_the_rules_are_typed_with_the_literals() -> None:
    finding = typing.get_type_hints(model.Finding)
    assert finding["verdict"] == model.FindingVerdict
    assert finding["severity"] == model.Severity
    assert typing.get_type_hints(model.CheckResult)["verdict"] == model.Verdict
    assert typing.get_type_hints(rules.CallFacts)["recovery"] == model.Recovery | None
    assert tuple(rules.VERDICT_SEVERITY) == typing.get_args(model.FindingVerdict)
    assert set(rules.VERDICT_SEVERITY.values()) == set(typing.get_args(model.Severity))
    assert typing.get_type_hints(rules.find_recovery)["return"] == (
        tuple[model.Recovery, int, str] | None
    )


# --- documents the code cites ---------------------------------------------------------------

_CITATION = re.compile(
    r"(?P<path>(?:\.\./)?[\w./-]*\w\.md)\b"
    r"(?:,?\s*(?:§\s*|section\s+)(?P<num>\d+)"
    r'|,\s*"(?P<title>[^"\n]+)"'
    r"|,\s*points?\s+(?P<point>\d+)"
    r"|\s+(?P<letter>[a-f])\.(?=[\s),:]|$))?"
)


def _resolve(cited: str) -> Path | None:
    """A path from the repository root; a bare name may also mean docs/NAME, the only place
    documents live. Anything outside the clone (`../shared/...`) is never found."""
    if cited.startswith("..") or "shared/" in cited:
        return None
    for candidate in (ROOT / cited, ROOT / "docs" / cited):
        if candidate.is_file():
            return candidate
    return None


def _headings(doc: Path) -> list[str]:
    return [
        line.lstrip("#").strip()
        for line in doc.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    ]


def _citations() -> list[tuple[str, re.Match[str]]]:
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for match in _CITATION.finditer(text):
            found.append(
                (f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}", match)
            )
    return found


CITATIONS = _citations()


def test_the_code_cites_documents() -> None:
    """The check below has something to check: docstrings do point at docs/."""
    cited = {m["path"] for _, m in CITATIONS}
    assert {"docs/rules.md", "docs/dialects.md", "docs/pipeline.md"} <= cited


@pytest.mark.parametrize(("where", "match"), CITATIONS, ids=[w for w, _ in CITATIONS])
def test_every_document_a_docstring_cites_is_in_the_repository(
    where: str, match: re.Match[str]
) -> None:
    doc = _resolve(match["path"])
    assert doc is not None, f"{where} cites {match['path']}, which a clone does not have"
    heads = _headings(doc)
    if match["num"] or match["point"] or match["letter"]:
        number = match["num"] or match["point"] or match["letter"]
        assert any(h.startswith(f"{number}.") for h in heads), f"{where}: no section {number}"
    if match["title"]:
        assert match["title"] in heads, f"{where}: no heading {match['title']!r} in {doc}"


def test_no_source_mentions_the_shared_notes_outside_the_repository() -> None:
    bad = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if re.search(r"\bshared/|spec/rules\.md", p.read_text(encoding="utf-8"))
    ]
    assert bad == []


def test_the_citation_check_catches_a_document_outside_the_clone() -> None:
    for text in (
        "see ../shared/spec/rules.md",
        "(dialects.md §7)",
        "pipeline.md f.",
        'docs/rules.md, "No such heading"',
        "docs/rules.md, point 99",
    ):
        match = _CITATION.search(text)
        assert match is not None
        doc = _resolve(match["path"])
        heads = _headings(doc) if doc else []
        number = match["num"] or match["point"] or match["letter"]
        ok = doc is not None and (
            (not number or any(h.startswith(f"{number}.") for h in heads))
            and (not match["title"] or match["title"] in heads)
        )
        assert not ok, text
