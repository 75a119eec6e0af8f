"""`btfgen trace --record FILE`: the raw events and everything needed to decode them, in one
self-describing file that `btfgen decode` reads on any machine, with no BPF and no BTF.

Standard library only (the writer runs in the trace directory on the target).

Version 4 (written since the BPF side counts what it commits; framing little-endian, the events
and the ring's record headers keep the target's byte order, which the header names):

    magic "BTFGREC\n" | u32 version 4 | u32 header size H | u32 crc32(header) | u32 0
    header: H bytes of JSON (arch, byte order, pointer size, kernel release, event header
            size, the functions: name, stride, generated decoder descriptor)
    span*:  "SPAN" | u32 records | u32 runs | u32 bytes | u32 crc32(runs)
            | u32 crc32(the 20 bytes before)
            runs x (u32 repeats, u32 period, u32 words[4]): the ring's record headers' first
            words (length, DISCARD bit 30), a period of 1 to 4 of them repeating; no runs
            (0) where the tracer handed the span over unwalked (a raw span: ringspan's doc),
            then the reader finds them from the headers in the bytes
            bytes: the span as the ring held it, each record's 8-byte kernel header, its
            bytes, padding to 8; discarded records included (and skipped when read)
            checks: ceil(bytes / CHUNK) x u32, the crc32 of each CHUNK (1 MiB) of the bytes
            (the last one the rest), then u32 0 where their count is odd
    end:    "END\0" | u32 0 | u64 events | u64 lost | u32 crc32(events, lost) | u32 0

The bytes' checks come after them so that the writer takes them on a thread while the bytes
are written (zlib lets go of the GIL, as does the write): the CRC, which alone takes as long
as the write, then costs no time where a CPU is free. One a MiB, so that a reader checks a
span's chunks on several threads while it decodes.

Version 3 (read still) is version 4 where every span has its runs.

Version 2 (read still) is version 3 with one check, crc32(runs, bytes), in the head's fourth
word and none after the bytes.

The writer writes each span of the ring as the reader takes it (one write, straight from the
ring's pages: no event is held in memory), to FILE itself. A file without its end (the tracer
was killed) decodes up to its last whole span, and says where it was cut; one failing a check
is refused, in one line. The runs repeat what the headers in the bytes say, checked against
them, so that the columnar decoder finds every record with numpy, never a Python call a record.

Version 1 (read still): per batch of up to 65,536 events, each function's events as an array
of its stride, and their arrival order:

    batch*: "BATC" | u32 events | u32 sections | u32 crc32(sections, order)
            | u64 sum of the payloads' little-endian u64 words, modulo 2**64
            sections x (u32 function, u32 kind, u32 count, u32 0)
            order: events x u16, the section of each event in arrival order (padded to 8)
            each section's count x stride bytes: the event truncated to what its function's
            decoder reads
    end:    as version 2's

Version 1 files were written to FILE.part and renamed at the end: a file without its end is
refused (truncated). Its payloads are checked by a word sum, not a CRC (numpy sums a batch in a
fraction of the time zlib.crc32 takes).
"""

from __future__ import annotations

import array
import itertools
import json
import operator
import os
import struct
import sys
import zlib

from . import crc, ringspan
from .event import CAPTURE_HEADER, DATA, EVENT_HEADER, RECORD_HEADS

MAGIC = b"BTFGREC\n"
VERSION = 4  # what the writer writes
VERSIONS = (1, 2, 3, 4)  # what the reader reads
FILE_HEAD = struct.Struct("<8sIIII")
BATCH_HEAD = struct.Struct("<4sIIIQ")
SECTION = struct.Struct("<IIII")
END = struct.Struct("<4sIQQII")
SPAN_HEAD = struct.Struct("<4sIIIII")
RUN = struct.Struct("<II4I")
CHUNK = 1 << 20  # a version 3 span's bytes are checked a CHUNK at a time
# A raw span longer than this is written this many bytes at a time (a multiple of CHUNK), each
# given back to the ring once written (ringspan's Span.give_back).
PIECE = 4 << 20
# A span this long or longer has its checks taken on the writer's thread, where they are
# zlib's (libdeflate's take a fifth of the write's time: a thread would cost more than it saves
# where no CPU is free).
THREADED = 256 << 10
# Whether this process may run on more than one CPU: on one, the thread only costs.
_SPARE_CPU = len(os.sched_getaffinity(0)) > 1 if hasattr(os, "sched_getaffinity") else \
    (os.cpu_count() or 1) > 1
CHECKERS = 2  # threads checking a version 3 span's chunks as the reader reads them
MAX_SPAN_BYTES = 1 << 28  # a span is far shorter: the reader's are at most ringspan.MAX_SPAN
MAX_HEADER = 64 << 20
MAX_BATCH_EVENTS = 1 << 16  # the order array's u16 sections: also the writer's batch size
MAX_SECTIONS = 1 << 14
MAX_STRIDE = 1 << 20  # an event is far shorter: the generic record's data is 8192 bytes at most


_LITTLE = struct.pack("=H", 1) == b"\x01\x00"
MASK = (1 << 64) - 1


def word_sum(data) -> int:
    """The sum of `data`'s little-endian u64 words modulo 2**64 (its length a multiple of 8),
    with the standard library only."""
    if _LITTLE:
        return sum(memoryview(data).cast("B").cast("Q")) & MASK
    import array

    words = array.array("Q", bytes(data))
    words.byteswap()
    return sum(words) & MASK


class RecordError(ValueError):
    """A file that is not a complete, intact recording: one line for the user."""


# -- the decoder descriptors as JSON ----------------------------------------------------------
# Generated descriptors are nested tuples with dicts (enumerator names by value): JSON keeps a
# tuple as a list and a dict as {"map": [[key, value], ...]} (its keys are ints).

def encode(desc):
    if isinstance(desc, tuple):
        return [encode(d) for d in desc]
    if isinstance(desc, dict):
        return {"map": [[encode(k), encode(v)] for k, v in desc.items()]}
    return desc


def decode(obj):
    if isinstance(obj, list):
        return tuple(decode(d) for d in obj)
    if isinstance(obj, dict):
        pairs = obj.get("map")
        if set(obj) != {"map"} or not isinstance(pairs, list):
            raise RecordError("a decoder descriptor is malformed")
        try:
            return {decode(k): decode(v) for k, v in pairs}
        except (TypeError, ValueError):
            raise RecordError("a decoder descriptor is malformed") from None
    return obj


def stride(desc) -> int:
    """How many bytes of an event its function's decoder reads (trace_event's header, the
    record's, and the furthest value byte of entry and exit), rounded up to 8. `desc`: the
    generated module's FunctionDesc."""
    end = 0
    rets = (desc.ret.value,) if desc.ret else ()
    for values, plans in ((desc.args, desc.record.entry), (rets, desc.record.exit)):
        for value, plan in zip(values, plans):
            if plan is None:
                continue
            end = max(end, plan.data_off + value.size if plan.data_off >= 0 else
                      plan.ptr_off + desc.pointer_size)
    for c in getattr(desc, "captures", ()):  # each after its status head
        if c.head >= 0:
            end = max(end, c.head + CAPTURE_HEADER + (c.size + 2 if c.kind == "str" else c.size))
    return DATA + (end + 7) // 8 * 8


# -- writing ----------------------------------------------------------------------------------

def checks(data) -> bytes:
    """A version 3 span's checks of its bytes `data`: the crc32 of each CHUNK, padded to 8."""
    return _packed(_crcs(memoryview(data)))


def _crcs(view) -> list[int]:
    """The crc32 of each CHUNK of `view`, taken here."""
    return [crc.crc32(view[at:at + CHUNK]) for at in range(0, len(view), CHUNK)]


def _threaded(nbytes: int) -> bool:
    """Whether a span's checks are taken on the writer's thread while its bytes are written."""
    return nbytes >= THREADED and crc.WHOSE == "zlib" and _SPARE_CPU


def _take(view, todo, crcs: list[int]) -> None:
    """The CRCs of the chunks of `view` whose indexes `todo` (an iterator shared by two threads)
    yields, into `crcs`."""
    for i in todo:
        crcs[i] = crc.crc32(view[i * CHUNK:(i + 1) * CHUNK])


class _Done:
    """A CRC taken at once, as a checker's future would give it."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def result(self) -> int:
        return self.value

    def cancel(self) -> None:
        pass


def _packed(crcs: list[int]) -> bytes:
    return struct.pack(f"<{len(crcs) + len(crcs) % 2}I", *crcs, *(0,) * (len(crcs) % 2))


_PADS = {1: (0, 0, 0), 2: (0, 0), 3: (0,), 4: ()}


def run_table(runs) -> bytes:
    """A span's runs as the file holds them (RUN each, little-endian), made with no Python
    step a run: a whole kernel's spans have a run every four records."""
    if not runs:
        return b""
    counts, patterns = zip(*runs)
    lengths = array.array("I", map(len, patterns))
    padded = map(operator.add, patterns, map(_PADS.__getitem__, lengths))
    words = array.array("I", itertools.chain.from_iterable(padded))
    table = array.array("I", bytes(RUN.size * len(counts)))
    table[0::6] = array.array("I", counts)
    table[1::6] = lengths
    for j in range(4):
        table[2 + j::6] = words[j::4]
    if sys.byteorder == "big":
        table.byteswap()
    return table.tobytes()


def checks_size(nbytes: int) -> int:
    n = -(-nbytes // CHUNK)
    return (n + n % 2) * 4


class Writer:
    """Spans of the ring in, a recording out: each span written as it comes (one write, no
    event held here), to FILE itself, so a kill leaves every span written before it
    decodable."""

    def __init__(self, path: str, header: dict, descriptors: list, order: str) -> None:
        self.path, self.order = path, order
        self.strides, functions = [], []
        # Descriptors of one prototype share their fields past the name and id (one object
        # each: DecoderView.descriptors): their stride and encoding are made once. `descriptors`
        # holds them all while this runs, so an id is never another object's here.
        once: dict = {}
        for d in descriptors:
            key = tuple(map(id, d[2:]))
            got = once.get(key)
            if got is None:
                got = once[key] = (stride(d), [encode(f) for f in d[2:]])
            self.strides.append(got[0])
            functions.append({"name": d.name, "stride": got[0],
                              "descriptor": [d.name, d.btf_id, *got[1]]})
        head = dict(header, event_header=EVENT_HEADER, functions=functions)
        text = json.dumps(head, sort_keys=True).encode()
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.events = self.spans = 0
        self._pool = None  # the thread taking a long span's checks, made at the first
        try:
            self._write([FILE_HEAD.pack(MAGIC, VERSION, len(text), zlib.crc32(text), 0), text])
        except BaseException:
            os.close(self.fd)
            raise

    def _write(self, parts: list) -> None:
        while parts:
            done = os.writev(self.fd, parts)
            while parts and done >= len(parts[0]):
                done -= len(parts[0])
                parts.pop(0)
            if parts and done:
                parts[0] = memoryview(parts[0])[done:]

    def span(self, span) -> None:
        """Write a ringspan.Span: its runs, then its bytes as the ring holds them, then their
        checks (taken on a thread while the bytes are written, where the span is long)."""
        data = span.data
        # A raw span's runs are left to whoever reads the file: finding them is a walk of its
        # headers, the cost a recording of the whole kernel cannot pay as it runs.
        raw = getattr(span, "raw", False)
        runs = [] if raw else span.runs
        table = run_table(runs)
        head = SPAN_HEAD.pack(b"SPAN", span.records, len(runs), len(data),
                              zlib.crc32(table), 0)
        head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
        give_back = span.give_back if raw else None
        if len(data) <= PIECE or give_back is None:
            if not _threaded(len(data)):
                self._write([head, table, data, checks(data)])
            else:
                self._write([head, table])
                self._write([_packed(self._written(memoryview(data)))])
        else:
            # A raw span is all the ring held (up to the whole ring, where the reader is
            # behind): a piece at a time, each given back to the ring once written and checked,
            # so that the BPF side has room again while the rest is written.
            self._write([head, table])
            view, crcs = memoryview(data), []
            for at in range(0, len(view), PIECE):
                piece = view[at:at + PIECE]
                crcs += self._written(piece) if _threaded(len(piece)) else self._plain(piece)
                give_back(at + len(piece))
            self._write([_packed(crcs)])
        self.events += span.records
        self.spans += 1

    def _plain(self, view) -> list[int]:
        """Write `view`; -> its chunks' CRCs, taken here."""
        self._write([view])
        return _crcs(view)

    def _written(self, view) -> list[int]:
        """Write `view`; -> its chunks' CRCs, taken on the thread while the bytes are written;
        once written, the chunks the thread has not begun are taken here (where no CPU is
        free, the thread would only begin them once the write is done)."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="btfgen-crc")
        crcs = [0] * -(-len(view) // CHUNK)
        todo = iter(range(len(crcs)))  # shared: each index taken once (the GIL's next())
        ahead = self._pool.submit(_take, view, todo, crcs)
        try:
            self._write([view])
        finally:
            _take(view, todo, crcs)
            ahead.result()  # the ring's bytes are read before they are given back
        return crcs

    def records(self, raws) -> None:
        """Write records that came one at a time (libbpf's consumer, tests) as one span."""
        raws = list(raws)
        if raws:
            self.span(ringspan.Span.of(raws, self.order))

    def close(self, lost: int) -> None:
        tail = struct.pack("<QQ", self.events, lost)
        self._write([END.pack(b"END\0", 0, self.events, lost, zlib.crc32(tail), 0)])
        os.close(self.fd)
        self.fd = -1
        self._stop()

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def abandon(self) -> None:
        """The trace failed: the file is removed if it holds no event, else kept as a cut
        recording (what was traced decodes)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._stop()
        if not self.events:
            os.unlink(self.path)


# -- reading ----------------------------------------------------------------------------------

class Batch:
    """One batch: `sections` as (function index, kind, count, payload memoryview), and the
    arrival order (a section index per event)."""

    __slots__ = ("sections", "order")

    def __init__(self, sections, order) -> None:
        self.sections, self.order = sections, order

    @property
    def count(self) -> int:
        return len(self.order)

    def events(self, strides: list[int]):
        """The events in arrival order, each as the bytes of its stride."""
        cursors = [0] * len(self.sections)
        for at in self.order:
            if at >= len(self.sections):
                raise RecordError("corrupt batch (order)")
            fn, _kind, _count, payload = self.sections[at]
            start = cursors[at]
            if start >= len(payload):
                raise RecordError("corrupt batch (order)")
            cursors[at] = start + strides[fn]
            yield payload[start:start + strides[fn]]


class SpanBatch:
    """One span of a version 2 file: `data` (the ring's bytes), `runs` (repeats, header words),
    `count` (records not discarded). `sections` as a version 1 batch has them (each function
    and kind's events as an array of its stride, in arrival order), built on first use by the
    reader's grouping (numpy's, from replay.py, where there is numpy); events() in arrival
    order, each as its record's bytes."""

    __slots__ = ("data", "runs", "count", "_reader", "_sections", "_trusted")

    def __init__(self, data, runs, count: int, reader, trusted: bool = False) -> None:
        self.data, self.runs, self.count, self._reader = data, runs, count, reader
        self._sections = None
        # Checked whole by an earlier pass (the reader's `trust`): its headers were found to be
        # the ones its runs say, so events() finds the records from the runs alone.
        self._trusted = trusted

    @property
    def sections(self):
        if self._sections is None:
            self._sections = self._reader.group(self, self._reader)
        return self._sections

    def walk(self):
        """(offset, header word) of each record, discarded ones included, each checked
        against the header in the bytes."""
        data, at = self.data, 0
        head = struct.Struct("<I" if self._reader.order == "little" else ">I")
        for count, words in self.runs:
            sizes = [(w, ringspan.record_size(w)) for w in words]
            for _ in range(count):
                for w, size in sizes:
                    if head.unpack_from(data, at)[0] != w:
                        raise RecordError(f"{self._reader.path}: corrupt span (a record "
                                          f"header is not the one its runs say)")
                    yield at, w
                    at += size

    def events(self, strides=None):
        """The records not discarded, in arrival order, each as its bytes."""
        data = self.data
        if not self._trusted:
            for at, w in self.walk():
                if not w & ringspan.DISCARD:
                    yield data[at + ringspan.HEADER:at + ringspan.HEADER + (w & ringspan.LENGTH)]
            return
        at, head = 0, ringspan.HEADER
        for count, words in self.runs:
            sizes = [ringspan.record_size(w) for w in words]
            period = sum(sizes)
            if len(words) == 1:
                if not words[0] & ringspan.DISCARD:
                    n = words[0] & ringspan.LENGTH
                    yield from [data[o:o + n] for o in range(at + head, at + head + count *
                                                                period, period)]
            else:
                cuts = []
                for w, size in zip(words, sizes):
                    if not w & ringspan.DISCARD:
                        cuts.append((at + head, w & ringspan.LENGTH))
                    at += size
                at -= period
                yield from [data[o + first:o + first + n] for o in range(0, count * period, period)
                            for first, n in cuts]
            at += count * period


def group(batch: SpanBatch, reader) -> list:
    """A span's sections, with the standard library only: its records of each function and
    kind, each cut or zero-padded to the function's stride, in arrival order."""
    out: dict[tuple[int, int], bytearray] = {}
    head = RECORD_HEADS[reader.order]
    index, strides = reader.index, reader.strides
    for raw in batch.events():
        if len(raw) < DATA:
            raise RecordError(f"{reader.path}: corrupt span (an event of {len(raw)} bytes)")
        btf_id, kind, _failed = head.unpack_from(raw, EVENT_HEADER)
        fn = index.get(btf_id)
        if fn is None or kind > 1:
            raise RecordError(f"{reader.path}: corrupt span (an event of no recorded function: "
                              f"BTF id {btf_id}, kind {kind})")
        piece = raw[:strides[fn]]
        payload = out.setdefault((fn, kind), bytearray())
        payload += piece
        payload += bytes(strides[fn] - len(piece))
    return [(fn, kind, len(p) // strides[fn], memoryview(p)) for (fn, kind), p in out.items()]


class Reader:
    """A recording opened for reading: `header` (the JSON), `descriptors` (as JSON gives them
    back: replay.functions checks them, and the strides against them), `strides`; batches()
    reads one batch at a time (memory bounded by the writer's batch size), then `events` and
    `lost` from the end."""

    def __init__(self, path: str, word_sum=word_sum, reuse: bool = False,
                 group=group, trust: int = 0) -> None:
        self.path = path
        # Version 2: the spans before byte `trust` were checked by an earlier reader of this
        # file (its `checked`), their CRC not taken again (a second pass over a file whose
        # first pass checked it whole: the dataset, the text after its check).
        self.trust, self.checked = trust, 0
        self.word_sum = word_sum  # numpy's is faster (columnar.py)
        self.group = group  # a version 2 span's sections: numpy's is faster (replay.py)
        self.cut: tuple[int, int] | None = None  # (byte, events) where a file without its end
        self._counted = 0  # events in the spans read so far
        # Read every batch's payloads into one buffer: no fresh pages per batch, but a batch's
        # memoryviews are only good until the next one is read (columnar.py copies them).
        self.reuse, self._buf = reuse, bytearray()
        self._bufs = [bytearray(), bytearray()]  # version 2: one read while one is in use
        self.file = open(path, "rb")  # noqa: SIM115
        try:
            self._head()
        except BaseException:
            self.file.close()
            raise
        self.events = self.lost = None

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def _read(self, n: int, what: str) -> bytes:
        data = self.file.read(n)
        if len(data) != n:
            raise RecordError(f"{self.path}: truncated (in {what})")
        return data

    def _head(self) -> None:
        first = self.file.read(FILE_HEAD.size)
        if first[:len(MAGIC)] != MAGIC[:len(first)] or not first:
            raise RecordError(f"{self.path}: not a btfgen recording")
        if len(first) < FILE_HEAD.size:
            raise RecordError(f"{self.path}: truncated (in the head)")
        _magic, version, size, said_crc, pad = FILE_HEAD.unpack(first)
        if version not in VERSIONS:
            raise RecordError(f"{self.path}: recording version {version}, this btfgen reads "
                              f"{' and '.join(map(str, VERSIONS))}")
        self.version = version
        if size > MAX_HEADER or pad:
            raise RecordError(f"{self.path}: corrupt (a header of {size} bytes)")
        text = self._read(size, "the header")
        if zlib.crc32(text) != said_crc:
            raise RecordError(f"{self.path}: corrupt header (checksum)")
        try:
            head = json.loads(text)
            funcs = head["functions"]
            self.descriptors = [decode(f["descriptor"]) for f in funcs]
            self.strides = [f["stride"] for f in funcs]
            self.order = head["byte_order"]
            ok = (head["event_header"] == EVENT_HEADER and self.order in ("little", "big")
                  and all(type(s) is int and DATA <= s <= MAX_STRIDE
                          for s in self.strides))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise RecordError(f"{self.path}: corrupt header ({type(e).__name__})") from None
        if not ok:
            raise RecordError(f"{self.path}: corrupt header (inconsistent layout)")
        ids = [d[1] if isinstance(d, tuple) and len(d) > 1 else None for d in self.descriptors]
        if not all(type(i) is int for i in ids):
            raise RecordError(f"{self.path}: corrupt header (a function without a BTF id)")
        self.index = {i: n for n, i in enumerate(ids)}  # BTF id -> function
        self.header = head

    def batches(self):
        """The file's batches (version 1) or spans (version 2), one at a time, then its end. A
        version 2 file cut short (its tracer killed) ends where its last whole span does:
        `cut` then says where, (byte offset, events before it), and `lost` is None."""
        if self.version >= 2:
            yield from self._spans()
            return
        while True:
            tag = self._read(4, "a batch")
            if tag == b"END\0":
                _, zero, events, lost, said_crc, pad = END.unpack(
                    tag + self._read(END.size - 4, "the end"))
                if zero or pad or zlib.crc32(struct.pack("<QQ", events, lost)) != said_crc:
                    raise RecordError(f"{self.path}: corrupt end (checksum)")
                if self.file.read(1):
                    raise RecordError(f"{self.path}: corrupt (data after the end)")
                self.events, self.lost = events, lost
                return
            if tag != b"BATC":
                raise RecordError(f"{self.path}: corrupt (no batch at byte "
                                  f"{self.file.tell() - 4})")
            yield self._batch(tag + self._read(BATCH_HEAD.size - 4, "a batch"))

    def _end(self, tag: bytes) -> None:
        _, zero, events, lost, said_crc, pad = END.unpack(
            tag + self._read(END.size - 4, "the end"))
        if zero or pad or zlib.crc32(struct.pack("<QQ", events, lost)) != said_crc:
            raise RecordError(f"{self.path}: corrupt end (checksum)")
        if self.file.read(1):
            raise RecordError(f"{self.path}: corrupt (data after the end)")
        if self.version >= 2 and events != self._counted:
            raise RecordError(f"{self.path}: corrupt end ({events} events, the spans hold "
                              f"{self._counted})")
        self.events, self.lost = events, lost

    def _cut(self, at: int) -> None:
        self.cut = (at, self._counted)
        self.events, self.lost = self._counted, None

    def _rest_is_zeros(self) -> bool:
        """Whether the file from here on holds only zero bytes (what a crashed system can
        leave past what reached the disk)."""
        while chunk := self.file.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return False
        return True

    def _spans(self):
        if crc.WHOSE != "zlib":
            # libdeflate's CRC and the read take a fraction of what the decoding takes: a thread
            # reading ahead saves little where a CPU is free, and where none is (a shared
            # machine) it waits for one between every span, which cost half the rate at load
            # 5-10 (bench_columnar --formats).
            self._checkers = None
            n = 0
            while True:
                what, got = self._chunk(n)
                n += 1
                if what == "end":
                    return
                if what == "cut":
                    self._cut(got)
                    return
                self._counted += got.count
                yield got
        # The next span is read and checked in a thread while the caller works on this one
        # (the CRC and the read let go of the GIL): the columnar path decodes tens of
        # millions of events a second. Where the CRC is zlib's (~4 GB/s: as long as the
        # decoding takes), a version 3 span's chunks are checked as they are read, on CHECKERS
        # threads more; libdeflate's takes a fraction of that, and more threads would cost
        # more than they save where no CPU is free.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool, ThreadPoolExecutor(CHECKERS) as checkers:
            self._checkers = checkers if crc.WHOSE == "zlib" else None
            ahead = pool.submit(self._chunk, 0)
            n = 1
            try:
                while True:
                    what, got = ahead.result()
                    if what == "end":
                        return
                    if what == "cut":
                        self._cut(got)
                        return
                    self._counted += got.count
                    ahead = pool.submit(self._chunk, n)
                    n += 1
                    yield got
            finally:
                ahead.cancel() or ahead.exception()  # done with the file before it closes

    def _chunk(self, n: int):
        """What comes next in the file: ("span", SpanBatch) read into buffer n % 2 (the
        caller's is the other), ("end", None), or ("cut", byte) where the file ends early."""
        f = self.file
        at = f.tell()
        tag = f.read(4)
        if tag == b"END\0":
            rest = f.read(END.size - 4)
            if len(rest) < END.size - 4:  # killed as it wrote the end
                return "cut", at
            f.seek(-len(rest), 1)
            self._end(tag)
            return "end", None
        if tag != b"SPAN":
            if len(tag) < 4 or (tag == bytes(4) and self._rest_is_zeros()):
                return "cut", at
            raise RecordError(f"{self.path}: corrupt (no span at byte {at})")
        batch = self._span(at, tag, n % 2)
        return ("cut", at) if batch is None else ("span", batch)

    def _span(self, at: int, tag: bytes, slot: int):
        """The span at byte `at`, or None where the file ends inside it (or it is the file's
        last bytes and fails its check: written in part when the writer was killed)."""
        f = self.file
        rest = f.read(SPAN_HEAD.size - 4)
        if len(rest) < SPAN_HEAD.size - 4:
            return None
        head = tag + rest
        _, records, nruns, nbytes, said_crc, head_crc = SPAN_HEAD.unpack(head)
        if zlib.crc32(head[:-4]) != head_crc:
            return None if self._rest_is_zeros() else self._corrupt(at, "its head's checksum")
        if nbytes % 8 or nbytes > MAX_SPAN_BYTES or nruns * 8 > nbytes or \
                not (nruns or (self.version >= 4 and nbytes)):
            self._corrupt(at, f"{nruns} runs, {nbytes} bytes")
        table = f.read(nruns * RUN.size)
        if len(table) < nruns * RUN.size:
            return None
        tail = checks_size(nbytes) if self.version >= 3 else 0
        end = at + SPAN_HEAD.size + len(table) + nbytes + tail
        check = end > self.trust
        if self.version >= 3 and zlib.crc32(table) != said_crc:
            return None if self._torn(at) else self._corrupt(at, "its runs' checksum")
        if self.reuse:
            if len(self._bufs[slot]) < nbytes:
                self._bufs[slot] = bytearray(nbytes)
            data = memoryview(self._bufs[slot])[:nbytes]
        else:
            data = memoryview(bytearray(nbytes))
        # Read a chunk at a time, each one's CRC taken on a checker thread as the next is read.
        crcs = []
        for start in range(0, nbytes, CHUNK):
            piece = data[start:start + CHUNK]
            if f.readinto(piece) < len(piece):
                for c in crcs:
                    c.cancel()
                return None
            if check and self.version >= 3:
                crcs.append(self._checkers.submit(crc.crc32, piece) if self._checkers
                            else _Done(crc.crc32(piece)))
        if self.version >= 3:
            said = f.read(tail)
            if len(said) < tail:
                return None
            if check and said != _packed([c.result() for c in crcs]):
                return None if self._torn(at) else self._corrupt(at, "checksum")
        elif check and crc.crc32(data, zlib.crc32(table)) != said_crc:
            return None if self._torn(at) else self._corrupt(at, "checksum")
        if not nruns:
            # A raw span: its runs from its headers, which its check has vouched for (or it
            # is refused above); `trusted`: events() need not compare them again.
            try:
                runs, count, _ = ringspan.runs_in(data, self.order)
            except ringspan.RingError as e:
                self._corrupt(at, str(e))
            if count != records:
                self._corrupt(at, f"{count} records, its head says {records}")
            self.checked = end
            return SpanBatch(memoryview(data), runs, records, self, trusted=True)
        runs, total, count = [], 0, 0
        for n, period, *words in RUN.iter_unpack(table):
            words = tuple(words[:period])
            if not (n and 1 <= period <= 4) or any(w & ringspan.BUSY for w in words):
                self._corrupt(at, "a run")
            runs.append((n, words))
            total += n * sum(ringspan.record_size(w) for w in words)
            count += n * sum(1 for w in words if not w & ringspan.DISCARD)
        if total != nbytes or count != records:
            self._corrupt(at, "its runs do not add up")
        self.checked = end
        return SpanBatch(memoryview(data), runs, records, self, trusted=not check)

    def _torn(self, at: int) -> bool:
        """Whether the span at byte `at`, which failed its check, is the file's last bytes:
        written in part when the writer was killed."""
        return not self.file.read(1)

    def _corrupt(self, at: int, what: str):
        raise RecordError(f"{self.path}: corrupt span at byte {at} ({what})")

    def _batch(self, head: bytes) -> Batch:
        _, n, nsec, said_crc, total_sum = BATCH_HEAD.unpack(head)
        if not 0 < n <= MAX_BATCH_EVENTS or not 0 < nsec <= min(n, MAX_SECTIONS):
            raise RecordError(f"{self.path}: corrupt batch ({n} events, {nsec} sections)")
        table = self._read(nsec * SECTION.size, "a batch")
        olen = n * 2 + (-n * 2) % 8
        order = self._read(olen, "a batch")
        sections, total, count_sum = [], 0, 0
        for i in range(nsec):
            fn, kind, count, pad = SECTION.unpack_from(table, i * SECTION.size)
            if fn >= len(self.strides) or kind > 1 or not 0 < count <= n or pad:
                raise RecordError(f"{self.path}: corrupt batch section")
            sections.append((fn, kind, count))
            total += count * self.strides[fn]
            count_sum += count
        if count_sum != n:
            raise RecordError(f"{self.path}: corrupt batch (section counts)")
        if self.reuse:
            if len(self._buf) < total:
                self._buf = bytearray(total)
            payload = memoryview(self._buf)[:total]
            if self.file.readinto(payload) != total:
                raise RecordError(f"{self.path}: truncated (in a batch)")
        else:
            payload = memoryview(self._read(total, "a batch"))
        if zlib.crc32(order, zlib.crc32(table)) != said_crc or \
                self.word_sum(payload) != total_sum:
            raise RecordError(f"{self.path}: corrupt batch (checksum)")
        out, at = [], 0
        for fn, kind, count in sections:
            size = count * self.strides[fn]
            out.append((fn, kind, count, payload[at:at + size]))
            at += size
        # Checked as they are used (Batch.events): the columnar path needs no order.
        indexes = memoryview(order)[:n * 2].cast("H") if _LITTLE else \
            [int.from_bytes(order[i:i + 2], "little") for i in range(0, n * 2, 2)]
        return Batch(out, indexes)


