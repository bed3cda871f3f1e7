"""Build requirements live outside uv.lock, so a loose one lets a new PyPI release change what
a fresh clone builds: grpcio-tools newer than the locked grpcio writes gRPC code that refuses
to import (`attest-otel serve` then fails at start). These pins are checked here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _build_requires(pyproject: Path) -> list[str]:
    with open(pyproject, "rb") as f:
        return list(tomllib.load(f)["build-system"]["requires"])


def _locked(name: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions = {p["version"] for p in lock["package"] if p["name"] == name}
    assert len(versions) == 1, f"{name}: {versions}"
    return versions.pop()


def test_every_build_requirement_is_pinned_exactly() -> None:
    for pyproject in (ROOT / "pyproject.toml", ROOT / "rust/attest_wire/pyproject.toml"):
        for requirement in _build_requires(pyproject):
            assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", requirement), (
                f"{pyproject.relative_to(ROOT)}: {requirement!r} is not pinned with =="
            )


def test_the_proto_generator_is_the_locked_one() -> None:
    """The generated code checks grpcio's version against the generator's, at import."""
    pins = dict(r.split("==") for r in _build_requires(ROOT / "pyproject.toml"))
    assert pins["grpcio-tools"] == _locked("grpcio-tools")
    assert tuple(map(int, _locked("grpcio").split("."))) >= tuple(
        map(int, pins["grpcio-tools"].split("."))
    )
