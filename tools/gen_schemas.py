"""Publishes the JSON Schema of each file a user writes, generated from the pydantic models
that check the file when it loads.

    .venv/bin/python tools/gen_schemas.py           writes docs/schemas/*.schema.json
    .venv/bin/python tools/gen_schemas.py --check   exits 1 if one is out of date

Why: an editor with a YAML language server completes keys and flags a typo while the file
is written, not when attest-otel loads it (README, "Editor support"). The schemas are
committed so an editor can point at them without installing anything, and a test fails when
a model changes and they were not regenerated. The models stay the authority: a schema
cannot say everything they check (a regex RE2 refuses, a built-in dialect's name).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attest_otel.adapt.dialect_config import DialectFile
from attest_otel.policy import PolicyFile
from attest_otel.sidecar.config import ServiceConfig
from attest_otel.sidecar.config_keys import file_model

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "schemas"

SCHEMAS: dict[str, tuple[type[BaseModel], str]] = {
    "policy.schema.json": (
        PolicyFile,
        "attest-otel tool-use policy: allowed tools and fallbacks per agent, and declared "
        "dialects (README, 'Policy file').",
    ),
    "dialects.schema.json": (
        DialectFile,
        "attest-otel declared dialects: how to read spans of an instrumentation attest-otel "
        "does not know (README, 'Teach it a dialect').",
    ),
    "sidecar.schema.json": (
        file_model(ServiceConfig),
        "attest-otel serve: the sidecar's config file (collector-config/README.md, the key "
        "table). Sizes in MiB or KiB and ages in hours as the key names say.",
    ),
}


def schema(model: type[BaseModel], description: str, name: str) -> dict[str, Any]:
    body = model.model_json_schema(mode="validation")
    body.pop("title", None)
    body.pop("description", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": name.removesuffix(".schema.json"),
        "description": description,
        **body,
    }


def render() -> dict[str, str]:
    """File name -> text, stable byte for byte (sorted keys) so `--check` can compare."""
    return {
        name: json.dumps(schema(model, description, name), indent=2, sort_keys=True) + "\n"
        for name, (model, description) in SCHEMAS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a schema is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    stale = 0
    for name, text in render().items():
        path = args.output / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{path} is out of date: run tools/gen_schemas.py", file=sys.stderr)
                stale += 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
