"""`btfgen trace --record FILE`: the raw events and everything needed to decode them, in one
self-describing file that `btfgen decode` reads on any machine, with no BPF and no BTF.

Standard library only (the writer runs in the trace directory on the target).

Layout (framing little-endian; the events keep the target's byte order, which the header
names):

    magic "BTFGREC\\n" | u32 version | u32 header size H | u32 crc32(header) | u32 0
    header: H bytes of JSON (arch, byte order, pointer size, kernel release, event header
            size, the functions: name, stride, generated decoder descriptor)
    batch*: "BATC" | u32 events | u32 sections | u32 crc32(sections, order)
            | u64 sum of the payloads' little-endian u64 words, modulo 2**64
            sections x (u32 function, u32 kind, u32 count, u32 0)
            order: events x u16, the section of each event in arrival order (padded to 8)
            each section's count x stride bytes: the event truncated to what its function's
            decoder reads (every event of a function has the same size, so a section is an
            array: the columnar decoder reads it with one numpy dtype)
    end:    "END\\0" | u32 0 | u64 events | u64 lost | u32 crc32(events, lost) | u32 0

A file without its end (the tracer was killed) or failing a check is refused, in one line.
The payloads are checked by a word sum, not a CRC: any changed byte changes it, and numpy sums
a batch in a fraction of the time zlib.crc32 takes (the columnar path reads tens of millions of
records a second; a CRC alone would halve that).
"""

from __future__ import annotations

import json
import os
import struct
import zlib

from . import spec_format

MAGIC = b"BTFGREC\n"
VERSION = 1
FILE_HEAD = struct.Struct("<8sIIII")
BATCH_HEAD = struct.Struct("<4sIIIQ")
SECTION = struct.Struct("<IIII")
END = struct.Struct("<4sIQQII")
MAX_HEADER = 64 << 20
MAX_BATCH_EVENTS = 1 << 16  # the order array's u16 sections: also the writer's batch size
MAX_SECTIONS = 1 << 14
MAX_STRIDE = 1 << 20  # an event is far shorter: the generic record's data is 1024 bytes
EVENT_HEADER = spec_format.size_of(spec_format.EVENT_HEAD)  # before the btfgen_record
RECORD_HEADER = spec_format.size_of(spec_format.RECORD_HEAD)
CAPTURE_HEAD = spec_format.size_of(spec_format.CAPTURE_HEAD)  # before each capture


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
            end = max(end, c.head + CAPTURE_HEAD + (c.size + 2 if c.kind == "str" else c.size))
    return EVENT_HEADER + RECORD_HEADER + (end + 7) // 8 * 8


# -- writing ----------------------------------------------------------------------------------

class Writer:
    """Events in, a recording out: written to FILE.part and renamed at close(), so FILE is
    never half-written."""

    def __init__(self, path: str, header: dict, descriptors: list, order: str) -> None:
        self.path = path
        self.strides = [stride(d) for d in descriptors]
        self.index = {d.btf_id: i for i, d in enumerate(descriptors)}  # btf_id -> function
        self.record_head = spec_format.structs(spec_format.RECORD_HEAD)[order]
        head = dict(header, event_header=EVENT_HEADER, functions=[
            {"name": d.name, "stride": s, "descriptor": encode(d)}
            for d, s in zip(descriptors, self.strides)])
        text = json.dumps(head, sort_keys=True).encode()
        self.file = open(path + ".part", "wb")  # noqa: SIM115 (closed by close())
        self.file.write(FILE_HEAD.pack(MAGIC, VERSION, len(text), zlib.crc32(text), 0) + text)
        self.events = 0
        self._reset()

    def _reset(self) -> None:
        self.sections: dict[tuple[int, int], int] = {}
        self.payloads: list[bytearray] = []
        self.keys: list[tuple[int, int]] = []
        self.order = bytearray()

    def record(self, raw) -> None:
        btf_id, kind, _failed = self.record_head.unpack_from(raw, EVENT_HEADER)
        fn = self.index.get(btf_id)
        if fn is None or kind > 1:
            return  # not an event of ours: output.Printer says so when printing
        at = self.sections.get((fn, kind))
        if at is None:
            at = self.sections[fn, kind] = len(self.payloads)
            self.payloads.append(bytearray())
            self.keys.append((fn, kind))
        stride = self.strides[fn]
        self.payloads[at] += memoryview(raw)[:stride]
        if len(raw) < stride:  # sent shorter (spec_format.event_size): bytes its kind never reads
            self.payloads[at] += bytes(stride - len(raw))
        self.order += at.to_bytes(2, "little")
        self.events += 1
        if len(self.order) // 2 >= MAX_BATCH_EVENTS or len(self.sections) >= MAX_SECTIONS:
            self.flush()

    def flush(self) -> None:
        n = len(self.order) // 2
        if not n:
            return
        body = bytearray()
        for (fn, kind), payload in zip(self.keys, self.payloads):
            body += SECTION.pack(fn, kind, len(payload) // self.strides[fn], 0)
        body += self.order + bytes(-len(self.order) % 8)
        total = sum(word_sum(p) for p in self.payloads) & MASK
        self.file.write(BATCH_HEAD.pack(b"BATC", n, len(self.keys), zlib.crc32(body), total))
        self.file.write(body)
        for payload in self.payloads:
            self.file.write(payload)
        self._reset()

    def close(self, lost: int) -> None:
        self.flush()
        tail = struct.pack("<QQ", self.events, lost)
        self.file.write(END.pack(b"END\0", 0, self.events, lost, zlib.crc32(tail), 0))
        self.file.close()
        os.replace(self.path + ".part", self.path)

    def abandon(self) -> None:
        self.file.close()
        os.unlink(self.path + ".part")


# -- reading ----------------------------------------------------------------------------------

class Batch:
    """One batch: `sections` as (function index, kind, count, payload memoryview), and the
    arrival order (a section index per event)."""

    __slots__ = ("sections", "order")

    def __init__(self, sections, order) -> None:
        self.sections, self.order = sections, order

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


class Reader:
    """A recording opened for reading: `header` (the JSON), `descriptors` (as JSON gives them
    back: replay.functions checks them, and the strides against them), `strides`; batches()
    reads one batch at a time (memory bounded by the writer's batch size), then `events` and
    `lost` from the end."""

    def __init__(self, path: str, word_sum=word_sum, reuse: bool = False) -> None:
        self.path = path
        self.word_sum = word_sum  # numpy's is faster (columnar.py)
        # Read every batch's payloads into one buffer: no fresh pages per batch, but a batch's
        # memoryviews are only good until the next one is read (columnar.py copies them).
        self.reuse, self._buf = reuse, bytearray()
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
        _magic, version, size, crc, pad = FILE_HEAD.unpack(first)
        if version != VERSION:
            raise RecordError(f"{self.path}: recording version {version}, this btfgen reads "
                              f"{VERSION}")
        if size > MAX_HEADER or pad:
            raise RecordError(f"{self.path}: corrupt (a header of {size} bytes)")
        text = self._read(size, "the header")
        if zlib.crc32(text) != crc:
            raise RecordError(f"{self.path}: corrupt header (checksum)")
        try:
            head = json.loads(text)
            funcs = head["functions"]
            self.descriptors = [decode(f["descriptor"]) for f in funcs]
            self.strides = [f["stride"] for f in funcs]
            self.order = head["byte_order"]
            ok = (head["event_header"] == EVENT_HEADER and self.order in ("little", "big")
                  and all(type(s) is int and EVENT_HEADER + RECORD_HEADER <= s <= MAX_STRIDE
                          for s in self.strides))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise RecordError(f"{self.path}: corrupt header ({type(e).__name__})") from None
        if not ok:
            raise RecordError(f"{self.path}: corrupt header (inconsistent layout)")
        self.header = head

    def batches(self):
        while True:
            tag = self._read(4, "a batch")
            if tag == b"END\0":
                _, zero, events, lost, crc, pad = END.unpack(
                    tag + self._read(END.size - 4, "the end"))
                if zero or pad or zlib.crc32(struct.pack("<QQ", events, lost)) != crc:
                    raise RecordError(f"{self.path}: corrupt end (checksum)")
                if self.file.read(1):
                    raise RecordError(f"{self.path}: corrupt (data after the end)")
                self.events, self.lost = events, lost
                return
            if tag != b"BATC":
                raise RecordError(f"{self.path}: corrupt (no batch at byte "
                                  f"{self.file.tell() - 4})")
            yield self._batch(tag + self._read(BATCH_HEAD.size - 4, "a batch"))

    def _batch(self, head: bytes) -> Batch:
        _, n, nsec, crc, total_sum = BATCH_HEAD.unpack(head)
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
        if zlib.crc32(order, zlib.crc32(table)) != crc or self.word_sum(payload) != total_sum:
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


