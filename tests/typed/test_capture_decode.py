"""Captures decoded from generic records: statuses (NULL or a fault at a named pointer, not
made, the argument unread), truncation, the memory said, bitfields in both byte orders; and
`btfgen --capture` putting them into the generated module and spec table, one line on error."""

from __future__ import annotations

import struct

import pytest

from btfgen.cli import main
from btfgen.decoder import runtime as R

HEAD = R.CAPTURE_HEAD_SIZE


def _fn(order: str, caps) -> R.Function:
    arg = ("p", ("ptr", 8), 8, ((0, 112, 8, 0),), False, None)
    return R.Function(("f", 7, order, 8, (arg,), None, None, (((0, -1, 1),), ()), caps))


def _record(order: str, data: bytes, failed: int = 0) -> bytes:
    e = "<" if order == "little" else ">"
    return struct.pack(e + "IIQ", 7, 0, failed) + data.ljust(256, b"\0")


def _head(order: str, status: int, hop: int = 0, space: int = 0, n: int = 0) -> bytes:
    return R.CAPTURE_HEADS[order].pack(status, hop, space, 0, n, 0, 0)


STR = ("s", "str", ("chars", 8), 8, 0, 0, False, 8, 1, ("p", "p->q", "p->q->s"))


@pytest.mark.parametrize("order", ["little", "big"])
def test_statuses_say_which_pointer(order):
    f = _fn(order, (STR,))
    at = bytes(8)
    text = b"abcdefghi\0"  # nine characters past an 8 limit: truncated
    ok = f.decode_captures(_record(order, at + _head(order, 1, 2, 1, 10) + text))["s"]
    assert (ok, ok.truncated, ok.space) == ("abcdefgh", True, "user")
    exact = f.decode_captures(_record(order, at + _head(order, 1, 2, 0, 9) + b"abcdefgh\0"))
    assert (exact["s"], exact["s"].truncated, exact["s"].space) == ("abcdefgh", False, "kernel")
    null = f.decode_captures(_record(order, at + _head(order, 2, 1)))["s"]
    assert null == R.Unavailable("p->q is NULL")
    fault = f.decode_captures(_record(order, at + _head(order, 3, 2, 1)))["s"]
    assert fault == R.Unavailable("reading through p->q->s faulted (user memory)")
    assert f.decode_captures(_record(order, at + _head(order, 0)))["s"].reason.startswith(
        "not captured")
    unread = f.decode_captures(_record(order, at + _head(order, 1, 0, 0, 3) + b"ab\0", 1))
    assert unread["s"] == R.Unavailable("p could not be read")


@pytest.mark.parametrize("order", ["little", "big"])
def test_bitfields_enums_and_char_arrays(order):
    bits = ("p->mid", "value", ("int", 4, True), 2, 3, 9, False, 8, 1, ("p",))
    enum = ("p->c", "value", ("enum", 4, False, {7: "BLUE"}), 4, 0, 0, False, 32, 1, ("p",))
    st = ("*p", "value", ("struct", 8, (("n", 0, 0, ("chars", 4)), ("k", 32, 0, ("int", 4,
                                                                                 False)))),
          8, 0, 0, False, 56, 1, ("p",))
    f = _fn(order, (bits, enum, st))
    # Bits 3..11 of the two bytes as BTF numbers them: from the least significant bit on a
    # little-endian target, from the most significant on a big-endian one.
    raw = -200 & 0x1ff
    two = (raw << 3).to_bytes(2, "little") if order == "little" else \
        (raw << (16 - 3 - 9)).to_bytes(2, "big")
    e = "<" if order == "little" else ">"
    data = (bytes(8) + _head(order, 1, 0, 0, 2) + two.ljust(8, b"\0")
            + _head(order, 1, 0, 0, 4) + struct.pack(e + "I", 7).ljust(8, b"\0")
            + _head(order, 1, 0, 0, 8) + b"ab\0\0" + struct.pack(e + "I", 5))
    caps = f.decode_captures(_record(order, data))
    assert caps["p->mid"] == -200
    assert caps["p->c"] == 7 and caps["p->c"].name == "BLUE"
    assert caps["*p"] == {"n": "ab", "k": 5}  # a char array is text in a capture


def test_a_malformed_capture_descriptor_is_refused():
    with pytest.raises(R.DecodeError, match="kind 'blob'"):
        _fn("little", (STR[:1] + ("blob",) + STR[2:],))
    with pytest.raises(R.DecodeError, match="no pointers"):
        _fn("little", (STR[:-1] + ((),),))


HEADER = "struct s { int a; char n[4]; };\nlong f(const char *p, struct s *q);\nlong g(int x);\n"


def test_generator_option(tmp_path, capsys):
    (tmp_path / "g.h").write_text(HEADER)
    base = ["--header", str(tmp_path / "g.h"), "--arch", "x86_64", "-q"]
    assert main([*base, "-o", str(tmp_path / "plain")]) == 0
    assert main([*base, "-o", str(tmp_path / "cap"), "--capture", "f: *q, q->n",
                 "--capture-strings", "--string-size", "32"]) == 0
    ns: dict = {}
    exec((tmp_path / "cap" / "btfgen_x86_64.py").read_text(), ns)
    caps = ns["function"]("f").captures
    assert [(c.name, c.kind, c.size) for c in caps] == [("*q", "value", 8), ("q->n", "value", 4),
                                                        ("p", "str", 32)]
    assert not ns["function"]("g").captures
    spec = ns["spec"]("f")
    assert spec[4] == 2 + 2 + 2 + 2  # nentry: two arguments, then ROOT + STR/COPY thrice: two arguments, then ROOT + STR/COPY thrice
    # Without the options nothing changes: the ABI of generated files is opt-in.
    plain: dict = {}
    exec((tmp_path / "plain" / "btfgen_x86_64.py").read_text(), plain)
    assert not plain["function"]("f").captures and plain["spec"]("f")[4] == 2
    capsys.readouterr()
    assert main([*base, "-o", str(tmp_path / "bad"), "--capture", "f: q->m"]) == 2
    assert capsys.readouterr().err == ("btfgen: error: --capture 'f: q->m': column 7: struct s "
                                       "has no member 'm'\n")
