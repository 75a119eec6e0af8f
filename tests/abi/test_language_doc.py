"""docs/abi-language.md says what the parser does: each of its `abi` examples parses (a whole
description with every check, a statement by the grammar), and it names every word the
parser knows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from btfgen.abi import convention, dsl

DOC = Path(__file__).resolve().parents[2] / "docs" / "abi-language.md"
GRAMMAR = Path(__file__).resolve().parents[2] / "grammars" / "abi.lark"


def _examples() -> list[str]:
    return re.findall(r"^```abi\n(.*?)^```$", DOC.read_text(), re.MULTILINE | re.DOTALL)


def test_the_page_has_examples():
    assert len(_examples()) >= 5
    assert any(re.search(r"^arch ", e, re.MULTILINE) for e in _examples())  # a whole one


@pytest.mark.parametrize("example", _examples(), ids=lambda e: e.split("\n", 1)[0][:40])
def test_each_example_parses(example):
    if re.search(r"^arch ", example, re.MULTILINE):
        conv = dsl.parse_text(example, "doc.abi")
        assert conv.arg_rules and conv.ret_rules
    else:
        dsl._parse(example, "doc.abi", "body")


def test_the_page_names_every_word_the_parser_knows():
    text = DOC.read_text()
    words = set(convention.CLASSES | convention.FLAGS | convention.NUMERIC
                | convention.REG_OPTIONS)
    grammar = GRAMMAR.read_text()
    words |= set(re.findall(r'"([a-z_]+)"', grammar))  # keywords, properties, actions
    missing = sorted(w for w in words if f"`{w}" not in text and not re.search(
        rf"`[^`]*\b{w}\b[^`]*`", text))
    assert not missing, f"docs/abi-language.md does not mention {missing}"
