"""A YAML file checked by a pydantic model: every problem with its key path and line, in the
order of the file, as the hand-written checkers gave them."""

from __future__ import annotations

from typing import Annotated, ClassVar

import pytest
from pydantic import BeforeValidator, Field

from attest_otel.errors import PolicyError
from attest_otel.yamlfile.model import FileModel, Loc, expect, key_path, read_model


class Inner(FileModel):
    what: ClassVar[str] = "an inner mapping"
    required: ClassVar[dict[str, str]] = {"size": "missing `size`"}

    size: int
    label: str | None = None


class Outer(FileModel):
    what: ClassVar[str] = "a mapping with `items`"

    items: Annotated[dict[str, Inner], BeforeValidator(expect(dict, "a mapping of items"))] = Field(
        default_factory=dict
    )
    tags: list[str] = Field(default_factory=list)

    @classmethod
    def check_raw(cls, data: dict[str, object]) -> list[tuple[Loc, str]]:
        return [(("tags",), "no tags")] if "tags" not in data else []


def _problems(text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(PolicyError) as info:
        read_model(Outer, text, "f.yaml", environ or {})
    return info.value.problems


def test_problems_come_in_file_order_with_a_node_s_own_after_those_inside_it() -> None:
    text = """\
items:
  a:
    labl: x
    label: [1]
  b: 3
tagz: []
"""
    assert _problems(text) == [
        "items.a.labl (line 3): unknown key (did you mean 'label'?)",
        "items.a.label (line 4): Input should be a valid string",
        "items.a (line 3): missing `size`",
        "items.b (line 5): expected an inner mapping, got a number",
        "tagz (line 6): unknown key (did you mean 'tags'?)",
        "tags (line 1): no tags",
    ]


def test_yaml_level_problems_mix_with_the_model_s_in_order() -> None:
    text = "items:\n  a: {size: 1}\n  a: {size: 2}\n  3: {size: 1}\n  b: {size: x}\ntags: []\n"
    assert _problems(text) == [
        "items.a (line 3): duplicate key",
        "items.3 (line 4): expected a string key (quote it to make it one)",
        "items.b.size (line 5): Input should be a valid integer, unable to parse string as an"
        " integer",
    ]


def test_an_unset_variable_is_named_once_and_not_again_by_the_model() -> None:
    text = "items:\n  a: {size: '${env:SIZE}'}\n  b: {size: '${env:N:-4}'}\ntags: [x]\n"
    assert _problems(text) == [
        "items.a.size (line 2): ${env:SIZE}: SIZE is not set "
        "(set it, or give a default: ${env:SIZE:-value})"
    ]
    checked = read_model(Outer, text, "f.yaml", {"SIZE": "7"})
    assert checked is not None
    assert [i.size for i in checked.items.values()] == [7, 4]


def test_an_empty_document_is_none_or_the_problem_given() -> None:
    assert read_model(Outer, "", "f.yaml") is None
    with pytest.raises(PolicyError, match=r"f\.yaml: nothing here"):
        read_model(Outer, "# only a comment\n", "f.yaml", empty=["nothing here"])


def test_a_key_path_shows_indexes_and_quotes_a_blank_key() -> None:
    assert key_path(("agents", " ", "tools", 2)) == "agents.' '.tools[2]"
    assert key_path(()) == "<top>"
