"""The generic decoder's plan for one function: a short list of copy operations and where each
value lands in the record.

One bounded BPF routine runs these operations for every function (the table-driven decoder for
mass attach, after libbpf's USDT argument specs); user space decodes the record with the same
plan. Each operation copies `size` bytes into the record's data at `dst` from the ctx (`src` is a
ctx offset), from the stack (`src` is an offset from the entry SP), or through a pointer the
record already holds (`src` is the pointer's data offset).
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.layout import FunctionLayout, RegPiece, ValueLayout

FROM_CTX, FROM_STACK, FROM_PTR = 0, 1, 2
MAX_OPS = 32  # per function, entry and exit together: a power of two (the BPF side masks)
DATA_SIZE = 1024  # record data bytes; an op's dst and size are both below DATA_SIZE // 2
OP_LIMIT = DATA_SIZE // 2


@dataclass(frozen=True, slots=True)
class Op:
    source: int  # FROM_CTX | FROM_STACK | FROM_PTR
    src: int
    dst: int
    size: int


@dataclass(frozen=True, slots=True)
class ValuePlan:
    data_off: int  # where the value's bytes are; -1: only its pointer is in the record
    ptr_off: int  # by_ref: where the pointer is; else -1
    op_mask: int  # the ops (bit i = op i) that must succeed for the value to be good


@dataclass(frozen=True, slots=True)
class GenericPlan:
    entry_ops: tuple[Op, ...]
    exit_ops: tuple[Op, ...]
    entry: tuple[ValuePlan | None, ...]  # per argument (None: not in the record)
    exit: tuple[ValuePlan | None, ...]  # the return value, if any
    skipped: tuple[str, ...]  # why values were left out


def piece_source(piece, byte_order: str) -> tuple[int, int]:
    """(source, src): where a piece's bytes are. A register piece is the least significant
    `size` bytes of its field: the field's high addresses on a big-endian target."""
    if isinstance(piece, RegPiece):
        skip = piece.reg_size - piece.size if byte_order == "big" else 0
        return FROM_CTX, piece.ctx_offset + skip
    return FROM_STACK, piece.stack


def _align8(n: int) -> int:
    return (n + 7) & ~7


class _Builder:
    def __init__(self, byte_order: str, pointer_size: int, first_op: int):
        self.order, self.psize = byte_order, pointer_size
        self.ops: list[Op] = []
        self.first = first_op
        self.cursor = 0
        self.skipped: list[str] = []

    def value(self, v: ValueLayout, what: str) -> ValuePlan | None:
        if v.unavailable is not None:
            return None
        target_len = self.psize if v.by_ref else v.size
        budget = MAX_OPS - self.first - len(self.ops)
        needed = len(v.pieces) + (1 if v.by_ref else 0)
        if len(v.pieces) > budget or target_len >= OP_LIMIT:
            self.skipped.append(f"{what}: too large for the generic record")
            return None
        start = self.cursor
        if start + target_len > OP_LIMIT:
            self.skipped.append(f"{what}: record full")
            return None
        mask = 0
        for p in v.pieces:
            source, src = piece_source(p, self.order)
            mask |= 1 << (self.first + len(self.ops))
            self.ops.append(Op(source, src, start + p.value_offset, p.size))
        self.cursor = _align8(start + target_len)
        if not v.by_ref:
            return ValuePlan(start, -1, mask)
        dst = self.cursor
        if needed > budget or v.size >= OP_LIMIT or dst + v.size > DATA_SIZE or dst >= OP_LIMIT:
            self.skipped.append(f"{what}: by-reference value too large, pointer only")
            return ValuePlan(-1, start, mask)
        mask |= 1 << (self.first + len(self.ops))
        self.ops.append(Op(FROM_PTR, start, dst, v.size))
        self.cursor = _align8(dst + v.size)
        return ValuePlan(dst, start, mask)


def plan(f: FunctionLayout, byte_order: str, pointer_size: int) -> GenericPlan:
    b = _Builder(byte_order, pointer_size, 0)
    entry = tuple(b.value(a, f"argument {i}") for i, a in enumerate(f.args))
    x = _Builder(byte_order, pointer_size, len(b.ops))
    exit_ = ()
    if f.ret is not None:
        if f.ret.by_ref and not f.ret.at_exit:
            x.skipped.append("return value: its pointer is only known at entry")
            exit_ = (None,)
        else:
            exit_ = (x.value(f.ret, "return value"),)
    return GenericPlan(tuple(b.ops), tuple(x.ops), entry, exit_, tuple(b.skipped + x.skipped))
