"""A recording (`btfgen trace --record`, btfgen.probe.recording: the format and its writer)
read back, in every version its writer ever wrote. The host's alone: no target reads a
recording, so the run side carries only the writer.

Version 5 is btfgen.probe.recording's. The versions before it:

Version 4 is version 5 without notes (no --stack in recordings).

Version 3 is version 4 where every span has its runs.

Version 2 is version 3 with one check, crc32(runs, bytes), in the head's fourth word and none
after the bytes.

Version 1: per batch of up to 65,536 events, each function's events as an array of its stride,
and their arrival order:

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

A span's records per function and kind (a version 1 batch's sections) are grouping.py's.
"""

from __future__ import annotations

import array
import json
import struct
import zlib

from btfgen.probe import crc, recording, ringspan
from btfgen.probe.event import DATA, EVENT_HEADER
from btfgen.probe.recording import (END, FILE_HEAD, MAGIC, MAX_NOTE, NOTE_HEAD, RUN, SPAN_HEAD,
                                    RecordError, checks_size, packed_checks)
from btfgen.recordings import stack_notes
from btfgen.recordings.grouping import Grouping

VERSIONS = (1, 2, 3, 4, 5)  # what the reader reads
BATCH_HEAD = struct.Struct("<4sIIIQ")
SECTION = struct.Struct("<IIII")
CHECKERS = 2  # threads checking a version 3 span's chunks as the reader reads them
MAX_SPAN_BYTES = 1 << 28  # a span is far shorter: the reader's are at most ringspan.MAX_SPAN
MAX_HEADER = 64 << 20
MAX_BATCH_EVENTS = 1 << 16  # the order array's u16 sections: also version 1's writer's batch size
MAX_SECTIONS = 1 << 14
MAX_STRIDE = 1 << 20  # an event is far shorter: the generic record's data is 8192 bytes at most


_LITTLE = struct.pack("=H", 1) == b"\x01\x00"
MASK = (1 << 64) - 1


def word_sum(data) -> int:
    """The sum of `data`'s little-endian u64 words modulo 2**64 (its length a multiple of 8),
    with the standard library only (version 1's check)."""
    if _LITTLE:
        return sum(memoryview(data).cast("B").cast("Q")) & MASK
    words = array.array("Q", bytes(data))
    words.byteswap()
    return sum(words) & MASK


def decode(obj):
    """A decoder descriptor back from its JSON (btfgen.probe.recording.encode's)."""
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


class _Done:
    """A CRC taken at once, as a checker's future would give it."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def result(self) -> int:
        return self.value

    def cancel(self) -> None:
        pass


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

    def places(self, strides: list[int]):
        """The events in arrival order as SpanBatch.places gives a span's: (bytes, each
        event's first byte, each one's end), here the events joined into one buffer."""
        starts, ends, at = [], [], 0
        events = list(self.events(strides))
        for raw in events:
            starts.append(at)
            at += len(raw)
            ends.append(at)
        yield memoryview(b"".join(events)), starts, ends


class SpanBatch:
    """One span of a version 2 file: `data` (the ring's bytes), `runs` (repeats, header words),
    `count` (records not discarded). `sections` as a version 1 batch has them (each function
    and kind's events as an array of its stride, in arrival order), built on first use by the
    reader's grouping (grouping.py); events() in arrival order, each as its record's bytes."""

    __slots__ = ("data", "_runs", "table", "count", "_reader", "_sections", "trusted", "notes")

    def __init__(self, data, runs, count: int, reader, trusted: bool = False) -> None:
        # `runs`: a list of (repeats, header words), or the grouping's table of them
        # (Grouping.run_table's), made a list where asked
        self.data, self.count, self._reader = data, count, reader
        self._runs, self.table = (runs, None) if isinstance(runs, list) else (None, runs)
        self._sections = None
        # the notes before the span (version 5: what its stacks are named by), in file order
        self.notes: tuple = ()
        # Checked whole by an earlier pass (the reader's `trust`): its headers were found to be
        # the ones its runs say, so events() finds the records from the runs alone.
        self.trusted = trusted

    @property
    def runs(self) -> list:
        if self._runs is None:
            self._runs = self.table.runs()
        return self._runs

    @property
    def sections(self):
        if self._sections is None:
            self._sections = self._reader.grouping.sections(self)
        return self._sections

    def events(self, strides=None):
        """The records not discarded, in arrival order, each as its bytes (each record's
        header checked against the one its run says, unless the span is trusted, before its
        list is handed on): the grouping's records()."""
        return self._reader.grouping.records(self)

    def places(self, strides=None):
        """Where the records not discarded lie, in arrival order, a chunk at a time: (the
        span's bytes, each record's first byte, each one's end): the grouping's places()."""
        return self._reader.grouping.places(self)


class Reader:
    """A recording opened for reading: `header` (the JSON), `descriptors` (as JSON gives them
    back: replay.functions checks them, and the strides against them), `strides`; batches()
    reads one batch at a time (memory bounded by the writer's batch size), then `events` and
    `lost` from the end."""

    def __init__(self, path: str, word_sum=word_sum, reuse: bool = False,
                 grouping: type[Grouping] = Grouping, trust: int = 0) -> None:
        self.path = path
        # Version 2: the spans before byte `trust` were checked by an earlier reader of this
        # file (its `checked`), their CRC not taken again (a second pass over a file whose
        # first pass checked it whole: the dataset, the text after its check).
        self.trust, self.checked = trust, 0
        self.word_sum = word_sum  # numpy's is faster (columnar.py)
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
        # A version 2 span's sections (grouping.fastest(): numpy's where it is installed).
        self.grouping = grouping(self)
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
        notes = []
        while tag == b"NOTE" and self.version >= 5:
            note = self._note(at)
            if note is None:
                return "cut", at
            notes.append(note)
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
        if batch is None:
            return "cut", at
        batch.notes = tuple(notes)
        return "span", batch

    def _note(self, at: int) -> stack_notes.Note | None:
        """The note at byte `at` (its tag read), or None where the file ends inside it."""
        f = self.file
        rest = f.read(NOTE_HEAD.size - 4)
        if len(rest) < NOTE_HEAD.size - 4:
            return None
        head = b"NOTE" + rest
        _, size, said_crc, head_crc = NOTE_HEAD.unpack(head)
        if zlib.crc32(head[:-4]) != head_crc:
            return None if self._rest_is_zeros() else self._bad_note(at, "its head's checksum")
        if size > MAX_NOTE:
            self._bad_note(at, f"{size} bytes")
        text = f.read(size)
        if len(text) < size:
            return None
        if zlib.crc32(text) != said_crc:
            return None if self._torn(at) else self._bad_note(at, "checksum")
        try:
            return stack_notes.parse(text)
        except stack_notes.BadNote as e:
            self._bad_note(at, str(e))

    def _bad_note(self, at: int, what: str):
        raise RecordError(f"{self.path}: corrupt note at byte {at} ({what})")

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
        chunk = recording.CHUNK  # the writer's (read here, where a test makes it smaller)
        for start in range(0, nbytes, chunk):
            piece = data[start:start + chunk]
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
            if check and said != packed_checks([c.result() for c in crcs]):
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
        try:
            runs, total, count = self.grouping.run_table(table, nbytes)
        except ValueError as e:
            self._corrupt(at, str(e))
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


