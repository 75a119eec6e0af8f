"""The run side's lines are assembled from parts made once per function (output._Shape) for
speed; they must be the text the general path gives: a JSON object json.dumps would write, and
the text lines `show` would. Every kind of value a decoder gives, hostile names included."""

from __future__ import annotations

import json

import pytest

from btfgen.decoder.runtime import CapturedString, Enumerator, Unavailable, Unread
from btfgen.probe import output

VALUES = [0, -1, 2**64 - 1, True, False, None, Enumerator(7, "BLUE"), Enumerator(9, None),
          1.5, float("nan"), float("inf"), "plain", "é\n\x01\"\\\u2028",
          CapturedString("/etc/hostname", False, "user"),
          CapturedString("/a/path/lon\u00e9", True, "kernel"), b"\x00\xff", [1, Enumerator(2, "X")],
          {"x": -42, "tag": "inner", "e": Enumerator(1, "RED")}, Unavailable("how is NULL"),
          Unread(0x1234)]
NAMES = ["a", 'q"uote', "back\\slash", "é", "</script>", "a\nb"]


class _Value:
    def __init__(self, tag: str):
        self.type = type("T", (), {"tag": tag})()


class _Fn:
    """What output.Printer needs of a decoder: names, args, ret, name."""

    def __init__(self, names, pointers=()):
        self.names = tuple(names)
        self.args = tuple(_Value("ptr" if n in pointers else "int") for n in names)
        self.ret = None
        self.name = 'f"n'


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_json_values_are_what_the_encoder_writes(value):
    fn = _Fn(["a", "b"])
    shape = output._Shape(fn)
    args = (value, 3)
    want = json.dumps({n: output.typed(v) for n, v in zip(fn.names, args)}, allow_nan=False)
    assert shape.json_args(args) == want
    caps = {"*how": value, "how->label": value, "p": 5}
    assert output._json_captures(caps) == json.dumps(
        {k: output.typed(v) for k, v in caps.items()}, allow_nan=False)


def test_json_names_are_escaped_and_repeated_names_keep_the_last():
    fn = _Fn(NAMES)
    args = tuple(range(len(NAMES)))
    assert json.loads(output._Shape(fn).json_args(args)) == dict(zip(NAMES, args))
    twice = _Fn(["x", "x"])
    assert output._Shape(twice).json_args((1, 2)) == json.dumps({"x": 2})


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_text_is_what_show_writes(value):
    fn = _Fn(["a", "p"], pointers=("p",))
    shape = output._Shape(fn)
    for args in ((value, 0x1000), (5, value)):
        want = ", ".join(f"{n}={output.show(v, p)}"
                         for n, v, p in zip(fn.names, args, (False, True)))
        assert shape.shown(args) == want
    caps = {"a": CapturedString("s", False, "user"), "p->x": value}
    assert shape.shown((1, 2), caps) == ('a="s", p=0x2, p->x=' + output.show_captured(value))
