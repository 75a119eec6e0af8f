"""`btfgen trace --record FILE`: the raw events and everything needed to decode them, in one
self-describing file that `btfgen decode` reads on any machine, with no BPF and no BTF.

Standard library only (the writer runs in the trace directory on the target).

Version 5 (written since --stack can be recorded; framing little-endian, the events and the
ring's record headers keep the target's byte order, which the header names):

    magic "BTFGREC\n" | u32 version 5 | u32 header size H | u32 crc32(header) | u32 0
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
    note*:  "NOTE" | u32 bytes | u32 crc32(body) | u32 crc32(the 12 bytes before) | body:
            bytes of JSON, what the span after it needs to name its stacks (--stack: the
            header's "stack" lists what was taken): {"maps": [{"tgid", "maps": [[start, end,
            file offset, path], ...]} or {"tgid", "why"}], "objects": [{"path", "build_id",
            "why"}], "kernel": [[ip, symbol, offset, module, why], ...]}; each process's maps
            as read when its events were recorded (at its first stack, again at an address in
            none of them), each mapped object once, at its first frame, each kernel address
            once (stack_notes.py). Notes come before the span whose events read them.
    end:    "END\0" | u32 0 | u64 events | u64 lost | u32 crc32(events, lost) | u32 0

The bytes' checks come after them so that the writer takes them on a thread while the bytes
are written (zlib lets go of the GIL, as does the write): the CRC, which alone takes as long
as the write, then costs no time where a CPU is free. One a MiB, so that a reader checks a
span's chunks on several threads while it decodes.

The writer writes each span of the ring as the reader takes it (one write, straight from the
ring's pages: no event is held in memory), to FILE itself. A file without its end (the tracer
was killed) decodes up to its last whole span, and says where it was cut; one failing a check
is refused, in one line. The runs repeat what the headers in the bytes say, checked against
them, so that the columnar decoder finds every record with numpy, never a Python call a record.

This module is the writer's (and the format's): no target reads a recording back. The
host's reader (btfgen.recordings.reader) reads it and the versions written before it.
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
from .event import CAPTURE_HEADER, DATA, EVENT_HEADER

MAGIC = b"BTFGREC\n"
VERSION = 5  # what the writer writes
FILE_HEAD = struct.Struct("<8sIIII")
NOTE_HEAD = struct.Struct("<4sIII")
MAX_NOTE = 64 << 20  # a note is far shorter: a process's maps, a span's kernel symbols
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


class RecordError(ValueError):
    """A file that is not a complete, intact recording: one line for the user."""


# -- the decoder descriptors as JSON ----------------------------------------------------------
# Generated descriptors are nested tuples with dicts (enumerator names by value): JSON keeps a
# tuple as a list and a dict as {"map": [[key, value], ...]} (its keys are ints). The reader's
# decode (btfgen.recordings.reader) turns them back.

def encode(desc):
    if isinstance(desc, tuple):
        return [encode(d) for d in desc]
    if isinstance(desc, dict):
        return {"map": [[encode(k), encode(v)] for k, v in desc.items()]}
    return desc


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
    return packed_checks(_crcs(memoryview(data)))


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


def packed_checks(crcs: list[int]) -> bytes:
    """A span's chunk CRCs as the file holds them after its bytes (u32 each, padded to 8)."""
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
                self._write([packed_checks(self._written(memoryview(data)))])
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
            self._write([packed_checks(crcs)])
        self.events += span.records
        self.spans += 1

    def note(self, body: dict) -> None:
        """Write a note (what the next span needs to name its stacks) before it."""
        text = json.dumps(body, sort_keys=True).encode()
        head = NOTE_HEAD.pack(b"NOTE", len(text), zlib.crc32(text), 0)
        head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
        self._write([head, text])

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


