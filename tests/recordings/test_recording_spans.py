"""Recording format 2's spans read back: numpy's grouping (views of the span where a run lays
a function's records evenly, gathers elsewhere) gives what the standard library's record by
record gives, sections and records in arrival order alike, for any mix of functions, lengths
(shorter or longer than a function's stride), discarded records and runs of periods 1 to 4;
runs that say other headers than the bytes hold, or cannot be, are refused by both."""

from __future__ import annotations

import random
import struct

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from btfgen.probe import event, recording, ringspan
from btfgen.recordings import grouping
from btfgen.recordings.reader import Reader

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.usefixtures("numpy_s_own_way")  # conftest.py

ARCHES = ["x86_64", "s390x"]  # both byte orders
MODULES = {a: synth.module(a) for a in ARCHES}


def compress(words: list[int]) -> list[tuple[int, tuple[int, ...]]]:
    """Header words as runs of periods 1 to 4, greedily (as the ring reader may find them)."""
    runs, i = [], 0
    while i < len(words):
        best, best_n = (words[i],), 1
        for p in (1, 2, 3, 4):
            pat = tuple(words[i:i + p])
            if len(pat) < p:
                break
            n = 1
            while tuple(words[i + n * p:i + (n + 1) * p]) == pat:
                n += 1
            if n * p > best_n * len(best):
                best, best_n = pat, n
        runs.append((best_n, best))
        i += best_n * len(best)
    return runs


def span_of(raws: list[bytes], discarded: list[bool], order: str) -> ringspan.Span:
    head = struct.Struct("<II" if order == "little" else ">II")
    data, words = bytearray(), []
    for raw, gone in zip(raws, discarded):
        w = len(raw) | (ringspan.DISCARD if gone else 0)
        words.append(w)
        data += head.pack(w, 0) + raw + bytes(-len(raw) % 8)
    return ringspan.Span(memoryview(data), compress(words), discarded.count(False))


def _sections(reader, by: type[grouping.Grouping]):
    """Each function and kind's events, in arrival order, as bytes of the stride each."""
    out: dict = {}
    group = by(reader)
    for batch in reader.batches():
        for fn, kind, count, payload in group.sections(batch):
            stride = reader.strides[fn]
            got = [bytes(grouping.record_bytes(payload, i, stride)) for i in range(count)]
            out.setdefault((fn, kind), []).extend(got)
    return out


@settings(max_examples=120, deadline=None)
@given(arch=st.sampled_from(ARCHES), seed=st.integers(0, 2**32), spans=st.integers(1, 4),
       loop=st.integers(0, 200), discard=st.sampled_from([0.0, 0.05, 0.3]),
       masks=st.sampled_from([0, 16]))
def test_numpy_groups_as_the_standard_library_does(tmp_path_factory, arch, seed, spans,
                                                   loop, discard, masks):
    mod = MODULES[arch]
    descs = synth.descriptors(mod)
    rng = random.Random(seed)
    order = mod.BYTE_ORDER
    path = tmp_path_factory.mktemp("spans") / "r.btfrec"
    w = recording.Writer(str(path), synth.header(mod), descs, order)
    kept = []
    for _ in range(spans):
        evs = synth.events(descs, rng.randint(1, 60), rng.getrandbits(32), order)
        # A loop: one function's entry and exit over and over (long runs: the strided views).
        d = rng.choice(descs)
        call = [synth.event(d, k, rng, 1000 + k, order=order) for k in (0, 1)]
        at = rng.randint(0, len(evs))
        evs[at:at] = call * loop
        # Lengths: as written, cut to 56 + a multiple of 8, longer than the stride, or each
        # function and kind its own (as the BPF side writes them: a loop's calls are then a
        # run of their own, and its records views of the span).
        size = rng.choice([None, "short", "long", "own", "own"])
        if size == "own":
            evs = [e[:56 + 8 * ((e[40] * 7 + e[44] * 3) % 40)] for e in evs]
        elif size == "short":
            evs = [e[:rng.choice((56, 64, 96, 200))] for e in evs]
        elif size == "long":
            evs = [e + bytes(rng.choice((0, 8, 100))) for e in evs]
        gone = [rng.random() < discard for _ in evs]
        w.span(span_of(evs, gone, order))
        kept += [e for e, g in zip(evs, gone) if not g]
    w.close(0)
    with Reader(str(path)) as r:
        plain = _sections(r, grouping.Grouping)
    with Reader(str(path)) as r, pytest.MonkeyPatch.context() as m:
        m.setattr(grouping, "MASKS", masks)  # 0: a long run's functions split by sorting
        fast = _sections(r, grouping.NumpyGrouping)
    assert fast == plain
    for by in (grouping.Grouping, grouping.NumpyGrouping):
        with Reader(str(path), grouping=by) as r:
            events = [bytes(e) for b in r.batches() for e in b.events()]
        assert events == kept, by
    # What the standard library grouped: each event cut or zero-padded to its stride.
    with Reader(str(path)) as r:
        index, strides = r.index, r.strides
    head = synth.RECORD_HEADS[order]
    want: dict = {}
    for e in kept:
        btf_id, kind, _ = head.unpack_from(e, event.EVENT_HEADER)
        s = strides[index[btf_id]]
        want.setdefault((index[btf_id], kind), []).append(e[:s] + bytes(max(0, s - len(e))))
    assert plain == want


def test_a_loop_s_records_are_a_view_of_the_span(tmp_path):
    """A traced loop's entries and exits, a run of period 2 in the ring: each a view of the
    span's bytes (a step of both records), not a copy; the others' records are gathered."""
    mod = MODULES["x86_64"]
    descs = synth.descriptors(mod)
    rng = random.Random(3)
    d = descs[0]
    # Two lengths, each at least the function's stride (records shorter than it are gathered
    # and zero-padded: the stride is the larger kind's).
    call = [synth.event(d, 0, rng, 1).ljust(1080, b"\0"),
            synth.event(d, 1, rng, 2).ljust(600, b"\0")]
    evs = call * 50 + synth.events(descs[1:], 7, 1, "little")
    path = tmp_path / "r.btfrec"
    w = recording.Writer(str(path), synth.header(mod), descs, "little")
    w.span(span_of(evs, [False] * len(evs), "little"))
    w.close(0)
    with Reader(str(path)) as r:
        (batch,) = list(r.batches())
        assert batch.runs[0] == (50, (len(call[0]), len(call[1])))
        sections = {(fn, kind): p for fn, kind, _n, p in grouping.NumpyGrouping(r).sections(batch)}
        step = ringspan.record_size(len(call[0])) + ringspan.record_size(len(call[1]))
        span = np.frombuffer(batch.data, np.uint8)
        for (fn, kind), p in sections.items():
            loop = fn == r.index[d.btf_id]
            assert (p.strides[0] == step) == loop and np.shares_memory(p, span) == loop
            assert len(p) == 50 or not loop


@pytest.mark.parametrize("whose", ["zlib", "fast"])
@pytest.mark.parametrize("version", [recording.VERSION, 2])
def test_long_spans_checked_a_chunk_at_a_time(tmp_path, monkeypatch, version, whose):
    """Spans of many chunks (a chunk made small), their checks taken (versions 3 on) on the
    writer's thread and the reader's checkers (zlib's CRC) or at once (libdeflate's, where it
    is installed): every event reads back in order, and a byte changed anywhere in the bytes or
    their checks is refused where a later span follows, and taken as the cut of a killed
    writer where it is the last."""
    import zlib

    import recording_v2

    from btfgen.probe import crc

    monkeypatch.setattr(recording, "CHUNK", 64)
    monkeypatch.setattr(recording, "THREADED", 0)
    if whose == "zlib":
        monkeypatch.setattr(crc, "crc32", zlib.crc32)
        monkeypatch.setattr(crc, "WHOSE", "zlib")
    else:
        monkeypatch.setattr(crc, "SMALL", 0)  # every CRC through the library, where it is

    mod = MODULES["x86_64"]
    descs = synth.descriptors(mod)
    evs = synth.events(descs, 60, 5, "little")
    path = tmp_path / "r.btfrec"
    make = recording.Writer if version == recording.VERSION else recording_v2.Writer
    w = make(str(path), synth.header(mod), descs, "little")
    spans = [evs[:25], evs[25:26], evs[26:]]
    for part in spans:
        w.records(part)
    w.close(0)
    with Reader(str(path)) as r:
        got = [bytes(e) for b in r.batches() for e in b.events()]
        assert r.version == version and r.events == len(evs) and r.cut is None
    assert got == [bytes(e) for e in evs]
    good = path.read_bytes()
    first = good.index(b"SPAN")
    second = good.index(b"SPAN", first + 4)
    for at in range(first + recording.SPAN_HEAD.size, second, 7):  # the first span's bytes on
        data = bytearray(good)
        data[at] ^= 0x40
        path.write_bytes(bytes(data))
        with pytest.raises(recording.RecordError), Reader(str(path)) as r:
            for _ in r.batches():
                pass
    last = good.rindex(b"SPAN")
    data = bytearray(good[:-recording.END.size])
    data[-1 if version == 4 else -3] ^= 1  # the last span's checks (4) or bytes (2), no end
    path.write_bytes(bytes(data))
    with Reader(str(path)) as r:
        n = sum(b.count for b in r.batches())
        assert r.cut == (last, n) and n == len(spans[0]) + len(spans[1])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 80))
def test_a_trusted_span_gives_the_records_a_walk_gives(tmp_path_factory, seed, n):
    """A span checked by an earlier pass (the reader's `trust`) gives its records from its runs
    alone: the same records, in the same order, as the walk that reads every header, for runs
    of periods 1 to 4 with discarded records among them."""
    rng = random.Random(seed)
    mod = MODULES["x86_64"]
    descs = synth.descriptors(mod)
    pool = synth.events(descs, 4, seed % 1000, "little")
    evs = [pool[rng.randrange(len(pool))] for _ in range(n)]
    if rng.random() < 0.5:  # a loop: a period repeating
        evs = evs[:rng.randint(1, 4)] * rng.randint(2, 20)
    gone = [rng.random() < 0.2 for _ in evs]
    path = tmp_path_factory.mktemp("trust") / "r.btfrec"
    w = recording.Writer(str(path), synth.header(mod), descs, "little")
    w.span(span_of(evs, gone, "little"))
    w.close(0)
    got = {}
    for by in (grouping.Grouping, grouping.NumpyGrouping):
        for trust in (0, path.stat().st_size):
            for at_once in (3, grouping.RECORDS_AT_ONCE):  # handed on a few at a time, or all
                with Reader(str(path), trust=trust, grouping=by) as r, \
                        pytest.MonkeyPatch.context() as m:
                    m.setattr(grouping, "RECORDS_AT_ONCE", at_once)
                    got[by, trust, at_once] = [bytes(e) for b in r.batches() for e in b.events()]
    assert list(got.values()) == [[e for e, g in zip(evs, gone) if not g]] * 8


def _lying(tmp_path, runs, records=None):
    """A recording of one span of x86_64 events whose run table is `runs` (its checksums
    right): each grouping's error reading its records, or None."""
    mod = MODULES["x86_64"]
    descs = synth.descriptors(mod)
    evs = [e[:56 + 8 * (i % 3)] for i, e in enumerate(synth.events(descs, 6, 3, "little"))]
    honest = span_of(evs, [False] * len(evs), "little")
    path = tmp_path / "r.btfrec"
    w = recording.Writer(str(path), synth.header(mod), descs, "little")
    w.span(ringspan.Span(honest.data, runs(honest.runs, [len(e) for e in evs]),
                         len(evs) if records is None else records))
    w.close(0)
    said = {}
    for by in (grouping.Grouping, grouping.NumpyGrouping):
        try:
            with Reader(str(path), grouping=by) as r:
                for b in r.batches():
                    list(b.events())
            said[by] = None
        except recording.RecordError as e:
            said[by] = str(e).split(": ", 1)[1]
    return said


@pytest.mark.parametrize("lie, error", [
    # the same lengths in another order: the bytes add up, the headers are not the runs'
    (lambda runs, lengths: [(1, (n,)) for n in lengths[::-1]],
     "a record header is not the one its runs say"),
    (lambda runs, lengths: [(0, (lengths[0],))] + runs, "a run"),
    (lambda runs, lengths: [(1, (lengths[0] | ringspan.BUSY,))] + runs, "a run"),
    (lambda runs, lengths: runs + [(1, (56,))], "its runs do not add up"),
    # discarded records of 2**30 bytes, 2**31 times 4 twice: 2**64 bytes more, which a
    # 64-bit sum wraps back to the span's bytes (the records as many as said)
    (lambda runs, lengths: runs + [(2**31, ((2**30 - 8) | ringspan.DISCARD,) * 4)] * 2,
     "its runs do not add up"),
])
def test_runs_that_lie_are_refused_by_both_groupings(tmp_path, lie, error):
    said = _lying(tmp_path, lie)
    assert set(said) == {grouping.Grouping, grouping.NumpyGrouping}
    for by, text in said.items():
        assert text is not None and text.endswith(f"({error})"), (by, text)
