"""A recording's notes (btfgen.probe.recording's NOTE, made by btfgen.probe.stack_notes) read
back and checked: what `btfgen decode` names a recording's stacks by. A note's JSON passed its
checksum but may still be crafted: every member is checked for its type here, so that what
names the frames never meets a value of another shape (one line, exit 2, never a traceback)."""

from __future__ import annotations

import json
from typing import NamedTuple

from btfgen.probe.symbolize import Mapping

U64 = (1 << 64) - 1


class BadNote(ValueError):
    """A note that is not what the writer writes."""


class Note(NamedTuple):
    maps: list  # (tgid, [Mapping] or why)
    objects: list  # (path, build id or None, why or None)
    kernel: list  # (ip, symbol or None, offset, module or None, why or None)


def _int(v, most: int = U64) -> int:
    if type(v) is not int or not 0 <= v <= most:
        raise BadNote(f"{v!r} is not an address")
    return v


def _text(v, none: bool = True):
    if v is None and none:
        return None
    if type(v) is not str:
        raise BadNote(f"{v!r} is not a text")
    return v


def parse(text: bytes) -> Note:
    """The note whose JSON is `text`, checked; BadNote says what is wrong."""
    try:
        body = json.loads(text)
    except ValueError as e:
        raise BadNote(f"not JSON ({e})") from None
    if not isinstance(body, dict) or set(body) != {"maps", "objects", "kernel"} or \
            not all(isinstance(v, list) for v in body.values()):
        raise BadNote("not a note's members")
    maps = []
    for m in body["maps"]:
        if not isinstance(m, dict) or "tgid" not in m:
            raise BadNote("a process's maps without their process")
        tgid = _int(m["tgid"], 0xFFFFFFFF)
        if set(m) == {"tgid", "why"}:
            maps.append((tgid, _text(m["why"], none=False)))
            continue
        if set(m) != {"tgid", "maps"} or not isinstance(m["maps"], list):
            raise BadNote(f"process {tgid}'s maps")
        rows = []
        for row in m["maps"]:
            if not isinstance(row, list) or len(row) != 4:
                raise BadNote(f"process {tgid}'s maps: {row!r}")
            start, end, offset = (_int(v) for v in row[:3])
            if end <= start:
                raise BadNote(f"process {tgid}'s maps: {start:#x}-{end:#x}")
            rows.append(Mapping(start, end, offset, _text(row[3], none=False)))
        maps.append((tgid, sorted(rows)))
    objects = []
    for o in body["objects"]:
        if not isinstance(o, dict) or set(o) != {"path", "build_id", "why"}:
            raise BadNote(f"an object: {o!r}")
        bid = _text(o["build_id"])
        if bid is not None and (not bid or len(bid) % 2 or
                                bid.strip("0123456789abcdef")):
            raise BadNote(f"a build id {bid!r}")
        objects.append((_text(o["path"], none=False), bid, _text(o["why"])))
    kernel = []
    for k in body["kernel"]:
        if not isinstance(k, list) or len(k) != 5:
            raise BadNote(f"a kernel symbol: {k!r}")
        kernel.append((_int(k[0]), _text(k[1]), _int(k[2]), _text(k[3]), _text(k[4])))
    return Note(maps, objects, kernel)
