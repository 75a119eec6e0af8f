"""A BTF string section: NUL-terminated names addressed by byte offset, a split table's offsets
continuing its base's. Names decode as UTF-8, bytes that are not kept as surrogate escapes."""

from __future__ import annotations

from itertools import accumulate, repeat
from operator import add

MAX_NAME_OFFSET = 0xFFFFFFFF  # BTF_MAX_NAME_OFFSET (libbpf)


class StringSection:
    __slots__ = ("data", "base", "start", "end", "cache", "_all")

    def __init__(self, data: bytes, base: StringSection | None = None):
        self.data = data
        self.base = base
        self.start = base.end if base is not None else 0  # the offset of data[0]
        self.end = self.start + len(data)
        self.cache: dict[int, str] = {}  # offset -> string, the base's included
        self._all: dict[int, str] | None = None

    def defect(self) -> str | None:
        """What makes the section unusable, or None."""
        s = self.data
        if self.base is not None and not s:
            return None  # a split table may add no strings
        if not s or len(s) - 1 > MAX_NAME_OFFSET or s[-1] != 0:
            return "string section is empty or does not end in NUL"
        if self.base is None and s[0] != 0:
            return "string section does not start with NUL"
        return None

    def get(self, offset: int) -> str | None:
        """The string at `offset`, or None past the end. The section ends in NUL (`defect`), so
        every string in it ends."""
        s = self.cache.get(offset)
        if s is not None:
            return s
        if offset < self.start:
            s = self.base.get(offset)  # type: ignore[union-attr]
        else:
            rel = offset - self.start
            data = self.data
            if rel >= len(data):
                return None
            s = data[rel:data.index(0, rel)].decode("utf-8", "surrogateescape")
        self.cache[offset] = s
        return s

    def by_offset(self) -> dict[int, str]:
        """Every string of this section that starts right after a NUL, by offset, decoded in
        bulk (a dump or an index needs nearly all of them). Offsets into the middle of a string
        are not in it: `get` answers those."""
        if self._all is None:
            raw = self.data[:-1]  # the section ends in NUL
            text = raw.decode("utf-8", "surrogateescape")
            if len(text) != len(raw):  # multi-byte UTF-8: character and byte offsets differ
                pieces = raw.split(b"\0")
                lengths = list(map(len, pieces))
                parts = [p.decode("utf-8", "surrogateescape") for p in pieces]
            else:
                parts = text.split("\0")
                lengths = list(map(len, parts))
            starts = accumulate(map(add, lengths, repeat(1)), initial=self.start)
            self._all = dict(zip(starts, parts)) if raw or self.data else {}
            self.cache.update(self._all)
        return self._all
