"""The C module's handlers (_btfgen_lines, btfgen/probe/lines.c: an export's bare texts whole,
a printed line's with the texts its Python handler passes) are lines.py's Python ones and the
general path's, byte for byte: every integer width and sign at its extremes, pointers in text (hex) and
JSON (decimal), bools of any byte, enums named and not (names to escape, not ASCII), void, in
both byte orders; records too short, failed reads and lines too long for its buffer go the
general way alike. Under CI=true the module must be there (an install that could not build it
would otherwise leave every export on the slower path unseen)."""

from __future__ import annotations

import gc
import io
import os
import random
import struct

import pytest
from test_batch_lines import DATA, INT, _desc, _value, descriptors, events

from btfgen.decoder.runtime import Function, FunctionDesc
from btfgen.probe import event, lines, output

EXTENSION = lines.line_extension()

needs_extension = pytest.mark.skipif(
    EXTENSION is None, reason="_btfgen_lines is not installed (pip install . builds it where a "
    "C compiler and Python's headers are)")

ENUM_S = ("enum", 4, True, {1: "ONE", -2: 'T"W%sO', -(1 << 31): "LOWEST", 7: "été"})
ENUM_U = ("enum", 2, False, {0: "Z", 65535: "TOP"})
ENUM_64 = ("enum", 8, True, {-1: "ALL", 1 << 62: "BIG"})
EXTREMES = {(size, signed): (lo, lo + 1, -1 if signed else 0, 0, 1, hi - 1, hi)
            for (size, signed) in INT
            for lo, hi in [((-(1 << 8 * size - 1), (1 << 8 * size - 1) - 1) if signed
                            else (0, (1 << 8 * size) - 1))]}


def wide(order: str) -> list:
    """A function of every value kind the C module reads, a return of each, and names a
    format or JSON must escape (one not ASCII)."""
    args = [_value(f"i{size}{'s' if signed else 'u'}", ("int", size, signed))
            for size, signed in sorted(INT)]
    args += [_value("p", ("ptr", 8)), _value("q32", ("ptr", 4)), _value("flag", ("bool", 1)),
             _value("é%d", ENUM_S), _value("u", ENUM_U), _value("w", ENUM_64),
             _value('"k%%', ("int", 2, True))]
    plans = [(8 * n, -1, 1 << (n % 64)) for n in range(len(args))]
    out = [_desc('wide%s"\\é', 40, order, args, plans, _value("", ("int", 8, True)),
                 (0, -1, 1 << 20))]
    returns = [("int", 1, True), ("int", 2, False), ("int", 4, True), ("int", 8, False),
               ("ptr", 8), ("bool", 1), ENUM_S, ENUM_U]
    out += [_desc(f"ret{n}", 41 + n, order, [_value("x", ("int", 4, False))], [(0, -1, 1)],
                  _value("", t), (0, -1, 2)) for n, t in enumerate(returns)]
    out.append(_desc("nothing", 60, order, [], []))
    return out


def _extremes(descs, evs, order, seed):
    """The events with half their integer values set to their type's edges."""
    rng = random.Random(seed)
    by_id = {d.btf_id: d for d in descs}
    bo = "<" if order == "little" else ">"
    out = []
    for e in evs:
        e = bytearray(e)
        if len(e) >= DATA:
            btf_id, kind = struct.unpack_from(bo + "IB", e, event.EVENT_HEADER)
            d = by_id.get(btf_id)
            values = () if d is None else d.args if kind == 0 else \
                ((d.ret.value,) if d.ret else ())
            plans = () if d is None else d.record.entry if kind == 0 else d.record.exit
            for v, plan in zip(values, plans):
                t = v.type
                if t.tag in ("int", "ptr") and rng.random() < 0.5 \
                        and DATA + plan.data_off + t.size <= len(e):
                    signed = t.tag == "int" and t.signed
                    struct.pack_into(bo + INT[t.size, signed], e, DATA + plan.data_off,
                                     rng.choice(EXTREMES[t.size, signed]))
        out.append(bytes(e))
    return out


def _printer(descs, order, as_json):
    from btfgen.recordings.callwalk import _Lines

    return _Lines([Function(d) for d in descs], order, as_json, "auto")


def _lines(printer, evs, in_place: bool):
    """Each event's line (or the exception refusing it), the events laid in one buffer with
    0xa5 bytes between them where `in_place`."""
    buf, places, rng = bytearray(), [], random.Random(5)
    for e in evs:
        buf += b"\xa5" * rng.randrange(0, 24)
        places.append((len(buf), len(buf) + len(e)))
        buf += e
    view = memoryview(bytes(buf))
    flags_of = struct.Struct("<I").unpack_from
    out = []
    for e, (at, end) in zip(evs, places):
        try:
            if len(e) < DATA or flags_of(e, event.FLAGS_AT)[0]:
                out.append(printer.line(e, flags_of(e, event.FLAGS_AT)[0]) if len(e) >= DATA
                           else None)
                continue
            handler = printer.handler(e)
            out.append(handler(view, at, end) if in_place else handler(e, 0, len(e)))
        except Exception as x:  # a record too short: refused alike
            out.append(type(x))
    return out


def test_the_extension_is_built_where_ci_runs():
    """CI installs with a compiler and Python's headers (.ci/install): the module is built
    and of this lines.py's interface."""
    if not os.environ.get("CI"):
        pytest.skip("CI=true requires it; elsewhere it is optional")
    assert EXTENSION is not None, "_btfgen_lines was not built or is of another interface"


@needs_extension
@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
def test_c_lines_are_the_python_lines(order, as_json, in_place, monkeypatch):
    descs = [FunctionDesc.check(d) for d in wide(order) + descriptors(order)]
    evs = _extremes(descs, events(descs, 3000, 17, order), order, 23)
    c_printer = _printer(descs, order, as_json)
    got = _lines(c_printer, evs, in_place)
    with monkeypatch.context() as m:
        m.setattr(lines, "EXTENSION", None)  # handlers are made at a function's first event
        py_printer = _printer(descs, order, as_json)
        want = _lines(py_printer, evs, in_place)
    assert got == want
    # The C module made the handlers of the functions it can, and they made lines.
    made = {fn_id: h for fn_id, h in c_printer._handlers.items()
            if isinstance(h, EXTENSION.Line)}
    assert len(made) >= 2 * 10
    assert not any(isinstance(h, EXTENSION.Line) for h in py_printer._handlers.values())
    texts = [x for x in got if isinstance(x, str)]
    assert len(texts) > 1000
    assert any(("\\u00e9" if as_json else "é") in x for x in texts)  # JSON escapes it
    assert any("-9223372036854775808" in x for x in texts)
    assert any(("0xffffffffffffffff" if not as_json else "18446744073709551615") in x
               for x in texts)


@needs_extension
def test_what_the_c_line_does_not_make_goes_the_general_way():
    """A record too short, an `end` past the buffer, a failed read of one of its values, a
    line past its buffer and an enum text that is not str: each is general(buf[at:end])."""
    seen = []

    def general(raw):
        seen.append(bytes(raw))
        return "general"

    def line(pieces, need=16, mask=1):
        return EXTENSION.Line(False, need, 8, 8, mask, pieces, general)

    buf = bytes(range(8)) + struct.pack("<Q", 0) + bytes(range(16, 32))
    ok = line(["a=", ("u", 0, 4), " b=", ("d", 4, 2), "!"])
    assert ok(buf, 0, 16) == "a=%d b=%d!" % struct.unpack_from("<Ih", buf)
    assert ok(buf, 0, 15) == "general" and seen[-1] == buf[:15]
    assert ok(buf, 16, 40) == "general" and seen[-1] == buf[16:40]  # end past the buffer
    assert ok(buf, -1, 15) == "general"
    failed = bytes(8) + struct.pack("<Q", 3) + bytes(16)
    assert ok(failed, 0, 16) == "general"
    assert line(["x"], mask=4)(failed, 0, 16) == "x"  # a bit of another value
    assert line(["%" * 5000])(buf, 0, 16) == "general"  # past the line's buffer
    with pytest.raises(KeyError):  # a mapping's own error is the caller's
        line([("e", 0, 4, {})])(buf, 0, 16)
    assert line([("E", 0, 1, {0: 5})])(buf, 0, 16) == "general"  # not a text
    assert line([("E", 0, 1, {0: "zéro"})])(buf, 0, 16) == "zéro"
    assert line([("b", 1, 1, ("no", "oui"))])(buf, 0, 16) == "oui"
    assert line([("x", 0, 8)])(bytes(16), 0, 16) == "0x0"


@needs_extension
@pytest.mark.parametrize("pieces, need, error", [
    ([("u", 12, 8)], 16, ValueError),      # a value past what the line needs
    ([("u", -1, 1)], 16, ValueError),
    ([("u", 0, 3)], 16, ValueError),       # no such width
    ([("z", 0, 4)], 16, ValueError),       # no such kind
    ([("b", 0, 1)], 16, TypeError),        # a bool without its texts
    ([("e", 0, 4, 5)], 16, TypeError),     # an enum without its mapping
    ([b"bytes"], 16, TypeError),
    (["\udcff"], 16, ValueError),          # a lone surrogate: no UTF-8 of it
    ([], 12, ValueError),                  # the failed mask (8..16) past what it needs
])
def test_a_line_refuses_what_it_cannot_read(pieces, need, error):
    with pytest.raises(error):
        EXTENSION.Line(False, need, 8, 8, 1, pieces, print)


@needs_extension
def test_a_line_is_called_with_its_three_arguments_only():
    line = EXTENSION.Line(False, 16, 8, 8, 1, ["x"], print)
    with pytest.raises(TypeError):
        line(bytes(16), 0)
    with pytest.raises(TypeError):
        line(bytes(16), 0, 16, end=3)
    with pytest.raises(TypeError):
        line("not a buffer", 0, 16)
    made = EXTENSION.Line.__new__(EXTENSION.Line)
    with pytest.raises(TypeError):
        made(bytes(16), 0, 16)


@needs_extension
def test_a_line_and_its_general_path_in_a_cycle_are_collected():
    """The printer keeps its handlers and a handler its printer's general path: the cycle
    is the collector's to break (the Line is tracked)."""
    class Printer:
        def general(self, raw):
            return "general"

    p = Printer()
    p.line = EXTENSION.Line(False, 16, 8, 8, 1, ["x"], p.general)
    assert gc.is_tracked(p.line)
    del p
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o).__name__ == "Printer"
                and o.__class__.__module__ == __name__]


@needs_extension
def test_a_format_the_c_line_cannot_cut_stays_python(monkeypatch):
    """A conversion other than %d, %#x and %s (a duration's %.3f), or more conversions than
    values: the handler is lines.py's, not a Line with a wrong literal in it."""
    descs = [FunctionDesc.check(d) for d in wide("little")]
    evs = [e for e in events(descs, 400, 3, "little") if len(e) >= DATA]
    entry = lines._entry
    for extra in (" %.3f", " %d"):
        with monkeypatch.context() as m:
            m.setattr(lines, "_entry", lambda *a, extra=extra: (entry(*a)[0] + extra,
                                                                 entry(*a)[1]))
            printer = _printer(descs, "little", False)
            for e in evs:
                if struct.unpack_from("<B", e, event.EVENT_HEADER + 4)[0] == 0:
                    printer.handler(e)
            made = [h for k, h in printer._handlers.items() if k & 1 == 0]
            assert made and not any(isinstance(h, EXTENSION.Line) for h in made)


@needs_extension
@pytest.mark.parametrize("order", ["little", "big"])
def test_whole_lines_made_in_c_are_the_general_paths(order, monkeypatch, capsys):
    """A printed line (its head, who made the call, captures, a duration) is made by the C
    module too, the Python handler passing it the texts it does not read from the event (the
    comm, each capture's string, the duration): the lines of every printer mode, a batch at a
    time and in place, are the general path's, event by event."""
    from test_batch_lines import MODES, _batched, _decodable, _general, _recorded

    descs = [FunctionDesc.check(d) for d in wide(order) + descriptors(order)]
    evs = _extremes(descs, events(descs, 2500, 29, order), order, 31)
    rng = random.Random(2)
    for kw in MODES:
        want = _general(monkeypatch, [Function(d) for d in descs], order, evs, capsys, **kw)
        got = _batched([Function(d) for d in descs], order, evs, capsys, rng, **kw)
        assert got == want, kw
    for kw in ({}, {"who": True}, {"as_json": True}):
        good = _decodable([Function(d) for d in descs], order, evs, **kw)
        want = _general(monkeypatch, [Function(d) for d in descs], order, good, capsys, **kw)
        assert _recorded([Function(d) for d in descs], order, good, rng, **kw) == want[0], kw
        # The C module made most of the handlers' lines (all but those it leaves: a struct
        # by value, repeated names, a value capture).
        p = output.Printer([Function(d) for d in descs], order, io.StringIO(), flush=False,
                           batch=True, **kw)
        p.records(good)
        with_c = [h for h in p._handlers.values()
                  if any(isinstance(v, EXTENSION.Line) for v in
                         getattr(h, "__globals__", {}).values())]
        assert len(with_c) >= 20, kw


@needs_extension
def test_a_printed_line_past_the_c_modules_buffer_is_the_python_formats(monkeypatch, capsys):
    """A captured string long enough that the line passes the C module's buffer: the Line
    gives it back and the handler's own format writes it, from the whole record (its struct
    for the module reads the heads alone): the general path's line, in every printer mode."""
    from test_batch_lines import CAPTURE, MODES, _batched, _cap, _general

    order = "little"
    descs = [FunctionDesc.check(_desc(
        "long", 70, order, [_value("a", ("int", 8, True)), _value("s", ("ptr", 8)),
                            _value("f", ("bool", 1))],
        [(0, -1, 1), (8, -1, 2), (16, -1, 4)], _value("", ("int", 4, True)), (0, -1, 8),
        [_cap("s", "str", ("chars", 6000), 6000, False, 24, 2, ("s",))]))]
    long_text = "ü".encode() * 2600
    evs = []
    for e in events(descs, 300, 11, order):
        e = bytearray(e)
        at = DATA + 24
        if len(e) >= at + event.CAPTURE_HEADER + len(long_text) + 1 \
                and e[event.EVENT_HEADER + 4] == 0:
            CAPTURE[order].pack_into(e, at, lines.CAPTURE_READ, 0, 0, 0, len(long_text) + 1,
                                     0, 0x1000)
            e[at + event.CAPTURE_HEADER:at + event.CAPTURE_HEADER + len(long_text) + 1] = \
                long_text + b"\0"
        evs.append(bytes(e))
    rng = random.Random(3)
    for kw in MODES:
        want = _general(monkeypatch, [Function(d) for d in descs], order, evs, capsys, **kw)
        got = _batched([Function(d) for d in descs], order, evs, capsys, rng, **kw)
        assert got == want, kw
        if not kw.get("errors"):
            assert any(len(line.encode()) > 5000 for line in got[0].splitlines()), kw
    p = output.Printer([Function(d) for d in descs], order, io.StringIO(), batch=True)
    p.records(evs)
    assert any(isinstance(v, EXTENSION.Line) for h in p._handlers.values()
               for v in getattr(h, "__globals__", {}).values())


@needs_extension
def test_a_text_reading_a_value_leaves_the_line_to_python(monkeypatch, capsys):
    """A format argument Python computes from a value (here the first value's repr, added to
    each entry's format) is never passed to the C module, whose handler's struct reads the
    heads alone: that line is the Python format's, the same as without the module."""
    import re

    heads = len(lines.HEAD_ITEMS)
    entry = lines._entry

    def widened(*a):
        text, args = entry(*a)
        read = [e for e in args if any(int(n) >= heads for n in re.findall(r"t\[(\d+)\]", e))]
        return (text + " %s", [*args, f"repr({read[0]})"]) if read else (text, args)

    order = "little"
    descs = [FunctionDesc.check(d) for d in wide(order) + descriptors(order)]
    evs = events(descs, 1200, 8, order)
    monkeypatch.setattr(lines, "_entry", widened)
    for kw in ({}, {"who": True}, {"as_json": True}):
        printed = []
        for extension in (EXTENSION, None):
            monkeypatch.setattr(lines, "EXTENSION", extension)
            out = io.StringIO()
            output.Printer([Function(d) for d in descs], order, out, flush=False, batch=True,
                           **kw).records(evs)
            printed.append((out.getvalue(), capsys.readouterr().err))
        assert printed[0] == printed[1], kw
        assert printed[0][0].count(" ") > 1000
