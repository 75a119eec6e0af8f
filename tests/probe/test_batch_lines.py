"""The printer's compiled lines (probe/lines.py), a batch at a time, are the general path's
(value by value through the decoder, one event at a time), byte for byte: entries, exits,
exits whose entry was lost, failed reads, captures read, NULL, faulted or cut short, records too
short, names a format string or JSON must escape; text, --who, JSON and --errors."""

from __future__ import annotations

import io
import random
import struct

import pytest
import synth

from btfgen.decoder.runtime import Function, FunctionDesc
from btfgen.probe import event, lines, output, recording, ringspan, spec_format

DATA = event.DATA
CAPTURE = spec_format.structs(spec_format.CAPTURE_HEAD)
INT = {(1, False): "B", (1, True): "b", (2, False): "H", (2, True): "h", (4, False): "I",
       (4, True): "i", (8, False): "Q", (8, True): "q"}
COLOR = ("enum", 4, True, {1: "ONE", 2: 'T"W%sO', -3: "MINUS"})
POINT = ("struct", 8, (("x", 0, 0, ("int", 4, True)), ("y", 32, 0, ("int", 4, True))))


def _value(name, t, size=None):
    return (name, t, size or t[1], (), False, None)


def _cap(name, kind, t, size, at_exit, head, mask, pointers):
    return (name, kind, t, size, 0, 0, at_exit, head, mask, pointers)


def _desc(name, btf_id, order, args, plans, ret=None, ret_plan=None, caps=()):
    return (name, btf_id, order, 8, tuple(args), None if ret is None else (ret, False), None,
            (tuple(plans), () if ret is None else (ret_plan,)), tuple(caps))


def descriptors(order: str) -> list:
    """Functions of every kind the compiled lines make, and of the kinds they leave to the
    general path (a struct by value, a value capture, repeated names or paths), with names to
    escape."""
    full = _desc(
        'f%d{x}"\\', 11, order,
        [_value("a", ("int", 4, True)), _value("%s", ("int", 8, False)), _value("p", ("ptr", 8)),
         _value("flag", ("bool", 1)), _value("color", COLOR), _value("s", ("ptr", 8)),
         _value("h", ("int", 2, True))],
        [(0, -1, 1), (8, -1, 2), (16, -1, 4), (24, -1, 8), (32, -1, 16), (40, -1, 32),
         (48, -1, 64)],
        _value("", ("int", 8, True)), (0, -1, 1 << 10),
        [_cap("s", "str", ("chars", 12), 12, False, 56, 32, ("s",)),
         _cap("p->na%me", "str", ("chars", 5), 5, False, 88, 4, ("p",)),
         _cap("return->x", "str", ("chars", 8), 8, True, 8, 1 << 10, ("return",))])
    return [
        full,
        _desc("void", 12, order, [], []),
        _desc("ptr_ret", 13, order, [_value("n", ("int", 4, False))], [(0, -1, 1)],
              _value("", ("ptr", 8)), (0, -1, 2)),
        _desc("by_value", 14, order, [_value("pt", POINT), _value("k", ("int", 8, True))],
              [(0, -1, 1), (8, -1, 2)], _value("", ("bool", 1)), (0, -1, 4)),
        _desc("twice", 15, order, [_value("x", ("int", 4, True)), _value("x", ("ptr", 8))],
              [(0, -1, 1), (8, -1, 2)], _value("", ("int", 4, True)), (0, -1, 4)),
        _desc("value_cap", 16, order, [_value("q", ("ptr", 8))], [(0, -1, 1)],
              _value("", ("enum", 2, False, {0: "Z"})), (0, -1, 2),
              [_cap("q->v", "value", ("int", 4, True), 4, False, 8, 1, ("q",))]),
        _desc("same_path", 17, order, [_value("q", ("ptr", 8))], [(0, -1, 1)],
              caps=[_cap("q", "str", ("chars", 4), 4, False, 8, 1, ("q",)),
                    _cap("q", "str", ("chars", 6), 6, False, 32, 1, ("q",))]),
    ]


STRINGS = [b"", b"bench", b"/etc/hostname", b"\xff\xfe not utf-8", "é%s{}\"\\\n".encode(),
           b"with\0nul", b"exactly12chr", b"longer than any limit here"]


def _data(desc, kind: int, rng: random.Random, order: str) -> bytearray:
    bo = "<" if order == "little" else ">"
    size = recording.stride(desc) - DATA
    data = bytearray(rng.randbytes(size))
    values = desc.args if kind == 0 else ((desc.ret.value,) if desc.ret else ())
    plans = desc.record.entry if kind == 0 else desc.record.exit
    for v, plan in zip(values, plans):
        t = v.type
        if t.tag == "enum" and rng.random() < 0.7:
            struct.pack_into(bo + INT[t.size, t.signed], data, plan.data_off,
                             rng.choice(list(t.names)))
        elif t.tag == "bool":
            data[plan.data_off] = rng.choice((0, 1, 0x80))
        elif kind == 1 and t.tag in ("int", "ptr") and t.size >= 4 and rng.random() < 0.4:
            # A failed call, or one at the edge of failing.
            top, signed = 1 << 8 * t.size, t.tag == "int" and t.signed
            value = rng.choice((-1, -2, -4095, -4096, 0, 1))
            struct.pack_into(bo + INT[t.size, signed], data, plan.data_off,
                             value if signed else value % top)
    for c in desc.captures:
        if c.at_exit != bool(kind):
            continue
        text = rng.choice(STRINGS)[:c.size + 1]  # BPF reads one past the limit
        status = rng.choices((1, 0, 2, 3), (8, 1, 1, 1))[0]
        n = len(text) + 1 if rng.random() < 0.9 else rng.randrange(0, 3 * c.size)
        CAPTURE[order].pack_into(data, c.head, status, rng.randrange(2), rng.randrange(3), 0,
                                 n, 0, rng.getrandbits(64))
        at = c.head + event.CAPTURE_HEADER
        data[at:at + len(text) + 1] = text + b"\0"
    return data


def _flags(rng: random.Random, kind: int) -> int:
    """A record's flags now and then: records lost before it (its thread's, or any thread's),
    an exit not to be paired (an fsession's whose entry was skipped, fentry.multi's), the
    errno of a failed system call at a user function's exit."""
    flags = 0
    if rng.random() < 0.04:
        flags |= spec_format.EVENT_THREAD_LOST
    if rng.random() < 0.01:
        flags |= spec_format.EVENT_SOME_LOST
    if rng.random() < 0.03:
        flags |= rng.choice((spec_format.EVENT_NO_ENTRY, spec_format.EVENT_UNPAIRED))
    if kind == 1 and rng.random() < 0.05:
        flags |= rng.randrange(1, 512) << output.EVENT_ERRNO_SHIFT
    return flags


def events(descs, n: int, seed: int, order: str, flagged: bool = False) -> list[bytes]:
    """Calls nested on a few threads, some entries and exits lost, some reads failed, some
    records cut short or longer than their function's (the ring buffer's fixed size); with
    `flagged`, some with flags (_flags)."""
    rng = random.Random(seed)
    out, ns, stacks = [], 1000, {100: [], 101: [], 102: []}
    comms = [b"tracee", b"%s{}\"\\", "é".encode(), b"x" * 16]
    while len(out) < n:
        tid = rng.choice(list(stacks))
        stack = stacks[tid]
        if stack and rng.random() < 0.55:
            desc = stack.pop()
            kind = 1
            if rng.random() < 0.1:
                continue  # an exit lost
        else:
            desc = rng.choice(descs)
            kind = 0
            stack.append(desc)
            if rng.random() < 0.1:
                stack[-1:] = []  # an entry lost: its exit alone
                kind = 1
        ns += rng.randrange(1, 5000)
        failed = rng.getrandbits(64) if rng.random() < 0.1 else 0
        head = event.HEADS[order].pack(7, tid, rng.choice(comms), ns, rng.randrange(4),
                                       _flags(rng, kind) if flagged else 0)
        rec = synth.RECORD_HEADS[order].pack(desc.btf_id, kind, failed)
        raw = head + rec + _data(desc, kind, rng, order)
        if rng.random() < 0.03:
            raw = raw[:rng.randrange(DATA - 8, len(raw))]
        elif rng.random() < 0.1:
            raw += rng.randbytes(1080 - len(raw)) if len(raw) < 1080 else b""
        out.append(raw)
    return out


def _general(monkeypatch, functions, order, evs, capsys, **kw) -> tuple[str, str]:
    """One event at a time, every line by the general path."""
    with monkeypatch.context() as m:
        for name in ("compile_handler", "compile_errors_handler"):
            m.setattr(lines, name, lambda *a, **k: None)
        out = io.StringIO()
        p = output.Printer(functions, order, out, flush=False, **kw)
        for e in evs:
            p.record(e)
    return out.getvalue(), capsys.readouterr().err


def _batched(functions, order, evs, capsys, rng, **kw) -> tuple[str, str]:
    out = io.StringIO()
    p = output.Printer(functions, order, out, flush=False, batch=True, **kw)
    at = 0
    while at < len(evs):
        n = rng.choice((1, 3, 64, 4096))
        # As a span of the ring buffer: its records are views of memory the kernel writes
        # again once the call returns (here, garbage), which no line may then show. Half the
        # time the span itself (ringspan.Span: the ring's layout, discarded records between,
        # its runs found by the reader's walk, its records read where they lie).
        if rng.random() < 0.5:
            span, records = _ring_span(evs[at:at + n], rng)
            p.records(records)
        else:
            span = bytearray(b"".join(evs[at:at + n]))
            views, start = [], 0
            for e in evs[at:at + n]:
                views.append(memoryview(span)[start:start + len(e)])
                start += len(e)
            p.records(views)
            del views
        span[:] = bytes(len(span)) if len(span) % 2 else b"\xa5" * len(span)
        at += n
    return out.getvalue(), capsys.readouterr().err


def _ring_span(evs, rng) -> tuple[bytearray, ringspan.Span]:
    """`evs` laid out as the ring lays records out (headers in this machine's order, as the
    ring's reader walks them), a discarded record now and then between them."""
    data = bytearray()
    for e in evs:
        if rng.random() < 0.05:
            data += struct.pack("=II", ringspan.DISCARD | 24, 0) + b"\x5a" * 24
        data += struct.pack("=II", len(e), 0) + e + bytes(-len(e) % 8)
    return data, ringspan.Span(memoryview(data), None, len(evs))


def _recorded(functions, order, evs, rng, **kw) -> str:
    """As `btfgen decode` prints a recording (Printer.events): each event read where it lies
    in its span, 0xa5 bytes between the events."""
    out = io.StringIO()
    p = output.Printer(functions, order, out, flush=False, batch=True, **kw)
    at = 0
    while at < len(evs):
        n = rng.choice((1, 3, 64, 4096))
        span, starts, ends = bytearray(), [], []
        for e in evs[at:at + n]:
            span += b"\xa5" * rng.randrange(0, 16)
            starts.append(len(span))
            span += e
            ends.append(len(span))
        p.events([(memoryview(span), starts, ends)])
        at += n
    return out.getvalue()


def _decodable(functions, order, evs, **kw) -> list:
    """The events the general path prints (a recording's printer stops at one it refuses)."""
    p = output.Printer(functions, order, io.StringIO(), flush=False, **kw)
    out = []
    for e in evs:
        try:
            p.event(e)
        except Exception:  # what record() says and goes past
            continue
        out.append(e)
    return out


MODES = [{}, {"who": True}, {"as_json": True}, {"errors": True}, {"errors": True, "as_json": True},
         {"who": True, "errors": True}]


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("seed", range(6))
def test_batches_print_what_one_event_at_a_time_prints(order, seed, monkeypatch, capsys):
    descs = [FunctionDesc.check(d) for d in descriptors(order)]
    evs = events(descs, 1500, seed, order, flagged=seed % 2 == 1)
    rng = random.Random(seed)
    for kw in MODES:
        want = _general(monkeypatch, [Function(d) for d in descs], order, evs, capsys, **kw)
        got = _batched([Function(d) for d in descs], order, evs, capsys, rng, **kw)
        assert got == want, kw
        good = _decodable([Function(d) for d in descs], order, evs, **kw)
        assert len(good) > len(evs) // 2
        want = _general(monkeypatch, [Function(d) for d in descs], order, good, capsys, **kw)
        assert _recorded([Function(d) for d in descs], order, good, rng, **kw) == want[0], kw
        capsys.readouterr()  # what _decodable's and _recorded's printers said once
    # The events went both ways: compiled lines, and the general path (failed reads, captures
    # not read, short records, the functions the compiled lines leave to it).
    kinds = {(d.btf_id, k) for d in descs for k in (0, 1)}
    p = output.Printer([Function(d) for d in descs], order, io.StringIO(), batch=True)
    p.records(evs)
    made = {k for k, h in p._handlers.items() if getattr(h, "__name__", "") == "handler"}
    assert 0 < len(made) < len(kinds)


@pytest.mark.parametrize("arch", ["x86_64", "s390x", "i386", "arm64"])
def test_generated_modules_batches_print_what_one_event_at_a_time_prints(arch, monkeypatch,
                                                                          capsys):
    """The goldens' functions (every arch's byte order and pointer size), random values."""
    mod = synth.module(arch)
    evs = synth.events(synth.descriptors(mod), 800, 5, mod.BYTE_ORDER, 0.2)
    rng = random.Random(1)
    for kw in MODES:
        fns = [Function(d) for d in synth.descriptors(mod)]
        want = _general(monkeypatch, fns, mod.BYTE_ORDER, evs, capsys, **kw)
        got = _batched([Function(d) for d in synth.descriptors(mod)], mod.BYTE_ORDER, evs,
                       capsys, rng, **kw)
        assert got == want, kw


def test_a_batch_is_one_write():
    class Out(io.StringIO):
        writes = 0

        def write(self, text):
            self.writes += 1
            return super().write(text)

    order = "little"
    descs = [FunctionDesc.check(d) for d in descriptors(order)]
    evs = [e for e in events(descs, 600, 1, order) if len(e) >= DATA]
    out = Out()
    p = output.Printer([Function(d) for d in descs], order, out, batch=True, flush=False)
    assert p.records(evs)
    assert out.writes == 1 and out.getvalue().count("\n") > 100


def test_a_reader_gone_ends_the_batches():
    """`| head` went away: records() says so (False), and prints nothing more."""
    class Gone(io.StringIO):
        def write(self, text):
            raise BrokenPipeError

    order = "little"
    descs = [FunctionDesc.check(d) for d in descriptors(order)]
    evs = [e for e in events(descs, 300, 2, order) if len(e) >= DATA]
    p = output.Printer([Function(d) for d in descs], order, Gone(), batch=True, flush=False)
    assert p.records(evs) is False and p.gone
    assert p.records(evs) is False and not p._lines


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("as_json", [False, True])
def test_bare_lines_are_the_general_paths_made_bare(order, as_json, monkeypatch):
    """An export's texts (recordings/callwalk.py: lines.compile_handler's `bare`, no head, no
    pairing) are the general path's lines with their head taken off, event by event."""
    from btfgen.recordings.callwalk import _Lines

    descs = [FunctionDesc.check(d) for d in descriptors(order)]
    evs = [e for e in events(descs, 1500, 7, order) if len(e) >= DATA]
    flags_of = struct.Struct(("<" if order == "little" else ">") + "I").unpack_from

    def lines_of(printer):
        out = []
        for e in evs:
            try:
                out.append(printer.line(e, flags_of(e, event.FLAGS_AT)[0]))
            except Exception as x:  # a record too short: refused alike
                out.append(type(x))
        return out

    compiled = _Lines([Function(d) for d in descs], order, as_json, "auto")
    got = lines_of(compiled)
    with monkeypatch.context() as m:
        m.setattr(lines, "compile_handler", lambda *a, **k: None)
        want = lines_of(_Lines([Function(d) for d in descs], order, as_json, "auto"))
    assert got == want
    assert any(getattr(h, "__name__", "") == "handler" for h in compiled._handlers.values())
    texts = [x for x in got if isinstance(x, str)]
    head = '"timestamp"' if as_json else "tracee["
    assert texts and not any(head in x for x in texts)


@pytest.mark.parametrize("as_json", [False, True])
def test_bare_lines_read_in_place_are_each_events_own(as_json):
    """callwalk's walk hands a bare handler its event where it lies (buf, at, end), no view
    made: the line is the one of the event on its own (the bytes around each event here are
    0xa5: a handler reading them, or reading from the buffer's start, would differ)."""
    from btfgen.recordings.callwalk import _Lines

    order = "little"
    descs = [FunctionDesc.check(d) for d in descriptors(order)]
    evs = [bytes(e) for e in events(descs, 1500, 11, order) if len(e) >= DATA]
    printer = _Lines([Function(d) for d in descs], order, as_json, "auto")
    flags_of = struct.Struct("<I").unpack_from
    plain = [e for e in evs if not flags_of(e, event.FLAGS_AT)[0]]
    rng = random.Random(3)
    buf, places = bytearray(), []
    for e in plain:
        buf += b"\xa5" * rng.randrange(0, 40)
        places.append((len(buf), len(buf) + len(e)))
        buf += e
    buf += b"\xa5" * 64
    view = memoryview(bytes(buf))

    def line(handler, *where):
        try:
            return handler(*where)
        except Exception as x:  # a record too short: refused alike
            return type(x)

    got = [line(printer.handler(e), view, at, end) for e, (at, end) in zip(plain, places)]
    want = [line(printer.handler(e), e, 0, len(e)) for e in plain]
    assert got == want
    assert sum(isinstance(x, str) for x in got) > 100
