"""The ring buffer read in place: a BPF_MAP_TYPE_RINGBUF map's pages mapped into this process
and its committed records handed over as SPANS (contiguous runs of the ring's bytes, many
records each), with no Python call per record unless a sink wants one.

The ring (kernel/bpf/ringbuf.c) as mapped here, as libbpf maps it:

    offset 0          the consumer page, read-write: consumer_pos (unsigned long)
    offset PAGE       the producer page, read-only: producer_pos (unsigned long)
    offset 2 * PAGE   the data, SIZE bytes, mapped twice in a row (read-only): a record that
                      wraps past the end is contiguous in the mapping, so a span is one slice

A record is an 8-byte header (u32 length with BUSY bit 31 and DISCARD bit 30, u32 page
offset), then its bytes, the whole padded to 8. Positions are unsigned long: 64 bits on a
64-bit kernel, 32 on a 32-bit one (i386, arm, riscv32), where they wrap: every difference of
positions is taken modulo 2**bits.

The protocol, kept by construction:
- producer_pos is read with acquire ordering before the headers below it (a header not yet
  rewritten in this lap of the ring would otherwise read as an old, committed one);
- a record is the consumer's once its header's BUSY bit is seen clear with acquire ordering,
  and only then are its bytes read;
- consumer_pos is written with release ordering, after every read of the bytes it gives back.

Python has no acquire load nor release store, so the reader puts one fence between each of
these steps, through ctypes (libatomic's atomic_thread_fence, seq_cst). On x86 and s390x
(total store order: loads are not reordered with older loads, nor stores with older loads)
plain loads and stores already have those orderings, and no fence is made. Where a weakly
ordered machine has no libatomic, `available()` says why and the tracer reads through libbpf's
consumer (ringbuf.RingBuffer).

One fence a span is enough on arm64, ppc64le and riscv64: each of them orders every load and
store before a full fence (dmb ish; sync; fence rw,rw) before every load and store after it,
whatever their number, and the reader never needs an order finer than "all of these before
all of those". It walks span N+1's headers between two fences: after the fence that follows
its read of producer_pos (which bounds them: acquire), and before the fence after which span
N+1's bytes are handed to the sink (the headers' BUSY bits seen clear before any byte read:
acquire); and it writes consumer_pos past span N after the fence that follows the sink's last
read of span N (release). So each call of `take()` makes one fence, and hands over the span it
walked before that fence (a pipeline one span deep): span N is handed over while span N+1 is
walked. From idle, a call makes two (nothing is walked ahead yet).

Positions and header words are read and written through memoryview items: CPython copies an
item with a memcpy of its size, which compilers make one aligned load or store (an unsigned
long, a u32). Even a header read in pieces could not be misread: committing changes only its
flag bits (the length was written at reserve, before producer_pos moved past it).

Every header is read, but not one at a time where it can be helped: a Python walk of headers
costs a few hundred ns a record, a strided slice compare a few ns. Once the last header words
walked repeat with a short period (1 to 4: a function called in a loop, its entry and exit),
the rest of that run is checked a phase at a time, one compare of every period-th header
against the phase's word, over a count that doubles while it holds and halves where it fails;
where the pattern breaks, the walk goes on a header at a time. A span says its records as such
runs, (repeats, words of one period), so that its sinks (the recording writer, the columnar
decoder reading the file back) find every record without a walk of their own. Where lengths do
not repeat (a whole kernel traced: records of many lengths in no order), the walk a header at a
time is the reader's cost, so it looks for a period only now and then (where the last length
repeats within the four before it), and its records go four to a run of one repeat.

Where the BPF side counts what it commits (trace.bpf.c's `committed`, 64-bit builds: after each
commit, one atomic add of the record's bytes in the ring plus 1 << COMMITTED_SHIFT; a discarded
one would add only its bytes), no header need be walked while every record below producer_pos
is committed: the reader reads the count, fences, reads producer_pos, and where the count's
bytes are the producer's position, it hands over everything up to it as one RAW span (its runs
found later, from its headers, by whoever needs them: the recording's reader on the host, the
printer). The count read before producer_pos (a fence between) cannot agree with it by chance:
the bytes not yet committed below the position would be a multiple of 2**COMMITTED_SHIFT, far
more than a ring holds. The count's add follows the commit's xchg (fully ordered), so a count
seen, then a fence, means those records' bytes are seen too; the span's bytes are read after
that fence. Where the count does not agree (a record being written on another CPU), the reader
walks as above.
"""

from __future__ import annotations

import array
import ctypes
import itertools
import ctypes.util
import mmap
import platform
import select
import struct
import sys
import time

from .errors import RunError
from .libbpf import fail, libbpf

BUSY = 1 << 31
DISCARD = 1 << 30
LENGTH = DISCARD - 1  # the length bits of a header's first word
HEADER = 8  # the kernel's record header: u32 length and flags, u32 page offset
RINGBUF = 27  # BPF_MAP_TYPE_RINGBUF
POSITION = ctypes.sizeof(ctypes.c_ulong)  # the kernel's unsigned long, as libbpf reads it
WRAP = (1 << (8 * POSITION)) - 1
# Total store order: loads keep their order, as do stores after loads. No fence needed.
TSO = {"x86_64", "amd64", "i386", "i486", "i586", "i686", "x86", "s390x"}
SEQ_CST = 5  # __ATOMIC_SEQ_CST
# Runs of this many periods or more have their places() made by ranges, shorter ones a record
# at a time (a range's setup costs more than a few appends).
_RANGED = 8
MAX_SPAN = 4 << 20  # bytes a span holds at most (and an eighth of the ring): two are held
# A raw span (see the module's doc) is what the ring holds committed, up to this: it cannot be
# cut short without a walk to find where a record ends. Where more is waiting, the walk makes
# spans of MAX_SPAN. (The host's recording reader takes spans up to MAX_SPAN_BYTES: more.)
MAX_RAW_SPAN = 128 << 20
COMMITTED_SHIFT = 36  # trace.bpf.c's: a record adds its ring bytes + 1 << this to the count
# Looks at the count before a take walks. A record is uncounted from its reservation to its
# add, a few instructions of the BPF side; with another CPU making records fast that window is
# often open at one look (the 2-vCPU whole-kernel guest run: a third of the takes walked, 3 s of
# the reader's CPU), and seldom at the next. A producer preempted inside the window (one CPU,
# the trampoline's preemptible programs) keeps it open: then the walk.
COUNT_LOOKS = 4
_COUNT_MASK = (1 << 64) - 1
LOOK = 8  # records walked one by one between two looks for a repeating period, at first
LOOK_MAX = 64  # ... and at most, after looks that found none
_LOOK = range(LOOK)
_FURTHER = {n: range(min(2 * n, LOOK_MAX)) for n in (8, 16, 32, 64)}  # after a look found none


def record_size(header: int) -> int:
    """The bytes a record takes in the ring: its header, its length, padded to 8."""
    return ((header & LENGTH) + HEADER + 7) & ~7


class Span:
    """Committed records, contiguous in the ring: `data` their bytes from the first header
    (valid until the reader's next take(): a sink copies what it keeps), `runs` their headers'
    first words as (repeats, words of one period), so that a sink needs no walk of its own,
    `records` how many are not discarded. Iterating gives each record's bytes (its header's
    length, without the header), discarded ones skipped. A RAW span (`raw`: handed over on the
    BPF side's count, not walked) finds its runs from its headers when first asked for them."""

    __slots__ = ("data", "_runs", "records", "give_back")

    def __init__(self, data, runs: list[tuple[int, tuple[int, ...]]] | None,
                 records: int) -> None:
        self.data, self._runs, self.records = data, runs, records
        # A raw span's sink may call give_back(n) once done with its first n bytes: the ring
        # has room for them again before the sink is done with the rest (a raw span may be a
        # whole ring's worth, the writes of a reader that fell behind). None: a walked span
        # (at most MAX_SPAN bytes), or a raw one of bytes not the ring's.
        self.give_back = None

    @property
    def raw(self) -> bool:
        return self._runs is None

    @property
    def runs(self) -> list[tuple[int, tuple[int, ...]]]:
        if self._runs is None:
            runs, records, _ = runs_in(self.data)
            if records != self.records:
                raise RingError(f"a span of {len(self.data)} bytes holds {records} records, "
                                f"the BPF side's count says {self.records}")
            self._runs = runs
        return self._runs

    def __iter__(self):
        data, at = self.data, 0
        for count, words in self.runs:
            sizes = [(w, record_size(w)) for w in words]
            for _ in range(count):
                for w, size in sizes:
                    if not w & DISCARD:
                        yield data[at + HEADER:at + HEADER + (w & LENGTH)]
                    at += size

    def places(self, at_once: int = 4096):
        """Where the records lie, in chunks of about `at_once`: (the span's bytes, each
        record's first byte, each one's end), discarded ones skipped; a printer's handlers
        read each record in place (no view of its own a record)."""
        data, at = self.data, 0
        starts: list[int] = []
        ends: list[int] = []
        shapes: dict = {}  # a run's header words -> (its records' cuts in a period, period)
        for count, words in self.runs:
            shape = shapes.get(words)
            if shape is None:
                cuts, period = [], 0
                for w in words:
                    if not w & DISCARD:
                        cuts.append((period + HEADER, period + HEADER + (w & LENGTH)))
                    period += record_size(w)
                shape = shapes[words] = (cuts, period)
            cuts, period = shape
            if count < _RANGED:
                for _ in range(count):
                    for start, end in cuts:
                        starts.append(at + start)
                        ends.append(at + end)
                    at += period
                if len(starts) >= at_once:
                    yield data, starts, ends
                    starts, ends = [], []
                continue
            step = len(cuts) or 1
            while count:  # each cut's places a range, interleaved by slice (C speed)
                n = min(count, max((at_once - len(starts)) // step, 1))
                chunk_starts, chunk_ends = [0] * (n * len(cuts)), [0] * (n * len(cuts))
                for j, (start, end) in enumerate(cuts):
                    chunk_starts[j::step] = range(at + start, at + start + n * period, period)
                    chunk_ends[j::step] = range(at + end, at + end + n * period, period)
                starts += chunk_starts
                ends += chunk_ends
                at, count = at + n * period, count - n
                if len(starts) >= at_once:
                    yield data, starts, ends
                    starts, ends = [], []
        if starts:
            yield data, starts, ends

    def batch(self) -> list:
        """The records as a list of memoryviews (a printer's batch)."""
        return list(self)

    def first(self):
        """The first record not discarded, or None (of a raw span, without finding its runs)."""
        if self._runs is not None:
            return next(iter(self), None)
        data, at = self.data, 0
        while at + HEADER <= len(data):
            w = int.from_bytes(data[at:at + 4], sys.byteorder)
            if not w & DISCARD:
                return data[at + HEADER:at + HEADER + (w & LENGTH)]
            at += record_size(w)
        return None

    @classmethod
    def of(cls, records, order: str = sys.byteorder) -> Span:
        """A span laid out as the ring lays these records out (headers in `order`, the
        kernel's): for records that came another way (libbpf's consumer, tests)."""
        head = struct.Struct("<II" if order == "little" else ">II")
        data, words = bytearray(), []
        for r in records:
            words.append(len(r))
            data += head.pack(len(r), 0)
            data += r
            data += bytes(-len(data) % 8)
        return cls(memoryview(data), runs_of(words), len(words))


def runs_in(data, order: str = sys.byteorder) -> tuple[list, int, int]:
    """A raw span's runs, from its headers (in `order`): (runs, records not discarded, records
    in all), as the reader's walk makes them (at C speed where lengths repeat). Raises
    RingError where the headers do not end where the bytes do, or one is BUSY."""
    data = memoryview(data).cast("B")
    if len(data) % 8:
        raise RingError(f"a span of {len(data)} bytes, not a multiple of 8")
    if order != sys.byteorder:
        swapped = array.array("I")
        swapped.frombytes(data)
        swapped.byteswap()
        data = memoryview(swapped).cast("B")
    walk = _SpanWalk(data)
    span, end = walk._walk(0)
    if end != len(data):
        raise RingError(f"a record header at byte {end} of a span of {len(data)} bytes is "
                        f"BUSY (not committed)")
    runs = span.runs if span else []
    return runs, span.records if span else 0, records_in(runs)


def records_in(runs) -> int:
    """The records that runs hold, discarded ones included."""
    return sum(n * len(words) for n, words in runs)


def runs_of(words) -> list[tuple[int, tuple[int, ...]]]:
    """Header words in arrival order as runs (adjacent equal ones counted once)."""
    runs: list[tuple[int, tuple[int, ...]]] = []
    for w in words:
        if runs and runs[-1][1] == (w,):
            runs[-1] = (runs[-1][0] + 1, (w,))
        else:
            runs.append((1, (w,)))
    return runs


def _fence():
    """The fence to make between the steps of the protocol: None where loads and stores keep
    their order (TSO), else a callable; raises OSError where there is none to call."""
    if platform.machine() in TSO:
        return None
    name = ctypes.util.find_library("atomic") or "libatomic.so.1"
    lib = ctypes.CDLL(name)  # OSError when absent
    fn = lib.atomic_thread_fence  # AttributeError -> OSError below
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return lambda: fn(SEQ_CST)


def available() -> str:
    """'' when this machine can read the ring in place, else why not (then libbpf reads it)."""
    try:
        _fence()
    except (OSError, AttributeError) as e:
        return f"no memory fence to call on {platform.machine()} (libatomic: {e})"
    return ""


class _MapInfo(ctypes.Structure):
    # The head of struct bpf_map_info (bpf.h): as far as max_entries.
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32),
                ("key_size", ctypes.c_uint32), ("value_size", ctypes.c_uint32),
                ("max_entries", ctypes.c_uint32), ("rest", ctypes.c_uint8 * 76)]


def ring_size(map_fd: int) -> int:
    """A ring buffer map's data size in bytes (its max_entries), checked to be one."""
    lib = libbpf()
    get = lib.bpf_obj_get_info_by_fd
    get.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
    get.restype = ctypes.c_int
    info = _MapInfo()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    if get(map_fd, ctypes.byref(info), ctypes.byref(size)):
        raise fail("bpf_obj_get_info_by_fd")
    if info.type != RINGBUF:
        raise ValueError(f"map fd {map_fd} is not a ring buffer (type {info.type})")
    return info.max_entries


class RingError(RunError):
    """The ring holds what its protocol forbids (a committed record past producer_pos, a count
    of records the headers do not hold): one line for the user, as the tracer's other errors."""


class RingReader:
    """Hands a BPF_MAP_TYPE_RINGBUF map's committed records to `sink(span)`, a span at a time,
    from its pages mapped here; the same poll()/drain() as ringbuf.RingBuffer (the loop calls
    either). The span's bytes are the ring's own: the sink must be done with them when it
    returns (a writer writes them, a printer formats them)."""

    # A poll or drain hands over at most this many bytes' worth of spans, then returns: the
    # loop then looks at its clock and its signals even while records keep coming.
    BUDGET_SPANS = 64

    def __init__(self, map_fd: int, sink, fence=..., committed_fd: int | None = None) -> None:
        self._sink = sink
        self._fence = _fence() if fence is ... else fence
        size = ring_size(map_fd)
        page = mmap.PAGESIZE
        self._maps = [mmap.mmap(map_fd, page, mmap.MAP_SHARED,
                                mmap.PROT_READ | mmap.PROT_WRITE, offset=0)]
        try:
            self._maps.append(mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED,
                                        mmap.PROT_READ, offset=page))
        except BaseException:
            self._maps[0].close()
            raise
        producer = memoryview(self._maps[1])
        self._attach(memoryview(self._maps[0])[:POSITION], producer[:POSITION],
                     producer[page:], size)
        # The BPF side's count of what it committed (the module's doc): 64-bit positions only
        # (the count is kept only where 64-bit atomics are), from a ring nothing was taken of.
        if committed_fd is not None and POSITION == 8 and self._handed_end == 0:
            self._maps.append(mmap.mmap(committed_fd, page, mmap.MAP_SHARED, mmap.PROT_READ,
                                        offset=0))
            self._count_from(memoryview(self._maps[-1])[:8])
        self._epoll = wakeups(map_fd)
        self._behind = False  # the last hand-over stopped at its budget, with more there

    def _attach(self, consumer, producer, data, size: int) -> None:
        """Read the ring through these views: its consumer and producer positions (bytes of an
        unsigned long each) and its data, `size` bytes mapped twice (2 * size)."""
        self.size, self._mask = size, size - 1
        self._max_span = max(HEADER, min(MAX_SPAN, size // 8))
        self._views = [consumer, producer, data]
        self._cons = consumer.cast("L")
        self._prod = producer.cast("L")
        self._data = data
        self._words = data.cast("I")
        self._views += [self._cons, self._prod, self._words]
        self._handed_end = self._cons[0]  # past the span last handed over
        self._producer = self._prod[0]  # read before a fence, then bounds a walk
        self._pending: Span | None = None  # walked ahead, handed over at the next take()
        self._pending_end = self._handed_end
        self.records = self.spans = 0  # handed over, since the start
        # This thread's CPU seconds in the walks of headers and in the sink (the writes), since
        # the start: where a reader that falls behind spends its time (--timings says them).
        self.walk_s = self.sink_s = 0.0
        self._quads: dict[int, int] = {}  # header word (never BUSY) -> its record's u32s
        self._discards: set[int] = set()  # the header words of _quads with DISCARD set
        self._committed = None  # the BPF side's count, where it keeps one (_count_from)
        self.raw_spans = 0  # spans handed over on that count, with no walk

    def _count_from(self, view) -> None:
        """Hand over raw spans where the BPF side's count (an 8-byte view of it) says every
        record below producer_pos is committed. The count covers the ring from its start: the
        records handed over so far are counted from there (those not discarded: a discarded
        one adds only its bytes)."""
        self._committed = view.cast("Q")
        self._views += [view, self._committed]
        self._handed_records = 0
        self._max_raw = min(self.size, MAX_RAW_SPAN)

    # -- the protocol ---------------------------------------------------------------------

    def take(self) -> Span | None:
        """The next span of committed records, safe to read until the next take(), or None
        when there is none; what earlier calls returned is given back to the producer."""
        fence = self._fence
        if fence:
            fence()
        # The span handed over last time has been read (before the fence): give it back.
        self._cons[0] = self._handed_end
        if self._committed is not None:
            return self._take_counted()
        ready, end = self._pending, self._pending_end
        if ready is None:
            # From idle: nothing was walked ahead. Walk up to the producer position read
            # before the fence; if that finds nothing, read it again and, when it moved, fence
            # before walking to it; then fence before the bytes walked are handed over.
            ready, end = self._walk(self._handed_end)
            if ready is None:
                producer = self._prod[0]
                if producer == self._producer:
                    return None
                self._producer = producer
                if fence:
                    fence()
                ready, end = self._walk(self._handed_end)
                if ready is None:
                    return None
            self._producer = self._prod[0]
            if fence:
                fence()
        self._handed_end = end
        # The next span is walked now, between this fence and the next one (the module's doc).
        self._pending, self._pending_end = self._walk(end)
        self._producer = self._prod[0]
        return ready

    def _take_counted(self) -> Span | None:
        """take() where the BPF side counts what it commits: all of it up to producer_pos as
        one raw span where the count says it is committed, else (after COUNT_LOOKS looks) a
        walk (no walk ahead: the next take() looks at the count again)."""
        fence, pos = self._fence, self._handed_end
        for _ in range(COUNT_LOOKS):
            count = self._committed[0]
            if fence:
                fence()  # the count before producer_pos, and before any byte the span holds
            producer = self._prod[0]
            avail = (producer - pos) & WRAP
            if not avail:
                return None
            if avail > self.size:
                raise RingError(f"producer position {producer} is {avail} bytes past the "
                                f"consumer's {pos}, the ring holds {self.size}")
            # Every record below `producer` committed: the count is its position's bytes, and
            # the records handed over plus those between (not discarded), each
            # 1 << COMMITTED_SHIFT.
            rest = (count - producer - (self._handed_records << COMMITTED_SHIFT)) & _COUNT_MASK
            n = rest >> COMMITTED_SHIFT
            if avail > self._max_raw:
                break  # more than a raw span holds: walked, whatever the count says
            if rest & ((1 << COMMITTED_SHIFT) - 1) or not 0 < n <= avail // HEADER:
                continue
            begin = pos & self._mask
            self._handed_end = producer
            self._handed_records += n
            self.raw_spans += 1
            span = Span(self._data[begin:begin + avail], None, n)
            span.give_back = lambda done: self._give_back(pos, done)
            return span
        self._producer = producer
        if fence:
            fence()  # producer_pos before the headers below it
        span, end = self._walk(pos)
        if span is None:
            return None
        if fence:
            fence()  # the headers' BUSY bits seen clear before the bytes are read
        self._handed_end = end
        self._handed_records += span.records
        return span

    def _give_back(self, pos: int, done: int) -> None:
        """The first `done` bytes of the span handed over from `pos` are read: the producer
        may have them. consumer_pos then lies inside the span, maybe inside a record: only
        this reader reads from it (it goes on from the span's end), and the kernel reads it
        only as the bound of the room it has (kernel/bpf/ringbuf.c: __bpf_ringbuf_reserve)."""
        if self._fence:
            self._fence()  # every read of those bytes before the store that gives them back
        self._cons[0] = (pos + done) & WRAP

    def _walk(self, pos: int) -> tuple[Span | None, int]:
        """The committed records from `pos` up to the producer position last read: a span and
        the position after it, or (None, pos)."""
        avail = (self._producer - pos) & WRAP
        if not avail:
            return None, pos
        if avail > self.size:
            raise RingError(f"producer position {self._producer} is {avail} bytes past the "
                            f"consumer's {pos}, the ring holds {self.size}")
        words, get = self._words, self._quads.get
        begin = pos & self._mask
        end = begin + avail  # no committed byte lies past it
        # In u32 words from here (a record's header is one index, its size a table's value).
        at = begin >> 2
        last = min(end, begin + self._max_span) >> 2
        runs: list[tuple[int, tuple[int, ...]]] = []
        records = 0
        # Header words walked one by one since the last run. This loop is the reader's cost
        # where lengths do not repeat (a whole kernel traced): it does no more a record than
        # it must (a header read, its size from a table whose misses check BUSY, a step, a
        # bound), and looks for a period only every LOOK records, not at each. A record
        # running past `end` ends the loop, and is refused after it.
        seen: list[int] = []
        add = seen.append
        busy = False
        look = _LOOK
        while at < last and not busy:
            for _ in look:
                w = words[at]
                q = get(w)
                if q is None:
                    if w & BUSY:
                        busy = True
                        break
                    q = self._size_of(w)
                at += q
                add(w)
                if at >= last:
                    break
            else:
                # Lengths repeating with a short period (an entry and an exit, a few calls in
                # a loop): the rest of the run is checked a phase at a time, at C speed. A
                # short run of one period may hide a longer one (every 4th record
                # discarded): the one covering most records wins, a long run at once.
                if at << 2 > end:
                    break
                # A period of 1 to 4 repeats the last word within the four before it; where
                # it does not, the next look is further on (up to LOOK_MAX records: lengths
                # that do not repeat pay a look every few dozen records, not every eight).
                if seen[-1] not in seen[-5:-1]:
                    look = _FURTHER[len(look)]
                    continue
                recent = seen[-8:]
                best, best_n = None, 0
                for period in _periods(recent):
                    pattern = tuple(recent[-period:])
                    n = self._repeats(at << 2, pattern, begin + self._max_span, end)
                    if n * period > best_n * len(best or ()):
                        best, best_n = pattern, n
                    if n * period >= 64:
                        break
                if not best:
                    look = _FURTHER[len(look)]
                else:
                    look = _LOOK
                    at += best_n * sum(get(x) for x in best)
                    # The periods walked one by one before it belong to the run.
                    k = len(best)
                    while len(seen) >= k and tuple(seen[-k:]) == best:
                        del seen[-k:]
                        best_n += 1
                    records += self._singles(runs, seen)
                    records += best_n * sum(1 for x in best if not x & DISCARD)
                    _add_run(runs, best_n, best)
                    seen.clear()
        o = at << 2
        if o > end:
            raise RingError(f"a committed record of {record_size(seen[-1])} bytes at "
                            f"{o - record_size(seen[-1])} runs past the producer position "
                            f"({end})")
        records += self._singles(runs, seen)
        if o == begin:
            return None, pos
        return Span(self._data[begin:o], runs, records), (pos + (o - begin)) & WRAP

    def _size_of(self, w: int) -> int:
        """A header word's record size in u32 words, remembered (a kernel's records have a
        few hundred lengths at most; a table that grows past that is started again)."""
        if len(self._quads) >= 4096:
            self._quads.clear()
            self._discards.clear()
        quads = self._quads[w] = record_size(w) >> 2
        if w & DISCARD:
            self._discards.add(w)
        return quads

    def _singles(self, runs: list, seen: list[int]) -> int:
        """Add header words walked one by one to `runs`, four to a run of one repeat (a
        period of 4: a quarter of the runs one a record would make, and made at C speed);
        the records among them not discarded."""
        n = len(seen)
        if not n:
            return 0
        whole = n - n % 4
        if whole:
            it = iter(seen[:whole])
            runs.extend(zip(_ONES(whole // 4), zip(it, it, it, it)))
        if whole < n:
            runs.append((1, tuple(seen[whole:])))
        if self._discards:
            n -= sum(seen.count(d) for d in self._discards)
        return n

    def _repeats(self, o: int, pattern: tuple[int, ...], soft: int, end: int) -> int:
        """How many times `pattern` (header words of one period) repeats from byte `o`, whole
        periods within `end` (and starting before `soft`): one strided compare of the headers
        a phase, over a doubling count, halved where one fails."""
        sizes = [((w & LENGTH) + HEADER + 7) & ~7 for w in pattern]
        period = sum(sizes)
        most = min((end - o) // period, max(0, -(-(soft - o) // period)))
        offsets, at = [], 0
        for s in sizes:
            offsets.append(at)
            at += s
        words, step = self._words, period >> 2
        done, k = 0, 1  # a pattern that breaks at once costs one compare a phase
        while done < most:
            k = min(k, most - done)
            base = o + done * period
            ok = True
            for w, off in zip(pattern, offsets):
                first = (base + off) >> 2
                if words[first:first + k * step:step] != _same(w, k):
                    ok = False
                    break
            if ok:
                done += k
                k *= 2
            elif k == 1:
                break
            else:
                k //= 2
        return done

    # -- the loop's interface -------------------------------------------------------------

    def _hand_over(self) -> int:
        """The spans up to where the producer was when it began (what came since waits for
        the next turn, or a reader that keeps up takes a few records a span), BUDGET_SPANS
        at most."""
        n = spans = 0
        clock = time.thread_time
        target, behind = self._prod[0], False
        t0 = clock()
        while spans < self.BUDGET_SPANS:
            span = self.take()
            t1 = clock()
            self.walk_s += t1 - t0
            if span is None:
                break
            self._sink(span)
            t0 = clock()
            self.sink_s += t0 - t1
            n += span.records
            spans += 1
            left = (target - self._handed_end) & WRAP
            if not left or left > self.size:  # at or past `target`
                break
        else:
            behind = True  # the budget spent: more may be there
        self.records += n
        self.spans += spans
        self._behind = behind
        return n

    def poll(self, timeout_ms: int) -> int:
        """Records handed over: at once where the last hand-over left some behind, else after
        the BPF side's wakeup (the ring a quarter full) or `timeout_ms`, whichever comes
        first (wait_for_wakeup)."""
        if not self._behind:
            wait_for_wakeup(self._epoll, timeout_ms)
        return self._hand_over()

    def drain(self) -> int:
        """Records handed over of those there now, without waiting."""
        return self._hand_over()

    def close(self) -> None:
        if self._epoll is None:
            return
        self._epoll.close()
        self._epoll = None
        self._pending = None
        for view in reversed(self._views):
            view.release()
        try:
            for m in self._maps:
                m.close()
        except BufferError:  # a sink kept a view of the ring: the maps go with it
            pass

    def __enter__(self) -> RingReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _SpanWalk(RingReader):
    """RingReader's walk over a raw span's bytes, already taken (u32 header words in this
    machine's order): the same runs, found at the same speed."""

    def __init__(self, data) -> None:  # no ring: only what _walk reads
        self.size = self._max_span = self._producer = len(data)
        self._mask = WRAP
        self._data = data
        self._words = data.cast("I")
        self._quads, self._discards = {}, set()


def wakeups(map_fd: int) -> select.epoll:
    """An epoll of the ring's wakeups alone (edge-triggered). A ring's poll says it is ready
    whenever it holds a record, so a level-triggered wait returns at once while calls keep
    coming: the reader then takes a few records a turn, each turn's cost its own (~8 records
    a span in bench_tracers' recording: the decoder paid per span, and `--record`'s own CPU
    was about twice this reader's). The BPF side wakes the reader once the ring is a quarter
    full (trace.bpf.c's wakeup()); between wakeups the loop drains on its clock."""
    epoll = select.epoll()
    epoll.register(map_fd, select.EPOLLIN | select.EPOLLET)
    return epoll


def wait_for_wakeup(epoll: select.epoll, timeout_ms: int) -> None:
    """Until the ring's next wakeup (one that came since the last wait counts) or
    `timeout_ms`."""
    try:
        epoll.poll(timeout_ms / 1000)
    except InterruptedError:
        pass


def _periods(recent: list[int]):
    """The periods (1 to 4) the last header words repeat with, twice over, shortest first."""
    n = len(recent)
    for p in (1, 2, 3, 4):
        if n < 2 * p:
            return
        if recent[-p:] == recent[-2 * p:-p]:
            yield p


def _add_run(runs: list, n: int, pattern: tuple[int, ...]) -> None:
    if runs and runs[-1][1] == pattern:
        runs[-1] = (runs[-1][0] + n, pattern)
    else:
        runs.append((n, pattern))


def _ONES(n: int):
    return itertools.repeat(1, n)


_SAME: dict[tuple[int, int], memoryview] = {}


def _same(word: int, k: int) -> memoryview:
    """k copies of a u32 header word, to compare a strided slice of the ring with."""
    got = _SAME.get((word, k))
    if got is None:
        if len(_SAME) > 256:
            _SAME.clear()
        got = _SAME[word, k] = memoryview(array.array("I", [word]) * k)
    return got
