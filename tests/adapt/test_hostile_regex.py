"""Regexes over span content run in time linear in it (docs/hostile-input.md, "Grading
budget"): the ReAct answer and a declared dialect's own patterns, on hostile text."""

from __future__ import annotations

import time

import pytest

from attest_otel.adapt.dialect_config import parse_dialects
from attest_otel.adapt.linear_regex import RegexError, compile_linear
from attest_otel.adapt.runs import strip_react
from attest_otel.errors import PolicyError
from attest_otel.model import Span


def test_a_300_kb_react_answer_of_blank_lines_is_read_in_linear_time() -> None:
    # The old regex took about 7 s on 10,000 blank lines and grew faster than squared.
    hostile = "Thought:" + "\n" * 300_000 + "x"
    started = time.perf_counter()
    assert strip_react(hostile) == hostile
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Thought: look it up\nAnswer: 42", "42"),
        ("Thought: a\n  Final Answer:  the end\n", "the end\n"),
        ("  Thought: a\nanswer:\n\n b", "b"),
        ("Thought: x\nAnswer: 1\nThought: y\n FINAL ANSWER: 2 ", "2 "),
        ("Thought: a Answer: b", "Thought: a Answer: b"),
        ("hello\nAnswer: x", "hello\nAnswer: x"),
    ],
)
def test_strip_react_keeps_what_follows_the_last_answer_line(text: str, answer: str) -> None:
    assert strip_react(text) == answer


def test_a_backtracking_pattern_matches_a_1_mb_name_in_linear_time() -> None:
    # Python's re takes exponential time on this pattern and text.
    regex = compile_linear(r"(x+x+)+y")
    started = time.perf_counter()
    assert not regex.search("x" * 1_000_000)
    assert time.perf_counter() - started < 1.0
    assert compile_linear(r"^tool:(\w+)").capture("tool:lookup rest") == "lookup"
    assert compile_linear(r"agent").capture("my agent") == "agent"


def test_re2_refuses_a_backreference_in_one_line() -> None:
    with pytest.raises(RegexError, match="invalid escape sequence"):
        compile_linear(r"(a)\1")


def test_a_hostile_name_regex_in_a_dialect_holds_in_linear_time() -> None:
    (dialect,) = parse_dialects(
        """
dialects:
  acme:
    agent:
      when: {name_regex: '(x+x+)+y'}
      name: acme.agent.name
"""
    )
    span = Span(trace_id="ab" * 16, span_id="cd" * 8, parent_id=None, name="x" * 1_000_000)
    started = time.perf_counter()
    assert dialect.detect(span) is None
    assert time.perf_counter() - started < 1.0


def test_a_dialect_with_a_backreference_is_a_load_error() -> None:
    with pytest.raises(PolicyError, match=r"name_regex .*RE2 syntax"):
        parse_dialects(
            """
dialects:
  acme:
    agent:
      when: {name_regex: '(a)\\1'}
      name: acme.agent.name
"""
        )
