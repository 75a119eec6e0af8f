"""The recording writer of format version 2, as btfgen wrote it before a span's checks followed
its bytes (one crc32 of the runs and the bytes in the span's head, taken before the write):
kept here unchanged so that the tests make version 2 files and check they still decode.
"""

from __future__ import annotations

import json
import os
import struct
import zlib

from btfgen.probe import ringspan
from btfgen.probe.recording import (END, EVENT_HEADER, FILE_HEAD, MAGIC, RUN, SPAN_HEAD, encode,
                                    stride)

VERSION = 2


class Writer:
    """Spans of the ring in, a recording out: each span written as it comes, to FILE itself."""

    def __init__(self, path: str, header: dict, descriptors: list, order: str) -> None:
        self.path, self.order = path, order
        self.strides = [stride(d) for d in descriptors]
        head = dict(header, event_header=EVENT_HEADER, functions=[
            {"name": d.name, "stride": s, "descriptor": encode(d)}
            for d, s in zip(descriptors, self.strides)])
        text = json.dumps(head, sort_keys=True).encode()
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.events = self.spans = 0
        self._write([FILE_HEAD.pack(MAGIC, VERSION, len(text), zlib.crc32(text), 0), text])

    def _write(self, parts: list) -> None:
        while parts:
            done = os.writev(self.fd, parts)
            while parts and done >= len(parts[0]):
                done -= len(parts[0])
                parts.pop(0)
            if parts and done:
                parts[0] = memoryview(parts[0])[done:]

    def span(self, span) -> None:
        table = b"".join(RUN.pack(n, len(words), *words, *(0,) * (4 - len(words)))
                         for n, words in span.runs)
        crc = zlib.crc32(span.data, zlib.crc32(table))
        head = SPAN_HEAD.pack(b"SPAN", span.records, len(span.runs), len(span.data), crc, 0)
        head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
        self._write([head, table, span.data])
        self.events += span.records
        self.spans += 1

    def records(self, raws) -> None:
        raws = list(raws)
        if raws:
            self.span(ringspan.Span.of(raws, self.order))

    def close(self, lost: int) -> None:
        tail = struct.pack("<QQ", self.events, lost)
        self._write([END.pack(b"END\0", 0, self.events, lost, zlib.crc32(tail), 0)])
        os.close(self.fd)
        self.fd = -1
