"""Readers: a type descriptor turned once into a function of (bytes, offset) -> its value."""

from __future__ import annotations

import struct

from .descriptors import TYPES, check_type
from .values import Enumerator


def reader(t: tuple, order: str, memo: dict | None = None, readers: dict | None = None):
    """A function (data, offset) -> the value of type `t` held in `data[offset:]`, target byte
    order `order`; the descriptor is read here, once, not per value. `readers`: the reader
    makers by tag (TEXT_READERS: char arrays as text), the same for a whole memo."""
    memo = {} if memo is None else memo
    hit = memo.get(id(t))
    if hit is None:
        makers = memo.setdefault("readers", readers or _READERS)
        hit = memo[id(t)] = (makers[t.tag](t, order, memo), t)  # t: keeps id(t) unique
    return hit[0]


def convert(t: tuple, data, offset: int, order: str):
    """The value of type `t` held in `data[offset:]` (target byte order `order`)."""
    return reader(check_type(t), order)(data, offset)


def _read_int(t, order, memo):
    size, signed = t.size, t.signed
    return lambda data, at, _f=int.from_bytes: _f(data[at:at + size], order, signed=signed)


def _read_ptr(t, order, memo):
    size = t.size
    return lambda data, at, _f=int.from_bytes: _f(data[at:at + size], order)


def _read_bool(t, order, memo):
    size = t.size
    return lambda data, at: any(data[at:at + size])


def _read_enum(t, order, memo):
    size, signed, names = t.size, t.signed, t.names

    def read(data, at):
        value = int.from_bytes(data[at:at + size], order, signed=signed)
        return Enumerator(value, names.get(value))

    return read


def _read_bytes(t, order, memo):
    size = t.size
    return lambda data, at: bytes(data[at:at + size])


def _read_float(t, order, memo):
    fmt = {2: "e", 4: "f", 8: "d"}.get(t.size)
    if fmt is None:  # long double: keep the bytes
        return _read_bytes(t, order, memo)
    unpack = struct.Struct(("<" if order == "little" else ">") + fmt).unpack_from
    return lambda data, at: unpack(data, at)[0]


def _read_array(t, order, memo):
    n, step, elem = t.n, t.elem_size, reader(t.elem, order, memo)
    return lambda data, at: [elem(data, at + i * step) for i in range(n)]


def _read_composite(t, order, memo):
    size, members = t.size, []
    for m in t.members:
        if not m.bit_size:
            members.append((m.name, reader(m.type, order, memo), m.bit_offset // 8))
            continue
        # BTF numbers bits from the lowest address: the least significant bit on a
        # little-endian target, the most significant on a big-endian one.
        shift = m.bit_offset if order == "little" else size * 8 - m.bit_offset - m.bit_size
        sign = 1 << (m.bit_size - 1) if m.type.tag != "bool" and m.type.signed else 0
        names = m.type.names if m.type.tag == "enum" else None
        members.append((m.name, None, (shift, (1 << m.bit_size) - 1, sign, names,
                                       m.type.tag == "bool")))

    def read(data, at):
        out = {}
        whole = None
        for name, read_member, where in members:
            if read_member is not None:
                out[name] = read_member(data, at + where)
                continue
            if whole is None:
                whole = int.from_bytes(data[at:at + size], order)
            shift, mask, sign, names, is_bool = where
            raw = (whole >> shift) & mask
            if raw & sign:
                raw -= sign << 1
            out[name] = bool(raw) if is_bool else raw if names is None else \
                Enumerator(raw, names.get(raw))
        return out

    return read


_READERS = {"int": _read_int, "ptr": _read_ptr, "bool": _read_bool, "enum": _read_enum,
            "chars": _read_bytes, "bytes": _read_bytes, "float": _read_float,
            "array": _read_array, "struct": _read_composite, "union": _read_composite}
assert set(_READERS) == set(TYPES)


def text_of(raw) -> str:
    """A C string's bytes (up to its NUL) as text; bytes that are not UTF-8 as \\x escapes."""
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", errors="backslashreplace")


def _read_chars_text(t, order, memo):
    size = t.size
    return lambda data, at: text_of(data[at:at + size])


# Captured pointees: a char array is a string there (a name, a path), as the user reads it.
TEXT_READERS = dict(_READERS, chars=_read_chars_text)
