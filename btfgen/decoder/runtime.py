"""Turn trace-ctx bytes, stack bytes or a generic BPF record into typed Python values.

Standard library only: generated modules embed this file's source verbatim so they import without
btfgen installed. Everything it needs about a function comes as plain tuples (descriptors, made by
`btfgen.decoder.describe`), which a generated module spells as Python literals.

Descriptors
- type: ("int", size, signed) | ("bool", size) | ("enum", size, signed, names) | ("ptr", size)
  | ("float", size) | ("chars", n) | ("array", n, elem_size, elem) | ("struct"|"union", size,
  members) | ("bytes", size); `names` maps value -> enumerator name; a member is (name,
  bit_offset, bit_size, type) with bit_size 0 for an ordinary member.
- value: (name, type, size, pieces, by_ref, unavailable); a piece is (where, src, size, dst):
  bytes [src, src + size) of the ctx (where 0) or of the stack from the entry SP (where 1) are
  value bytes [dst, dst + size). For a by_ref value the pieces make the pointer.
- function: (name, btf_id, byte_order, pointer_size, args, ret, fast, record) where `fast` is a
  struct format reading every argument straight from the ctx (or None) with the argument order
  `perm`, and `record` tells where each value sits in a generic BPF record.
"""

from __future__ import annotations

import struct

__all__ = ["Enumerator", "Unavailable", "Unread", "DecodeError", "Function", "RECORD_HEADERS",
           "RECORD_HEADER_SIZE"]

# The generic BPF record: u32 btf_id, u32 kind (0 entry, 1 exit), u64 failed-op mask, then data.
# struct btfgen_record's header (u32 btf_id, u32 kind, u64 failed) as the target wrote it: in the
# target's byte order, whatever the machine decoding it.
RECORD_HEADERS = {"little": struct.Struct("<IIQ"), "big": struct.Struct(">IIQ")}
RECORD_HEADER_SIZE = 16
# The failed-mask bit of an exit whose carried return pointer was not kept (generic.py's
# CARRY_MISSING_BIT; this module is copied into generated code, so it imports nothing of btfgen).
CARRY_MISSING = 1 << 63


class DecodeError(ValueError):
    pass


class Enumerator(int):
    """An enum value: compares and computes as its number; `name` is its enumerator or None."""

    def __new__(cls, value: int, name: str | None):
        self = int.__new__(cls, value)
        self.name = name
        return self

    def __repr__(self) -> str:
        return f"{self.name}({int(self)})" if self.name else f"<enum {int(self)}>"

    def __reduce__(self):
        return (Enumerator, (int(self), self.name))


class Unavailable:
    """A value the trace ctx does not hold (e.g. a float in an FP register)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unavailable({self.reason!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Unavailable) and other.reason == self.reason

    __hash__ = None  # type: ignore[assignment]


class Unread:
    """A by-reference value whose memory was not read (no `read_memory` given)."""

    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def __repr__(self) -> str:
        return f"Unread(0x{self.address:x})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Unread) and other.address == self.address

    __hash__ = None  # type: ignore[assignment]


def convert(desc: tuple, data, offset: int, order: str):
    """The value of type `desc` held in `data[offset:]` (target byte order `order`)."""
    tag = desc[0]
    if tag == "int":
        return int.from_bytes(data[offset : offset + desc[1]], order, signed=desc[2])
    if tag == "ptr":
        return int.from_bytes(data[offset : offset + desc[1]], order)
    if tag == "bool":
        return any(data[offset : offset + desc[1]])
    if tag == "enum":
        value = int.from_bytes(data[offset : offset + desc[1]], order, signed=desc[2])
        return Enumerator(value, desc[3].get(value))
    if tag == "chars":
        return bytes(data[offset : offset + desc[1]])
    if tag == "array":
        n, elem_size, elem = desc[1], desc[2], desc[3]
        return [convert(elem, data, offset + i * elem_size, order) for i in range(n)]
    if tag in ("struct", "union"):
        return _composite(desc, data, offset, order)
    if tag == "float":
        fmt = {2: "e", 4: "f", 8: "d"}.get(desc[1])
        if fmt is None:  # long double: keep the bytes
            return bytes(data[offset : offset + desc[1]])
        return struct.unpack_from(("<" if order == "little" else ">") + fmt, data, offset)[0]
    return bytes(data[offset : offset + desc[1]])


def _composite(desc: tuple, data, offset: int, order: str) -> dict:
    size, members = desc[1], desc[2]
    out = {}
    whole = None
    for name, bit_offset, bit_size, mdesc in members:
        if not bit_size:
            out[name] = convert(mdesc, data, offset + bit_offset // 8, order)
            continue
        if whole is None:
            whole = int.from_bytes(data[offset : offset + size], order)
        # BTF numbers bits from the lowest address: the least significant bit on a
        # little-endian target, the most significant on a big-endian one.
        shift = bit_offset if order == "little" else size * 8 - bit_offset - bit_size
        raw = (whole >> shift) & ((1 << bit_size) - 1)
        tag = mdesc[0]
        if tag in ("int", "enum") and mdesc[2] and raw >> (bit_size - 1):
            raw -= 1 << bit_size
        if tag == "enum":
            out[name] = Enumerator(raw, mdesc[3].get(raw))
        elif tag == "bool":
            out[name] = bool(raw)
        else:
            out[name] = raw
    return out


def gather(pieces: tuple, size: int, ctx, stack):
    """The value bytes the pieces describe, assembled from the ctx and stack images."""
    buf = bytearray(size)
    for where, src, n, dst in pieces:
        chunk = (stack if where else ctx)[src : src + n]
        if len(chunk) != n:
            what = "stack" if where else "ctx"
            raise DecodeError(f"{what} image too short: needs bytes [{src}, {src + n})")
        buf[dst : dst + n] = chunk
    return buf


class Function:
    """One function's decoders, built from its descriptor."""

    __slots__ = ("name", "btf_id", "order", "pointer_size", "args", "ret", "names", "entry",
                 "_record", "_fast")

    def __init__(self, desc: tuple):
        name, btf_id, order, psize, args, ret, fast, record = desc
        self.name, self.btf_id, self.order, self.pointer_size = name, btf_id, order, psize
        self.args, self.ret, self._record = args, ret, record
        self.names = tuple(a[0] for a in args)
        self._fast = fast
        self.entry = self._fast_entry(fast) if fast is not None else self.decode_entry

    def _fast_entry(self, fast: tuple):
        """Every argument a whole scalar in one register: one precompiled struct read."""
        fmt, perm = fast
        unpack = struct.Struct(fmt).unpack_from
        if perm is None:

            def entry(ctx, stack=b"", read_memory=None, _u=unpack):
                return _u(ctx)

        elif perm == tuple(range(len(perm) - 1, -1, -1)):
            # Argument registers at falling ctx offsets (x86_64 pt_regs): a reversal.

            def entry(ctx, stack=b"", read_memory=None, _u=unpack):
                return _u(ctx)[::-1]

        else:
            from operator import itemgetter

            pick = itemgetter(*perm)

            def entry(ctx, stack=b"", read_memory=None, _u=unpack, _p=pick):
                return _p(_u(ctx))

        return entry

    def entries(self, buffer, stride: int, offset: int = 0):
        """Entry values of many records laid end to end every `stride` bytes (a ring buffer's
        fixed-size ctx copies), as an iterator of tuples. Register-only scalar functions decode
        in one pass of `struct.iter_unpack`, without a Python call per record."""
        view = memoryview(buffer)[offset:]
        usable = len(view) - len(view) % stride
        if self._fast is not None:
            fmt, perm = self._fast
            size = struct.calcsize(fmt)
            if size <= stride:
                it = struct.Struct(f"{fmt}{stride - size}x").iter_unpack(view[:usable])
                if perm is None:
                    return it
                from operator import itemgetter

                return map(itemgetter(slice(None, None, -1)) if perm == tuple(
                    range(len(perm) - 1, -1, -1)) else itemgetter(*perm), it)
        return (self.decode_entry(view[i : i + stride]) for i in range(0, usable, stride))

    def _value(self, vdesc: tuple, ctx, stack, read_memory):
        name, tdesc, size, pieces, by_ref, unavailable = vdesc
        if unavailable is not None:
            return Unavailable(unavailable)
        if not by_ref:
            return convert(tdesc, gather(pieces, size, ctx, stack), 0, self.order)
        address = int.from_bytes(gather(pieces, self.pointer_size, ctx, stack), self.order)
        if read_memory is None:
            return Unread(address)
        data = read_memory(address, size)
        if len(data) < size:
            raise DecodeError(f"{self.name}: {name}: read_memory returned {len(data)} of "
                              f"{size} bytes")
        return convert(tdesc, data, 0, self.order)

    def decode_entry(self, ctx, stack=b"", read_memory=None) -> tuple:
        """Argument values, in order, from the ctx and stack images taken at function entry."""
        return tuple(self._value(a, ctx, stack, read_memory) for a in self.args)

    def decode_exit(self, ctx, stack=b"", read_memory=None, saved_entry=None):
        """The return value from the ctx at function exit (None for void). A struct returned
        through a hidden pointer is read through `saved_entry` (the ctx bytes at entry) when the
        ABI does not hand the pointer back."""
        if self.ret is None:
            return None
        vdesc, needs_entry = self.ret
        if needs_entry:
            if saved_entry is None:
                return Unavailable("return pointer needs the ctx saved at entry")
            ctx, stack = saved_entry
        return self._value(vdesc, ctx, stack, read_memory)

    def decode_record(self, record, read_memory=None):
        """Values from a generic BPF record (`btfgen_record`): a tuple of arguments for an entry
        record, the return value for an exit record."""
        btf_id, kind, failed = RECORD_HEADERS[self.order].unpack_from(record)
        data = memoryview(record)[RECORD_HEADER_SIZE:]
        plans = self._record[kind]
        values = self.args if kind == 0 else ((self.ret[0],) if self.ret else ())
        out = []
        for vdesc, plan in zip(values, plans):
            out.append(self._record_value(vdesc, plan, data, failed, read_memory))
        return tuple(out) if kind == 0 else (out[0] if out else None)

    def _record_value(self, vdesc, plan, data, failed, read_memory):
        name, tdesc, size, _, by_ref, unavailable = vdesc
        if unavailable is not None:
            return Unavailable(unavailable)
        if plan is None:
            return Unavailable("not in the generic record")
        data_off, ptr_off, op_mask = plan
        if failed & op_mask:
            if failed & op_mask & CARRY_MISSING:
                return Unavailable("the return pointer was not kept from the entry")
            return Unavailable("the BPF read failed")
        if by_ref and data_off < 0:
            address = int.from_bytes(data[ptr_off : ptr_off + self.pointer_size], self.order)
            if read_memory is None:
                return Unread(address)
            return convert(tdesc, read_memory(address, size), 0, self.order)
        return convert(tdesc, data, data_off, self.order)

    def as_dict(self, values: tuple) -> dict:
        return dict(zip(self.names, values))
