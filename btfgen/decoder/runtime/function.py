"""Function: one function's decoders, from the ctx and stack images taken at entry and exit
or from a generic BPF record."""

from __future__ import annotations

import struct

from .captures import capture_reader, captures_end
from .descriptors import FastPath, FunctionDesc, ValueDesc
from .readers import TEXT_READERS, reader
from .records import CAPTURE_HEADS, CARRY_MISSING, RECORD_HEADER_SIZE, RECORD_HEADERS, DecodeError
from .values import Unavailable, Unread


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
    """One function's decoders, built from its descriptor (a FunctionDesc, or the same as plain
    tuples: checked and rebuilt)."""

    __slots__ = ("desc", "name", "btf_id", "order", "pointer_size", "args", "ret", "names",
                 "entry", "captures", "_values", "_ret", "_plans", "_needs", "_captures",
                 "_record_fast", "_capture_reads")

    def __init__(self, desc: tuple):
        d = self.desc = FunctionDesc.check(desc)
        self.name, self.btf_id, self.order, self.pointer_size = (d.name, d.btf_id, d.byte_order,
                                                                 d.pointer_size)
        self.args, self.ret = d.args, d.ret
        self.names = tuple(a.name for a in d.args)
        # Hot paths unpack plain tuples made here: the descriptors are read once, by name.
        memo: dict = {}
        self._values = tuple(self._compiled(v, memo) for v in d.args)
        self._ret = None if d.ret is None else (self._compiled(d.ret.value, memo),
                                                 d.ret.needs_entry)
        rets = () if d.ret is None else (d.ret.value,)
        self._plans = (tuple(zip(self._values, d.record.entry)),
                       tuple(zip(self._ret[:1] if self._ret else (), d.record.exit)))
        # The record bytes each kind's plans read: a shorter record is refused, never misread.
        self.captures = d.captures
        text_memo: dict = {}
        self._captures = tuple(
            tuple((c, reader(c.type, self.order, text_memo, TEXT_READERS))
                  for c in d.captures if c.at_exit == bool(kind)) for kind in (0, 1))
        self._needs = tuple(max(_record_end(values, plans, d.pointer_size),
                                captures_end(self._captures[kind]))
                            for kind, (values, plans) in enumerate(((d.args, d.record.entry),
                                                                    (rets, d.record.exit))))
        if d.record.sizes is not None and any(n < need for n, need in zip(d.record.sizes,
                                                                           self._needs)):
            raise DecodeError(f"{self.name}: records of {d.record.sizes} data bytes (entry, "
                              f"exit), its values need {self._needs}")
        self.entry = self._fast_entry(d.fast) if d.fast is not None else self.decode_entry
        head = CAPTURE_HEADS[self.order]
        self._capture_reads = tuple(tuple((c.name, capture_reader(c, read, head, self.order))
                                          for c, read in caps) for caps in self._captures)
        self._record_fast = tuple(_record_struct(values, plans, self.order)
                                  for values, plans in ((d.args, d.record.entry),
                                                        (rets, d.record.exit)))

    def _compiled(self, v: ValueDesc, memo: dict) -> tuple:
        return (v.name, reader(v.type, self.order, memo), v.size, v.pieces, v.by_ref,
                v.unavailable)

    def __repr__(self) -> str:
        ret = "void" if self.ret is None else "returns"
        return f"<Function {self.name} btf_id={self.btf_id} {len(self.args)} args, {ret}>"

    def _fast_entry(self, fast: FastPath):
        """Every argument a whole scalar in one register: one precompiled struct read."""
        unpack = struct.Struct(fast.format).unpack_from
        perm = fast.perm
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
        fast = self.desc.fast
        if fast is not None:
            size = struct.calcsize(fast.format)
            if size <= stride:
                it = struct.Struct(f"{fast.format}{stride - size}x").iter_unpack(view[:usable])
                perm = fast.perm
                if perm is None:
                    return it
                from operator import itemgetter

                return map(itemgetter(slice(None, None, -1)) if perm == tuple(
                    range(len(perm) - 1, -1, -1)) else itemgetter(*perm), it)
        return (self.decode_entry(view[i : i + stride]) for i in range(0, usable, stride))

    def _value(self, value: tuple, ctx, stack, read_memory):
        name, read, size, pieces, by_ref, unavailable = value
        if unavailable is not None:
            return Unavailable(unavailable)
        if not by_ref:
            return read(gather(pieces, size, ctx, stack), 0)
        address = int.from_bytes(gather(pieces, self.pointer_size, ctx, stack), self.order)
        if read_memory is None:
            return Unread(address)
        return read(self._memory(read_memory, address, size, name), 0)

    def _memory(self, read_memory, address: int, size: int, name: str):
        data = read_memory(address, size)
        if len(data) < size:
            raise DecodeError(f"{self.name}: {name}: read_memory returned {len(data)} of "
                              f"{size} bytes")
        return data

    def decode_entry(self, ctx, stack=b"", read_memory=None) -> tuple:
        """Argument values, in order, from the ctx and stack images taken at function entry."""
        return tuple(self._value(a, ctx, stack, read_memory) for a in self._values)

    def decode_exit(self, ctx, stack=b"", read_memory=None, saved_entry=None):
        """The return value from the ctx at function exit (None for void). A struct returned
        through a hidden pointer is read through `saved_entry` (the ctx bytes at entry) when the
        ABI does not hand the pointer back."""
        if self._ret is None:
            return None
        value, needs_entry = self._ret
        if needs_entry:
            if saved_entry is None:
                return Unavailable("return pointer needs the ctx saved at entry")
            ctx, stack = saved_entry
        return self._value(value, ctx, stack, read_memory)

    def decode_record(self, record, read_memory=None):
        """Values from a generic BPF record (`btfgen_record`): a tuple of arguments for an entry
        record, the return value for an exit record."""
        btf_id, kind, failed = RECORD_HEADERS[self.order].unpack_from(record)
        if kind > 1:
            raise DecodeError(f"{self.name}: a record of kind {kind}")
        fast = self._record_fast[kind]
        if fast is not None and not failed & fast[1] and len(record) >= fast[2]:
            out = fast[0](record, RECORD_HEADER_SIZE)
            return out if kind == 0 else out[0]
        data = memoryview(record)[RECORD_HEADER_SIZE:]
        if len(data) < self._needs[kind]:
            raise DecodeError(f"{self.name}: a record of {len(data)} data bytes, its values "
                              f"need {self._needs[kind]}")
        out = [self._record_value(value, plan, data, failed, read_memory)
               for value, plan in self._plans[kind]]
        return tuple(out) if kind == 0 else (out[0] if out else None)

    def _record_value(self, value, plan, data, failed, read_memory):
        name, read, size, _pieces, by_ref, unavailable = value
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
            return read(self._memory(read_memory, address, size, name), 0)
        return read(data, data_off)

    def as_dict(self, values: tuple) -> dict:
        return dict(zip(self.names, values))

    def decode_captures(self, record) -> dict:
        """The captures a generic BPF record holds (an entry's or an exit's), by name: a
        CapturedString, a value, or Unavailable saying which pointer was NULL or faulted."""
        btf_id, kind, failed = RECORD_HEADERS[self.order].unpack_from(record)
        if kind > 1:
            raise DecodeError(f"{self.name}: a record of kind {kind}")
        caps = self._capture_reads[kind]
        if not caps:
            return {}
        data = memoryview(record)[RECORD_HEADER_SIZE:]
        if len(data) < self._needs[kind]:
            raise DecodeError(f"{self.name}: a record of {len(data)} data bytes, its values "
                              f"need {self._needs[kind]}")
        return {name: read(data, failed) for name, read in caps}


_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}


def _record_struct(values: tuple, plans: tuple, order: str):
    """(unpack_from, the ops' failed bits, the record bytes it needs) when every value of a
    record kind is a whole integer or pointer at its own place in the record: one precompiled
    read for all of them, as a register-only entry has. None: decoded value by value."""
    if not values or len(plans) != len(values):
        return None
    fmt, at, mask = ["<" if order == "little" else ">"], 0, 0
    for v, plan in zip(values, plans):
        t = v.type
        code = _INT_CODES.get(t.size) if t.tag in ("int", "ptr") else None
        if (code is None or plan is None or v.unavailable is not None or v.by_ref
                or plan.data_off < at):
            return None
        signed = t.tag == "int" and t.signed
        fmt.append(f"{plan.data_off - at}x{code if signed else code.upper()}")
        at = plan.data_off + t.size
        mask |= plan.op_mask
    unpack = struct.Struct("".join(fmt)).unpack_from
    return unpack, mask, RECORD_HEADER_SIZE + at



def _record_end(values: tuple, plans: tuple, pointer_size: int) -> int:
    """The furthest record data byte the plans of `values` read."""
    end = 0
    for v, plan in zip(values, plans):
        if plan is not None and v.unavailable is None:
            end = max(end, plan.data_off + v.size if plan.data_off >= 0 else
                      plan.ptr_off + pointer_size)
    return end
