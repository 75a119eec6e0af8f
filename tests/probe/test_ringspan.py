"""The ring buffer read in place (probe/ringspan.py): against a real BPF ring filled by a
program under BPF_PROG_TEST_RUN (records of mixed sizes, discarded ones, the ring wrapping many
times), and against rings built in memory (any mix of lengths, a record still busy anywhere,
32-bit positions wrapping)."""

from __future__ import annotations

import os
import random
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from btfgen.probe import ringspan

_root = os.geteuid() == 0
needs_bpf = pytest.mark.skipif(not _root, reason="needs root (BPF)")


def _expected(seqs_sizes, discard):
    return [(q, s) for q, s in seqs_sizes if not (discard and q % discard == discard - 1)]


class _Collect:
    def __init__(self):
        self.records, self.spans, self.runs = [], 0, 0

    def __call__(self, span):
        self.spans += 1
        self.runs += len(span.runs)
        got = [bytes(r) for r in span]
        assert len(got) == span.records
        assert _placed(span, 1 + self.spans % 300) == got
        self.records += got


def _read(records):
    out = []
    for r in records:
        seq, size = struct.unpack_from("<QQ", r)
        import ringprog

        ringprog.check(r, seq, size)
        out.append((seq, size))
    return out


@pytest.fixture
def producer():
    import ringprog

    made = []

    def make(ring_bytes, counted=False):
        p = ringprog.Producer(ring_bytes, counted)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@needs_bpf
@pytest.mark.parametrize("counted", [False, True], ids=["walked", "counted"])
def test_every_record_in_order_mixed_sizes_and_discards(producer, counted):
    # counted: the producer keeps the count (ringprog: as trace.bpf.c does), so every span
    # (the producer done before each drain) is handed over raw, its runs found when asked.
    p = producer(1 << 20, counted)
    sink = _Collect()
    want = []
    with ringspan.RingReader(p.ring, sink, committed_fd=p.committed) as reader:
        plan = [((64,), 500, 0), ((40, 1080), 300, 8), ((24, 24, 200), 100, 0),
                ((1080,), 200, 4), ((16, 32, 48, 64), 50, 0), ((20,), 7, 0)]
        for sizes, times, discard in plan:
            start = p.made()
            p.run(sizes, times, discard)
            made = [(start + i, sizes[i % len(sizes)]) for i in range(times * len(sizes))]
            want += _expected(made, discard)
        while reader.drain():
            pass
        assert reader.drain() == 0
        # Everything handed over was given back to the producer.
        assert reader._cons[0] == reader._prod[0]
        assert reader.raw_spans == (reader.spans if counted else 0) and reader.spans
    assert _read(sink.records) == want


@needs_bpf
def test_repeating_lengths_are_runs_not_records(producer):
    # Periods of 1 to 4 (discards every 4th included) go by strided compares: a span's
    # runs are few, whatever its records.
    p = producer(1 << 20)
    sink = _Collect()
    with ringspan.RingReader(p.ring, sink) as reader:
        for sizes, times, discard in [((64,), 2000, 0), ((40, 1080), 300, 0),
                                      ((24, 24, 200), 300, 0), ((16, 32, 48, 64), 200, 0),
                                      ((1080,), 400, 4)]:
            p.run(sizes, times, discard)
            while reader.drain():
                pass
    assert len(sink.records) == 2000 + 600 + 900 + 800 + 300
    assert sink.runs <= 10 * sink.spans, (sink.runs, sink.spans)


@needs_bpf
@pytest.mark.parametrize("counted", [False, True], ids=["walked", "counted"])
def test_the_ring_wraps_many_times(producer, counted):
    size = 4 * 4096
    p = producer(size, counted)
    sink = _Collect()
    rng = random.Random(5)
    want, held = [], 0
    with ringspan.RingReader(p.ring, sink, committed_fd=p.committed) as reader:
        for _ in range(300):
            sizes = tuple(rng.choice((16, 24, 56, 104, 1080)) for _ in range(rng.randint(1, 3)))
            per_run = sum((s + 8 + 7) & ~7 for s in sizes)
            times = rng.randint(1, (size // 2) // per_run)
            if held + times * per_run > size - 2 * 4096:  # never more than the ring holds
                while reader.drain():
                    pass
                held = 0
            start = p.made()
            discard = rng.choice((0, 0, 2, 8))
            p.run(sizes, times, discard)
            held += times * per_run
            want += _expected([(start + i, sizes[i % len(sizes)])
                               for i in range(times * len(sizes))], discard)
            if rng.random() < 0.5:
                while reader.drain():
                    pass
                held = 0
        while reader.drain():
            pass
        assert reader._cons[0] == reader._prod[0] > 20 * size  # wrapped, many times over
        assert reader.raw_spans == (reader.spans if counted else 0)
    assert _read(sink.records) == want


def _libbpf_s(fd, sink):
    from btfgen.probe.ringbuf import RingBuffer

    return RingBuffer(fd, sink, spans=True)


@needs_bpf
@pytest.mark.parametrize("reader_of", [ringspan.RingReader, _libbpf_s], ids=["ringspan", "libbpf"])
def test_a_poll_waits_for_the_rings_wakeup_not_for_a_record(producer, reader_of):
    """Records the BPF side sent without a wakeup (trace.bpf.c's, until the ring is a quarter
    full) wait for the poll's clock: a reader that keeps up then takes a span a turn, not a
    few records (a ring's poll is ready whenever it holds one, so the wait is on its wakeups
    alone). A wakeup ends the wait at once."""
    import ringprog

    p = producer(1 << 16)
    sink = _Collect()
    with reader_of(p.ring, sink) as reader:
        p.run((64,), 3, wakeup=ringprog.NO_WAKEUP)
        start = time.monotonic()
        assert reader.poll(300) == 3
        assert time.monotonic() - start >= 0.29  # the whole wait, though three were there
        p.run((64,), 2, wakeup=ringprog.FORCE_WAKEUP)
        start = time.monotonic()
        assert reader.poll(30_000) == 2
        assert time.monotonic() - start < 20  # woken, not timed out
    assert [s for _, s in _read(sink.records)] == [64] * 5


@needs_bpf
def test_a_hand_over_stops_where_the_producer_was_when_it_began(producer):
    """Records committed while a hand-over runs (here by its sink: as a traced program keeps
    calling while the reader writes) are the next turn's, after its wait: the turn is not
    behind. A reader that took them at once would take a few records a span while calls
    keep coming."""
    import ringprog

    p = producer(1 << 16)
    turns = []

    def sink(span):
        turns.append(len(list(span)))
        if len(turns) == 1:
            p.run((64,), 5, wakeup=ringprog.NO_WAKEUP)

    with ringspan.RingReader(p.ring, sink) as reader:
        p.run((64,), 3, wakeup=ringprog.NO_WAKEUP)
        assert reader.drain() == 3 and not reader._behind
        assert reader.drain() == 5
    assert turns == [3, 5]


@needs_bpf
def test_poll_waits_for_the_producer(producer):
    p = producer(1 << 16)
    sink = _Collect()
    with ringspan.RingReader(p.ring, sink) as reader:
        assert reader.poll(10) == 0
        p.run((64,), 3)
        assert reader.poll(10) + reader.drain() == 3
    assert [s for _, s in _read(sink.records)] == [64] * 3


def test_a_map_that_is_no_ring_is_refused():
    if not _root:
        pytest.skip("needs root (BPF)")
    import ringprog

    p = ringprog.Producer(4096)
    try:
        with pytest.raises(ValueError, match="not a ring buffer"):
            ringspan.RingReader(p.counter, lambda span: None)
    finally:
        p.close()


# -- rings built in memory ------------------------------------------------------------------

def _fake(size: int, cons: int, records, busy_at: int | None, bits: int = 64):
    """A reader over a ring of `size` bytes in memory holding `records` ((length, discarded)
    each, their bytes a pattern of their index) from position `cons`, the one at `busy_at`
    still reserved; -> (reader, [(index, bytes) expected])."""
    data = bytearray(2 * size)
    at, pos, expect = cons & (size - 1), cons, []
    for i, (length, discarded) in enumerate(records):
        word = length | (ringspan.DISCARD if discarded else 0)
        if i == busy_at:
            word |= ringspan.BUSY
        body = bytes([i & 0xFF]) * length
        rec = struct.pack("<II", word, 0xDEAD) + body
        rec += bytes(-len(rec) % 8)
        for j, b in enumerate(rec):  # the second mapping: a wrapped record is contiguous
            data[(at + j) % size] = b
            data[(at + j) % size + size] = b
        if busy_at is None or i < busy_at:
            if not discarded:
                expect.append(body)
        at = (at + len(rec)) % size
        pos += len(rec)
    data[:] = data[:size] + data[:size]
    r = ringspan.RingReader.__new__(ringspan.RingReader)
    r._fence, r._maps, r._epoll, r._sink = None, [], None, None
    fmt = "<Q" if bits == 64 else "<I"
    mask = (1 << bits) - 1
    cons_b = bytearray(struct.pack(fmt, cons & mask))
    prod_b = bytearray(struct.pack(fmt, pos & mask))
    views = [memoryview(cons_b), memoryview(prod_b)]
    if struct.calcsize("L") != bits // 8:  # positions as wide as this machine's long
        views = [memoryview(bytearray(struct.pack("L", cons & mask))),
                 memoryview(bytearray(struct.pack("L", pos & mask)))]
    r._attach(views[0], views[1], memoryview(data), size)
    return r, expect


def _placed(span, at_once: int) -> list[bytes]:
    """The span's records as places() says where they lie, in chunks of about `at_once`."""
    got = []
    for data, starts, ends in span.places(at_once):
        assert len(starts) == len(ends) and 0 < len(starts)
        got += [bytes(data[a:b]) for a, b in zip(starts, ends)]
    return got


def _all(r):
    got = []
    while (span := r.take()) is not None:
        records = [bytes(x) for x in span]
        assert len(records) == span.records
        for at_once in (1, 3, 4096):
            assert _placed(span, at_once) == records
        got += records
    return got


_LENGTHS = st.sampled_from([0, 1, 7, 8, 16, 20, 64, 100, 1080])


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.tuples(_LENGTHS, st.just(False)), max_size=60),
       pattern=st.lists(_LENGTHS, min_size=1, max_size=4), repeats=st.integers(0, 200),
       busy=st.integers(-1, 400), start=st.integers(0, 2**64 - 1), discards=st.booleans())
def test_any_mix_walks_as_one_header_at_a_time(records, pattern, repeats, busy, start, discards):
    rng = random.Random(start)
    start &= ~7  # positions move by whole records, multiples of 8
    recs = list(records) + [(length, False) for _ in range(repeats) for length in pattern]
    if discards:
        recs = [(n, rng.random() < 0.1) for n, _ in recs]
    if rng.random() < 0.3:
        rng.shuffle(recs)
    size = 1 << 16
    while sum(n + 16 for n, _ in recs) > size:
        recs.pop()
    busy_at = busy if 0 <= busy < len(recs) else None
    r, expect = _fake(size, start, recs, busy_at)
    assert _all(r) == expect


@settings(max_examples=100, deadline=None)
@given(start=st.integers(2**32 - 3000, 2**32 - 1), n=st.integers(1, 300),
       length=_LENGTHS)
def test_32_bit_positions_wrap(start, n, length):
    # A 32-bit kernel's positions are 32 bits: past 2**32 - 1 they start again from 0.
    start &= ~7
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ringspan, "WRAP", 2**32 - 1)
        count = min(n, (1 << 15) // (length + 16))
        r, expect = _fake(1 << 15, start, [(length, False)] * count, None, bits=32)
        assert _all(r) == expect
        assert r._cons[0] == (start + count * ((length + 15) & ~7)) % 2**32


def test_a_busy_record_stops_the_span_until_committed():
    recs = [(64, False)] * 100
    r, expect = _fake(1 << 16, 0, recs, 50)
    assert _all(r) == expect[:50]
    # Committed now: the reader goes on from where it stopped.
    at = 50 * 72
    word = struct.unpack_from("<I", r._data, at)[0] & ~ringspan.BUSY
    r._data.obj[at:at + 4] = struct.pack("<I", word)
    r._data.obj[(1 << 16) + at:(1 << 16) + at + 4] = struct.pack("<I", word)
    assert len(_all(r)) == 50


def test_a_committed_record_past_the_producer_is_refused():
    r, _ = _fake(1 << 12, 0, [(64, False)] * 3, None)
    r._prod[0] = r._producer = 100  # mid-record
    with pytest.raises(ringspan.RingError):
        _all(r)


# -- the fence, and the fallback ------------------------------------------------------------

def test_weakly_ordered_machines_fence_through_libatomic(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    fence = ringspan._fence()
    assert callable(fence)
    fence()  # libatomic's atomic_thread_fence, called as the reader calls it
    assert ringspan.available() == ""
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert ringspan._fence() is None  # total store order: no fence to make


def test_without_a_fence_the_tracer_reads_through_libbpf(monkeypatch, producer, capsys):
    if not _root:
        pytest.skip("needs root (BPF)")
    import platform

    from btfgen.probe import ringbuf, run

    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    monkeypatch.setattr(ringspan, "_fence", _no_libatomic)
    assert "no memory fence to call on riscv64" in ringspan.available()
    p = producer(1 << 16)
    sink = _Collect()
    with run.reader(p.ring, sink) as reader:
        assert isinstance(reader, ringbuf.RingBuffer)
        p.run((64, 200), 20, 4)
        while reader.drain():
            pass
    assert "reading the ring buffer through libbpf: no memory fence" in capsys.readouterr().err
    want = _expected([(i, (64, 200)[i % 2]) for i in range(40)], 4)
    assert _read(sink.records) == want


def _no_libatomic():
    raise OSError("libatomic.so.1: cannot open shared object file")


# -- raw spans, on the BPF side's count of what it committed ----------------------------------

def _counted(r, recs, busy_at, uncounted=()):
    """Give reader `r` (from _fake, from position 0) the BPF side's count: every committed
    record's ring bytes plus, where not discarded, 1 << COMMITTED_SHIFT, but for the one at
    `busy_at` (still being written) and those in `uncounted` (committed, their add not yet
    made)."""
    count = 0
    for i, (length, discarded) in enumerate(recs):
        if i != busy_at and i not in uncounted:
            count += ((length + 8 + 7) & ~7) + (0 if discarded else 1 << ringspan.COMMITTED_SHIFT)
    r._count_from(memoryview(bytearray(struct.pack("<Q", count & (2**64 - 1)))))
    return r


def test_a_ring_all_committed_is_one_raw_span_with_no_walk():
    recs = [(n, False) for n in (24, 100, 7, 1080, 64) * 40]
    r, expect = _fake(1 << 16, 0, recs, None)
    _counted(r, recs, None)
    span = r.take()
    assert span.raw and span.records == len(recs) and r.raw_spans == 1
    assert [bytes(x) for x in span] == expect  # its runs found from its headers when asked
    assert r.take() is None


def test_a_record_not_yet_counted_makes_the_reader_walk():
    # Committed (its BUSY bit clear) but its add not made: the count is short, so the reader
    # walks; one still being written stops the walk there, as without a count.
    recs = [(64, False)] * 50
    r, expect = _fake(1 << 16, 0, recs, 30)
    _counted(r, recs, 30, uncounted={10})
    assert _all(r) == expect[:30] and r.raw_spans == 0


class _Looks:
    """The count as the BPF side moves it while the reader looks: one value a look, the last
    one kept."""

    def __init__(self, counts):
        self.counts, self.looks = list(counts), 0

    def __getitem__(self, i):
        assert i == 0
        self.looks += 1
        return self.counts[min(self.looks, len(self.counts)) - 1]


def test_a_count_trailing_at_one_look_and_caught_up_at_the_next_is_a_raw_span():
    # The record being counted on another CPU at the first look has its add at the second.
    recs = [(64, False)] * 50
    r, expect = _fake(1 << 16, 0, recs, None)
    full = _counted(r, recs, None)._committed[0]
    short = _counted(r, recs, None, uncounted={49})._committed[0]
    r._committed = looks = _Looks([short, full])
    span = r.take()
    assert span.raw and r.raw_spans == 1 and looks.looks == 2
    assert [bytes(x) for x in span] == expect


def test_a_count_that_stays_short_is_walked_after_its_looks():
    recs = [(64, False)] * 50
    r, expect = _fake(1 << 16, 0, recs, None)
    short = _counted(r, recs, None, uncounted={20})._committed[0]
    r._committed = looks = _Looks([short])
    span = r.take()
    assert not span.raw and looks.looks == ringspan.COUNT_LOOKS
    assert [bytes(x) for x in span] == expect and r.take() is None and r.raw_spans == 0


def test_more_than_a_raw_span_holds_is_walked_at_the_first_look():
    # The count agrees, but the committed bytes pass what one raw span may hold: looking again
    # cannot change that, so the reader walks at once, in spans it can cut.
    recs = [(64, False)] * 50
    r, expect = _fake(1 << 16, 0, recs, None)
    full = _counted(r, recs, None)._committed[0]
    r._committed = looks = _Looks([full])
    r._max_raw = 1024
    span = r.take()
    assert not span.raw and looks.looks == 1
    assert _all(r) == expect[span.records:] and [bytes(x) for x in span] == expect[:span.records]


@settings(max_examples=200, deadline=None)
@given(records=st.lists(st.tuples(_LENGTHS, st.booleans()), max_size=80),
       busy=st.integers(-1, 100), late=st.sets(st.integers(0, 100), max_size=3),
       seed=st.integers(0, 2**32))
def test_counted_or_walked_every_record_once(records, busy, late, seed):
    size = 1 << 16
    recs = list(records)
    while sum(n + 16 for n, _ in recs) > size:
        recs.pop()
    busy_at = busy if 0 <= busy < len(recs) else None
    r, expect = _fake(size, 0, recs, busy_at)
    _counted(r, recs, busy_at, late)
    got = _all(r)
    assert got == expect  # up to the busy one, whichever way each span came
    if busy_at is None and not late and any(not d for _, d in recs):
        assert r.raw_spans == 1
    elif busy_at is not None or any(i < len(recs) for i in late):
        assert r.raw_spans == 0


def test_a_raw_span_is_written_and_given_back_a_piece_at_a_time(tmp_path, monkeypatch):
    """A raw span may be the whole ring: the recording's writer gives its bytes back to the
    ring a piece at a time, each once written (consumer_pos moving up through the span), and
    the file reads back whole."""
    import synth

    from btfgen.probe import recording
    from btfgen.recordings.reader import Reader

    monkeypatch.setattr(recording, "CHUNK", 64)
    monkeypatch.setattr(recording, "PIECE", 256)
    recs = [(n, False) for n in (24, 100, 7, 64) * 30]
    r, expect = _fake(1 << 16, 0, recs, None)
    _counted(r, recs, None)
    span = r.take()
    assert span.raw
    given, back = [], span.give_back
    span.give_back = lambda done: (back(done), given.append(r._cons[0]))
    mod = synth.module("x86_64")
    path = tmp_path / "r.btfrec"
    w = recording.Writer(str(path), synth.header(mod), synth.descriptors(mod), "little")
    w.span(span)
    w.close(0)
    size = len(span.data)
    assert given == [min(at + 256, size) for at in range(0, size, 256)]
    with Reader(str(path)) as got:
        assert [bytes(e) for b in got.batches() for e in b.events()] == expect
    assert r.take() is None and r._cons[0] == size
