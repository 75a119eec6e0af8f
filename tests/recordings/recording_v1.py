"""The recording writer of format version 1, as btfgen wrote it before the ring buffer was read
in place (batches of each function's events at its stride, written to FILE.part and renamed at
the end): kept here unchanged so that the tests make version 1 files and check they still decode.
"""

from __future__ import annotations

import json
import os
import zlib

from btfgen.probe import spec_format
from btfgen.probe.recording import END, EVENT_HEADER, FILE_HEAD, MAGIC, encode, stride, struct
from btfgen.recordings.reader import (BATCH_HEAD, MASK, MAX_BATCH_EVENTS, MAX_SECTIONS, SECTION,
                                      word_sum)

VERSION = 1


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
        if len(raw) < stride:  # the tracer of version 1 sent 1,080 bytes: never shorter
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
