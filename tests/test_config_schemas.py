"""The JSON Schemas published for editors (docs/schemas/): generated from the models that
check the files, never stale, and agreeing with the load on real files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from attest_otel.adapt.dialect_config import parse_dialects
from attest_otel.errors import PolicyError
from attest_otel.policy import parse_policy

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"
DIALECTS = ROOT / "tests" / "fixtures" / "dialects"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_schemas", ROOT / "tools" / "gen_schemas.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_schemas"] = module
    spec.loader.exec_module(module)
    return module


def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)  # type: ignore[no-any-return]


def test_the_published_schemas_are_exactly_what_the_models_generate() -> None:
    rendered = _generator().render()
    assert sorted(rendered) == sorted(p.name for p in SCHEMAS.glob("*.schema.json"))
    for name, text in rendered.items():
        assert (SCHEMAS / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: run tools/gen_schemas.py"
        )


def test_the_generator_check_mode_fails_on_a_stale_schema(tmp_path: Path) -> None:
    gen = _generator()
    assert gen.main(["--output", str(tmp_path)]) == 0
    assert gen.main(["--check", "--output", str(tmp_path)]) == 0
    (tmp_path / "policy.schema.json").write_text("{}\n", encoding="utf-8")
    assert gen.main(["--check", "--output", str(tmp_path)]) == 1


@pytest.mark.parametrize("path", sorted(DIALECTS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_dialect_file_fits_both_schemas(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    _validator("dialects.schema.json").validate(data)
    _validator("policy.schema.json").validate(data)  # a policy may declare dialects too


README_POLICY = """\
agents:
  billing_agent:
    allowed_tools: [charge_card, pay_with_paypal, lookup_invoice]
    tool_fallbacks: {charge_card: [pay_with_paypal]}
  "*":
    tool_fallbacks: {search: [search_backup]}
  empty:
"""


def test_a_policy_the_load_takes_fits_its_schema() -> None:
    assert parse_policy(README_POLICY).agents
    _validator("policy.schema.json").validate(yaml.safe_load(README_POLICY))


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        pytest.param(
            "policy.schema.json",
            "agents:\n  a:\n    allowed_tool: [x]\n",
            id="a typo in a policy key",
        ),
        pytest.param(
            "policy.schema.json", "agents:\n  a:\n    allowed_tools: x\n", id="tools not a list"
        ),
        pytest.param(
            "dialects.schema.json",
            "dialects:\n  x:\n    tool: {when: {nme: a}}\n",
            id="a typo in a condition",
        ),
        pytest.param(
            "dialects.schema.json",
            "dialects:\n  x:\n    tool: {name: a}\n",
            id="a rule without when",
        ),
        pytest.param(
            "dialects.schema.json",
            "dialects:\n  x:\n    tool: {when: {kind: sever}}\n",
            id="an unknown span kind",
        ),
    ],
)
def test_what_the_load_refuses_the_schema_flags_too(schema: str, text: str) -> None:
    load = parse_policy if schema.startswith("policy") else parse_dialects
    with pytest.raises(PolicyError):
        load(text)
    data: Any = yaml.safe_load(text)
    with pytest.raises(jsonschema.ValidationError):
        _validator(schema).validate(data)


SIDECAR_FILES = [
    ROOT / "collector-config" / "attest-otel.yaml",
    ROOT / "collector-config" / "attest-otel.local.yaml",
    ROOT / "tests" / "fixtures" / "sidecar" / "valid_full.yaml",
]


@pytest.mark.parametrize("path", SIDECAR_FILES, ids=lambda p: p.name)
def test_every_shipped_sidecar_config_fits_its_schema_and_loads(path: Path) -> None:
    from attest_otel.sidecar.config import load_service_config

    _validator("sidecar.schema.json").validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    load_service_config(path, environ={})


NEXT_HOP = "forward:\n  endpoint: 'collector:4317'\n"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(NEXT_HOP + "receivers:\n  htp: {}\n", id="a typo in a section"),
        pytest.param(NEXT_HOP + "  protocol: carrier-pigeon\n", id="an unknown protocol"),
        pytest.param(NEXT_HOP + "grading:\n  nice: 20\n", id="a number past its maximum"),
        pytest.param(NEXT_HOP + "store:\n  max_age_h: a week\n", id="a word for a number"),
    ],
)
def test_what_the_sidecar_config_load_refuses_its_schema_flags_too(
    text: str, tmp_path: Path
) -> None:
    from attest_otel.sidecar.config import load_service_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError):
        load_service_config(path, environ={})
    with pytest.raises(jsonschema.ValidationError):
        _validator("sidecar.schema.json").validate(yaml.safe_load(text))
