"""Captures: what a pointer pointed to, read from its status head and bytes in a generic
record."""

from __future__ import annotations

from .descriptors import CaptureDesc
from .records import (CAPTURE_EMPTY, CAPTURE_FAULT, CAPTURE_HEAD_SIZE, CAPTURE_NULL, CAPTURE_OK,
                      CARRY_MISSING, SPACES)
from .values import CapturedBytes, CapturedString, Enumerator, Unavailable


def capture_reader(c: CaptureDesc, read, head, order: str):
    """A function (record data, failed bits) -> the capture's value: a whole string, the
    commonest capture, with its descriptor read here once; anything else by _captured."""
    if c.kind != "str" or c.head < 0:
        return lambda data, failed: _captured(c, read, data, failed, head, order)
    at, size, root_mask, unpack = c.head, c.size, c.root_mask, head.unpack_from
    first = at + CAPTURE_HEAD_SIZE

    def string(data, failed):
        status, _hop, space, _pad, n, _pad2, _ptr = unpack(data, at)
        if status != CAPTURE_OK or failed & root_mask:
            return _captured(c, read, data, failed, head, order)
        # n counts the NUL; one character past the limit was read to tell truncation apart.
        text = bytes(data[first:first + n - 1]) if n > 1 else b""
        truncated = len(text) > size
        if truncated:
            text = text[:size]
        if b"\0" in text:
            text = text.split(b"\0", 1)[0]
        return CapturedString(text.decode("utf-8", "backslashreplace"), truncated,
                              SPACES[space] if space < len(SPACES) else f"space {space}")

    return string


def _captured(c: CaptureDesc, read, data, failed: int, head, order: str):
    if c.head < 0:  # the plan's reason (an older descriptor has none: then it was room)
        return Unavailable(c.why or "no room in the record")
    if failed & c.root_mask & CARRY_MISSING:  # an exit buffer's pointer, kept from its entry
        return Unavailable(f"{c.pointers[0]} was NULL at entry, or its entry was not seen")
    if failed & c.root_mask:
        return Unavailable(f"{c.pointers[0]} could not be read")
    status, hop, space, _pad, n, _pad2, _ptr = head.unpack_from(data, c.head)
    if c.kind == "buf" and status in (CAPTURE_OK, CAPTURE_EMPTY):
        return _buffer(c, data, failed, head, order, status, space, n)
    at = c.head + CAPTURE_HEAD_SIZE
    where = SPACES[space] if space < len(SPACES) else f"space {space}"
    if status == CAPTURE_NULL:
        return Unavailable(f"{_pointer(c, hop)} is NULL")
    if status == CAPTURE_FAULT:
        return Unavailable(f"reading through {_pointer(c, hop)} faulted ({where} memory)")
    if status != CAPTURE_OK:
        return Unavailable(f"not captured (status {status})")
    # (A string read whole is capture_reader's: it comes here only when it was not.)
    if not c.bit_size:
        return read(data, at)
    whole = int.from_bytes(data[at:at + c.size], order)
    shift = c.bit_offset if order == "little" else 8 * c.size - c.bit_offset - c.bit_size
    raw = (whole >> shift) & ((1 << c.bit_size) - 1)
    if c.type.tag == "bool":
        return bool(raw)
    if c.type.signed and raw >> (c.bit_size - 1):
        raw -= 1 << c.bit_size
    return Enumerator(raw, c.type.names.get(raw)) if c.type.tag == "enum" else raw


def _buffer(c: CaptureDesc, data, failed: int, head, order: str, status: int, space: int,
            n: int):
    """A buffer's bytes, with the length the call said (from the record: an argument, the
    return value, or what the length's own capture read)."""
    at, nbytes, signed, name, lhead, lmask = c.length
    if at < 0:
        length = nbytes
    else:
        if failed & lmask:
            return Unavailable(f"its length {name} could not be read")
        if lhead >= 0:
            lstatus = head.unpack_from(data, lhead)[0]
            if lstatus != CAPTURE_OK:
                why = _captured(CaptureDesc(name, "value", ("int", nbytes, signed), nbytes, 0, 0,
                                            c.at_exit, lhead, lmask, (name.lstrip("*"),)),
                                None, data, failed, head, order)
                return Unavailable(f"its length: {why.reason}")
        length = int.from_bytes(data[at:at + nbytes], order, signed=signed)
    if status == CAPTURE_EMPTY or length <= 0:
        return Unavailable(f"nothing to read: {name}={length}")
    start = c.head + CAPTURE_HEAD_SIZE
    where = SPACES[space] if space < len(SPACES) else f"space {space}"
    return CapturedBytes(bytes(data[start:start + min(n, c.size)]), length, where)


def _pointer(c: CaptureDesc, hop: int) -> str:
    return c.pointers[hop] if hop < len(c.pointers) else f"pointer {hop}"


def captures_end(caps: tuple) -> int:
    """The furthest record data byte the captures read."""
    return max((c.head + CAPTURE_HEAD_SIZE + (c.size + 2 if c.kind == "str" else c.size)
                for c, _ in caps if c.head >= 0), default=0)
