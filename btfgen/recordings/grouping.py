"""A span's records found from its runs and gathered per function and kind: its records in
arrival order (reader.py's SpanBatch.events, what replay and the exports walk) and its
sections, as a version 1 recording's batch held them (each function and kind's events, an
array of its stride, in arrival order: SpanBatch.sections, for columnar and dataset).

A grouping is made once a reader (from its header: byte order, BTF ids, strides: a Recording)
and asked for each span's run table read and checked (run_table), its records (records) and
its sections (a Span: its bytes, its runs, its records):

    Grouping        the standard library's: record by record
    NumpyGrouping   numpy's: the records found from the span's runs (no Python call a record),
                    checked against their headers, and gathered; a function and kind whose
                    records lie evenly spaced in the span (one run's phase: a loop calling it)
                    is a view of the span, copied nowhere
    fastest()       NumpyGrouping where numpy is installed, else Grouping

A section is (function index, kind, count, payload); records() and record_bytes() read a
payload whichever grouping (or version 1's batch) made it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Protocol

from btfgen.probe import event, ringspan
from btfgen.probe.recording import RUN, RecordError


class Recording(Protocol):
    """What a grouping reads of its reader (reader.py's Reader): the file's name (for its
    errors), byte order, BTF id -> function index, and each function's stride."""

    path: str
    order: str
    index: dict[int, int]
    strides: list[int]


class Span(Protocol):
    """What a grouping reads of a span (reader.py's SpanBatch): its bytes as the ring held
    them, its runs (repeats, header words), and its records not discarded, each as its bytes."""

    data: memoryview
    runs: list[tuple[int, tuple[int, ...]]]
    count: int  # its records not discarded
    table: Any  # the grouping's run table (run_table's), or None (runs found otherwise)
    trusted: bool  # its headers were checked against its runs before (a first pass)

    def events(self) -> Iterator[memoryview]: ...


# (function index, kind, count, payload): the payload bytes, or an array of the stride's void
# items (numpy's grouping).
Section = tuple[int, int, int, Any]

# Runs shorter than this go the gather way (their records' places in one array), longer
# ones are read through strided views of the span, a phase of a run at a time.
SHORT_RUN = 16
# A long run mixing up to this many functions and kinds (records of one length: today's fixed
# size) is split by a mask each, more by one sort.
MASKS = 16
# Records a span hands on at a time (records()): views of its bytes, made a list at a time.
RECORDS_AT_ONCE = 16384
# Spans of fewer records than this numpy's grouping hands to the standard library's: its
# arrays cost some tens of microseconds a span whatever the span holds, and a tracer whose
# reader keeps up writes a span of a few records at each poll (bench_tracers' recording: ~8).
SMALL_SPAN = 64
# Distinct run shapes (a run's header words) the standard library's grouping keeps: calls make
# a few; a crafted file many, and the memo starts again.
MAX_RUN_SHAPES = 4096
# BTF ids at or past this are looked up by no array (a crafted header: refused).
MAX_BTF_ID = 1 << 24


class _RunShape:
    """What a run's header words make of each period: its bytes, each record's header (offset
    in the period, its bytes in the file's order) and the (start, end) in the period of each
    record not discarded."""

    __slots__ = ("period", "heads", "cuts", "kept")

    def __init__(self, words: tuple, order: str) -> None:
        pack = struct.Struct("<I" if order == "little" else ">I").pack
        self.heads, self.cuts, at = [], [], 0
        for w in words:
            self.heads.append((at, pack(w)))
            if not w & ringspan.DISCARD:
                self.cuts.append((at + ringspan.HEADER, at + ringspan.HEADER
                                  + (w & ringspan.LENGTH)))
            at += ringspan.record_size(w)
        self.period, self.kept = at, len(self.cuts)


class Grouping:
    """The standard library's grouping: a span's records of each function and kind, each cut
    or zero-padded to the function's stride, in arrival order."""

    def __init__(self, reader: Recording) -> None:
        self.path, self.order = reader.path, reader.order
        self.index, self.strides = reader.index, reader.strides  # BTF id -> function
        self.shapes: dict[tuple, _RunShape] = {}  # a run's header words -> its shape

    def _shape(self, words: tuple) -> _RunShape:
        shape = self.shapes.get(words)
        if shape is None:
            if len(self.shapes) >= MAX_RUN_SHAPES:
                self.shapes.clear()
            shape = self.shapes[words] = _RunShape(words, self.order)
        return shape

    def run_table(self, table: bytes, nbytes: int) -> tuple[Any, int, int]:
        """A span's table of runs (recording.RUN each) read: (its runs, the bytes their
        records take, their records not discarded). Raises ValueError (what is wrong) where a
        run is malformed. `nbytes`: the span's bytes (numpy's bound)."""
        runs, total, count = [], 0, 0
        shape_of = self._shape
        for n, period, *words in RUN.iter_unpack(table):
            if not (n and 1 <= period <= 4):
                raise ValueError("a run")
            words = tuple(words[:period])
            if any(w & ringspan.BUSY for w in words):
                raise ValueError("a run")
            shape = shape_of(words)
            runs.append((n, words))
            total += n * shape.period
            count += n * shape.kept
        return runs, total, count

    def records(self, span: Span) -> Iterator[memoryview]:
        """The span's records not discarded, in arrival order, each as its bytes: a view of
        each of places()' records, a list of up to RECORDS_AT_ONCE at a time (a span of the
        whole ring holds millions, and their views at once would take several times its
        bytes)."""
        for data, starts, ends in self.places(span):
            yield from [data[a:b] for a, b in zip(starts, ends)]

    def places(self, span: Span) -> Iterator[tuple[memoryview, list[int], list[int]]]:
        """Where the span's records not discarded lie, in arrival order: (its bytes, each
        record's first byte, each record's end), up to RECORDS_AT_ONCE records at a time. A
        walk that reads each record by offset makes no view of it (a view made and kept cost
        ~0.4 us a record, as much as reading its head). Unless the span is trusted, each
        record's header is first checked against the one its run says."""
        data, starts, ends, at = span.data, [], [], 0
        shape_of = self._shape
        check = not span.trusted
        for count, words in span.runs:
            if len(starts) >= RECORDS_AT_ONCE:
                yield data, starts, ends
                starts, ends = [], []
            shape = shape_of(words)
            period, heads, cuts = shape.period, shape.heads, shape.cuts
            if check:
                if count == 1:
                    for rel, said in heads:
                        if data[at + rel:at + rel + 4] != said:
                            raise self._wrong_header()
                else:
                    # each byte of a phase's headers, every period: compares at C speed
                    end = at + count * period
                    for rel, said in heads:
                        for k in range(4):
                            if data[at + rel + k:end:period] != said[k:k + 1] * count:
                                raise self._wrong_header()
            if count == 1:
                starts += [at + a for a, _ in cuts]
                ends += [at + b for _, b in cuts]
            elif len(cuts) == 1:
                (a, b), last = cuts[0], at + count * period
                starts += range(at + a, last + a, period)
                ends += range(at + b, last + b, period)
            else:
                periods = range(at, at + count * period, period)
                starts += [o + a for o in periods for a, _ in cuts]
                ends += [o + b for o in periods for _, b in cuts]
            at += count * period
        yield data, starts, ends

    def _wrong_header(self) -> RecordError:
        return RecordError(f"{self.path}: corrupt span (a record header is not the one its "
                           f"runs say)")

    def sections(self, span: Span) -> list[Section]:
        out: dict[tuple[int, int], bytearray] = {}
        head = event.RECORD_HEADS[self.order]
        index, strides = self.index, self.strides
        for raw in span.events():
            if len(raw) < event.DATA:
                raise RecordError(f"{self.path}: corrupt span (an event of {len(raw)} bytes)")
            btf_id, kind, _failed = head.unpack_from(raw, event.EVENT_HEADER)
            fn = index.get(btf_id)
            if fn is None or kind > 1:
                raise RecordError(f"{self.path}: corrupt span (an event of no recorded "
                                  f"function: BTF id {btf_id}, kind {kind})")
            piece = raw[:strides[fn]]
            payload = out.setdefault((fn, kind), bytearray())
            payload += piece
            payload += bytes(strides[fn] - len(piece))
        return [(fn, kind, len(p) // strides[fn], memoryview(p)) for (fn, kind), p in out.items()]


class NumpyGrouping(Grouping):
    """numpy's grouping (the module's doc). Its sections' payloads are arrays of the stride's
    void items, views of the span where a run lays a function and kind's records evenly."""

    def __init__(self, reader: Recording) -> None:
        super().__init__(reader)
        import numpy as np

        self.np = np
        bo = "<" if self.order == "little" else ">"
        self.u4, self.u8 = np.dtype(bo + "u4"), np.dtype(bo + "u8")
        self._by_id = None  # BTF id -> function as an array (-1: none), made at the first span

    def sections(self, span: Span) -> list[Section]:
        self._lookup()  # a crafted header is refused at its first span, whatever it holds
        if span.count < SMALL_SPAN:
            return Grouping.sections(self, span)
        np = self.np
        data = np.frombuffer(span.data, dtype=np.uint8)
        # key (function * 2 + kind) -> [(arrivals or (first, step, count), items of the span
        # or the byte of each record's bytes, records' lengths or their one length)]
        parts: dict[int, list] = {}
        table = self._table(span)
        if table is not None:
            n = table.n
            run, first, word, at = self._layout(table)
            # the short runs' records, gathered by their offsets (their arrival: their place
            # among the span's records); each long run's phases through strided views
            short = n < SHORT_RUN
            if short.any():
                mine = np.flatnonzero(short[run])
                self._gathered(data, parts, at[mine], word[mine], mine)
            for r in np.flatnonzero(~short).tolist():
                start = int(first[r])  # the run's first record
                pattern = tuple(table.words[r, :table.period[r]].tolist())
                sizes = [ringspan.record_size(w) for w in pattern]
                self._long_run(data, parts, int(n[r]), pattern, sizes, int(at[start]), start)
        return self._merged(data, parts)

    def run_table(self, table: bytes, nbytes: int) -> tuple[Any, int, int]:
        np = self.np
        rows = np.frombuffer(table, dtype="<u4").reshape(-1, RUN.size // 4).astype(np.int64)
        n, period, words = rows[:, 0], rows[:, 1], rows[:, 2:]
        if not ((n > 0) & (period >= 1) & (period <= 4)).all():
            raise ValueError("a run")
        valid = np.arange(words.shape[1]) < period[:, None]
        if (words[valid] & ringspan.BUSY).any():
            raise ValueError("a run")
        sizes = np.where(valid, ((words & ringspan.LENGTH) + ringspan.HEADER + 7) & ~7, 0)
        kept = (valid & (words & ringspan.DISCARD == 0)).sum(axis=1)
        # A record takes 8 bytes at least: a run repeating more than that fits is refused
        # before the products, which stay below 2**57 then (a period < 2**32 bytes), and
        # their sum, with each at most the span's bytes, cannot wrap either.
        if (n > nbytes // 8).any():
            raise ValueError("its runs do not add up")
        each = n * sizes.sum(axis=1)
        if (each > nbytes).any():
            raise ValueError("its runs do not add up")
        return _Table(n, period, words), int(each.sum()), int((n * kept).sum())

    def _table(self, span: Span):
        """The span's run table (_Table), or None where it has no runs."""
        table = getattr(span, "table", None)  # a version 1 span has none
        if table is not None:
            return table
        runs = span.runs  # found otherwise (a raw span's, from its headers)
        return _Table.of(runs, self.np) if runs else None

    def _layout(self, table: _Table) -> tuple:
        """Each record's run, each run's first record, and each record's header word and
        offset in the span (int64 arrays, records in arrival order)."""
        np = self.np
        n, period, words = table.n, table.period, table.words
        reps = n * period
        run = np.repeat(np.arange(len(n)), reps)
        first = np.cumsum(reps) - reps
        word = words[run, (np.arange(len(run)) - first[run]) % period[run]]
        size = ((word & ringspan.LENGTH) + ringspan.HEADER + 7) & ~7
        return run, first, word, np.cumsum(size) - size

    def places(self, span: Span) -> Iterator[tuple[memoryview, list[int], list[int]]]:
        if span.count < SMALL_SPAN:
            yield from Grouping.places(self, span)
            return
        np = self.np
        table = self._table(span)
        if table is None:
            return
        _, _, word, at = self._layout(table)
        data = span.data
        if not span.trusted:
            heads = np.frombuffer(data, dtype=np.uint8)
            heads = heads[:len(heads) - len(heads) % 4].view(self.u4)
            if not (heads[at // 4] == word).all():  # records are 8-aligned
                raise self._wrong_header()
        keep = (word & ringspan.DISCARD) == 0
        start = at[keep] + ringspan.HEADER
        end = start + (word[keep] & ringspan.LENGTH)
        del word, at, keep
        for i in range(0, len(start), RECORDS_AT_ONCE):
            yield (data, start[i:i + RECORDS_AT_ONCE].tolist(),
                   end[i:i + RECORDS_AT_ONCE].tolist())

    def _lookup(self):
        """BTF id -> function, as an array indexed by id (-1: none), once a reader."""
        if self._by_id is None:
            np, index = self.np, self.index
            top = max(index, default=0)
            if top >= MAX_BTF_ID:  # a crafted header: the dict is the only way
                raise RecordError(f"{self.path}: corrupt header (a BTF id of {top})")
            by_id = np.full(top + 1, -1, dtype=np.int64)
            by_id[list(index)] = list(index.values())
            self._by_id = by_id
        return self._by_id

    def _corrupt(self, what: str) -> RecordError:
        return RecordError(f"{self.path}: corrupt span ({what})")

    def _strided(self, data, first: int, step: int, count: int, dtype=None):
        """`count` items of `dtype` (u4 without) in `data`, from byte `first`, `step` apart."""
        return self.np.ndarray((count,), self.u4 if dtype is None else dtype, data, first,
                               (step,))

    def _keys(self, btf_id, kind):
        """function * 2 + kind of each record, by its BTF id and kind (int64 arrays)."""
        by_id = self._lookup()
        fn = by_id[btf_id.clip(0, len(by_id) - 1)]
        if not ((fn >= 0) & (btf_id < len(by_id)) & (kind <= 1)).all():
            raise self._corrupt("an event of no recorded function")
        return fn * 2 + kind

    def _present(self, key) -> list[int]:
        """The distinct keys, ascending."""
        np = self.np
        if len(key) and key.max() < 1 << 20:
            return np.flatnonzero(np.bincount(key)).tolist()
        return np.unique(key).tolist()

    def _long_run(self, data, parts: dict, count: int, pattern, sizes, at: int,
                  arrival: int) -> None:
        """A run of `count` periods from byte `at`: each phase's records (one header word each)
        read through strided views of the span, into `parts`."""
        np, strides, period = self.np, self.strides, sum(sizes)
        phase = at
        for j, (w, size) in enumerate(zip(pattern, sizes)):
            if not (self._strided(data, phase, period, count) == w).all():
                raise self._corrupt("a record header is not the one its runs say")
            if not w & ringspan.DISCARD:
                length = w & ringspan.LENGTH
                if length < event.DATA:
                    raise self._corrupt(f"an event of {length} bytes")
                first = phase + ringspan.HEADER
                rec = first + event.EVENT_HEADER
                # BTF id and kind read as one word: one pass over the span, not two.
                both = self._strided(data, rec, period, count, self.u8)
                if (both == both[0]).all():
                    # One function's calls (a loop): its items are a view of the span;
                    # arrivals and lengths made only if they are merged with others.
                    one = np.frombuffer(both[:1].tobytes(), self.u4).astype(np.int64)
                    k = int(self._keys(one[:1], one[1:])[0])
                    void = np.dtype((np.void, min(strides[k // 2], length)))
                    parts.setdefault(k, []).append(
                        ((arrival + j, len(pattern), count),
                         self._strided(data, first, period, count, void), length))
                else:
                    key = self._keys(self._strided(data, rec, period, count).astype(np.int64),
                                     self._strided(data, rec + 4, period, count)
                                     .astype(np.int64))
                    arrivals = arrival + j + len(pattern) * np.arange(count, dtype=np.int64)
                    keys = self._present(key)
                    if len(keys) <= MASKS:  # a mask a function: each a pass
                        groups = ((k, key == k) for k in keys)
                    else:  # many: one stable sort, then each its slice
                        order = np.argsort(key, kind="stable")
                        bounds = np.searchsorted(key[order], keys + [keys[-1] + 1])
                        groups = ((k, order[lo:hi]) for k, lo, hi
                                  in zip(keys, bounds[:-1], bounds[1:]))
                    for k, mine in groups:
                        void = np.dtype((np.void, min(strides[k // 2], length)))
                        parts.setdefault(k, []).append(
                            (arrivals[mine],
                             self._strided(data, first, period, count, void)[mine], length))
            phase += size

    def _gathered(self, data, parts: dict, starts, words, arrivals) -> None:
        """The short runs' records (each one's offset, header word and arrival: int64
        arrays), into `parts` by their offsets in the span."""
        np = self.np
        heads = data[:len(data) - len(data) % 4].view(self.u4)
        if not (heads[starts // 4] == words).all():
            raise self._corrupt("a record header is not the one its runs say")
        keep = (words & ringspan.DISCARD) == 0
        starts, arrivals = starts[keep], arrivals[keep]
        lengths = (words[keep] & ringspan.LENGTH).astype(np.int64)
        if not len(starts):
            return
        if lengths.min() < event.DATA:
            raise self._corrupt(f"an event of {int(lengths.min())} bytes")
        rec = (starts + ringspan.HEADER + event.EVENT_HEADER) // 4
        key = self._keys(heads[rec].astype(np.int64), heads[rec + 1].astype(np.int64))
        order = np.argsort(key, kind="stable")
        keys, firsts = np.unique(key[order], return_index=True)
        bounds = firsts[1:].tolist() + [len(order)]
        for k, lo, hi in zip(keys.tolist(), firsts.tolist(), bounds):
            mine = order[lo:hi]
            parts.setdefault(k, []).append((arrivals[mine], starts[mine] + ringspan.HEADER,
                                            lengths[mine]))

    def _merged(self, data, parts: dict) -> list[Section]:
        """Each key's parts as one section, its items in arrival order; the sections in the
        order each first appears (as the writer of version 1 had them)."""
        np, strides = self.np, self.strides

        def arrivals_of(piece):
            got = piece[0]
            if isinstance(got, tuple):  # (first, step, count): a run's phase
                start, step, count = got
                return start + step * np.arange(count, dtype=np.int64)
            return got

        def first_arrival(piece):
            got = piece[0]
            return got[0] if isinstance(got, tuple) else int(got[0])

        def rows(firsts, width):
            """Each record's first `width` bytes (all in the span), a row each: a view of
            the span with a row starting every 8 bytes, gathered."""
            view = np.lib.stride_tricks.as_strided(data, shape=(len(data) // 8, width),
                                                   strides=(8, 1), writeable=False)
            return view[firsts // 8]

        out = []
        for k, pieces in parts.items():
            fn, kind = divmod(k, 2)
            stride = strides[fn]
            void = np.dtype((np.void, stride))
            first = min(first_arrival(p) for p in pieces)
            if len(pieces) == 1 and pieces[0][1].dtype == void:
                # A view of the span (a loop's calls) or one copy of its items: each item its
                # record's first `stride` bytes.
                items = pieces[0][1]
                out.append((first, fn, kind, len(items), items))
                continue
            arrivals = np.concatenate([arrivals_of(p) for p in pieces])
            payload = np.zeros((len(arrivals), stride), dtype=np.uint8)
            done = 0
            for piece in pieces:
                got, lengths = piece[1], piece[2]
                n = len(got)
                if got.dtype == np.int64:  # the records' first bytes: gathered from the span
                    width = np.minimum(lengths, stride)
                    for w in np.unique(width).tolist():
                        sel = np.flatnonzero(width == w)
                        payload[done + sel, :w] = rows(got[sel], w)
                else:  # items of the record's length or the stride, the shorter
                    w = got.dtype.itemsize
                    payload[done:done + n, :w] = np.ascontiguousarray(got).view(
                        np.uint8).reshape(n, w)
                done += n
            if len(pieces) > 1 and (np.diff(arrivals) < 0).any():
                rank = np.argsort(arrivals, kind="stable")  # arrival order, across runs
                payload = payload[rank]
            out.append((first, fn, kind, len(arrivals), payload.view(void).reshape(-1)))
        out.sort(key=lambda s: s[0])
        return [s[1:] for s in out]


class _Table:
    """numpy's run table: each run's repeats, period and header words (int64 arrays; a row
    of 4 words, those past its period unused)."""

    __slots__ = ("n", "period", "words")

    def __init__(self, n, period, words) -> None:
        self.n, self.period, self.words = n, period, words

    @classmethod
    def of(cls, runs: list, np) -> _Table:
        words = np.zeros((len(runs), 4), dtype=np.int64)
        for i, (_, w) in enumerate(runs):
            words[i, :len(w)] = w
        return cls(np.array([r[0] for r in runs], dtype=np.int64),
                   np.array([len(r[1]) for r in runs], dtype=np.int64), words)

    def runs(self) -> list:
        """As the standard library's grouping has them: (repeats, header words) each."""
        return [(n, tuple(w[:p])) for n, p, w in zip(self.n.tolist(), self.period.tolist(),
                                                     self.words.tolist())]


def fastest() -> type[Grouping]:
    """NumpyGrouping where numpy is installed, else the standard library's Grouping."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return Grouping
    return NumpyGrouping


def records(payload, dtype):
    """A section's payload as a numpy array of `dtype` (its itemsize the stride): version 1's
    and the standard library's are bytes, numpy's grouping gives an array of the stride's
    void items (a view of the span where its records lie evenly spaced in it)."""
    import numpy as np

    if isinstance(payload, np.ndarray):
        return payload.view(dtype)
    return np.frombuffer(payload, dtype=dtype)


def record_bytes(payload, i: int, stride: int):
    """The i-th event of a section's payload, as the bytes of its stride."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return payload[i * stride:(i + 1) * stride]
    return payload[i].tobytes()
