"""One DWARF location, read at a function's first instruction, as pieces btfgen can compare.

A location is a register (`DW_OP_reg*`, `regx`), memory at the entry SP plus an offset
(`breg*`/`bregx` of the SP, `fbreg` over a frame base that is the CFA or the SP), memory a register
points to (`breg*` of another register: the value passed by reference), or pieces of those
(`DW_OP_piece`). The CFA at entry comes from the arch description (`dwarf cfa N`), as do the
register numbers; nothing here knows an arch.

What is not an entry location says why: a constant the compiler propagated from its callers, a
piece the compiler dropped, an operation this reader does not follow.
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.abi.convention import DwarfFacts

_REG_OPS = {f"DW_OP_reg{i}": i for i in range(32)}
_BREG_OPS = {f"DW_OP_breg{i}": i for i in range(32)}
_CONSTANT_OPS = frozenset({
    "DW_OP_lit%d" % i for i in range(32)} | {
    "DW_OP_const1u", "DW_OP_const1s", "DW_OP_const2u", "DW_OP_const2s", "DW_OP_const4u",
    "DW_OP_const4s", "DW_OP_const8u", "DW_OP_const8s", "DW_OP_constu", "DW_OP_consts",
    "DW_OP_implicit_value", "DW_OP_addr",
})
_ENTRY_VALUE_OPS = frozenset({"DW_OP_entry_value", "DW_OP_GNU_entry_value"})


@dataclass(frozen=True, slots=True)
class DwPiece:
    """Value bytes [value_offset, value_offset + size) are in register `reg` (its low bytes), or
    in memory at entry SP + `stack`."""

    reg: str | None
    stack: int | None
    value_offset: int
    size: int

    def describe(self) -> str:
        where = self.reg if self.reg is not None else f"sp+{self.stack}"
        return f"{where}[{self.value_offset}:{self.value_offset + self.size}]"


@dataclass(frozen=True, slots=True)
class EntryLocation:
    """Where a parameter is at entry. With `by_ref`, `pieces` locate a pointer to the value.
    `unknown` (pieces empty) says why DWARF gives no entry location."""

    pieces: tuple[DwPiece, ...] = ()
    by_ref: bool = False
    unknown: str | None = None

    def describe(self) -> str:
        if self.unknown:
            return f"unknown ({self.unknown})"
        text = " ".join(p.describe() for p in self.pieces)
        return f"*({text})" if self.by_ref else text


@dataclass(frozen=True, slots=True)
class FrameBase:
    """A function's DW_AT_frame_base at its entry: entry SP + `sp_offset`, or unknown."""

    sp_offset: int | None
    unknown: str | None = None
    # True when the base is the SP register itself (clang): it moves with the prologue.
    moves: bool = False


def reg_name(facts: DwarfFacts, number: int) -> str:
    """The register's name in the description; `dwarf#N` for one it does not name (a register
    no argument travels in, so never equal to a placement)."""
    return facts.regs.get(number, f"dwarf#{number}")


def frame_base(ops, facts: DwarfFacts) -> FrameBase:
    """The frame base from its parsed expression (operations with .op_name and .args)."""
    if len(ops) == 1:
        op = ops[0]
        if op.op_name == "DW_OP_call_frame_cfa":
            return FrameBase(facts.cfa)
        reg, offset = _breg(op)
        if reg is not None and reg == facts.sp:
            return FrameBase(offset, moves=True)
        number = _reg(op)
        if number is not None and number == facts.sp:
            return FrameBase(0, moves=True)
        if number is not None or reg is not None:
            which = number if number is not None else reg
            return FrameBase(None, f"frame base is {reg_name(facts, which)}, unknown at entry")
    names = " ".join(op.op_name for op in ops)
    return FrameBase(None, f"frame base {names or 'empty'}")


def entry_location(ops, size: int, facts: DwarfFacts, base: FrameBase,
                   pointer_size: int, whole: bool = False) -> EntryLocation:
    """The location a parsed expression gives for a value of `size` bytes. `whole`: the
    expression holds for the whole function (not a location list entry at the entry PC)."""
    if whole and _sp_relative(ops, facts, base):
        # Relative to the SP as it is in the body: the prologue has moved it since entry.
        return EntryLocation(unknown="SP-relative for the whole function (valid once the "
                             "prologue has moved the SP)")
    pieces: list[DwPiece] = []
    current: list = []
    value_offset = 0
    by_ref = False
    for op in ops:
        if op.op_name in ("DW_OP_piece", "DW_OP_bit_piece"):
            if op.op_name == "DW_OP_bit_piece":
                return EntryLocation(unknown="bit pieces")
            piece_size = op.args[0]
            if not current:
                return EntryLocation(unknown=f"bytes {value_offset}-"
                                     f"{value_offset + piece_size} are optimized out")
            loc = _single(current, piece_size, value_offset, facts, base, pointer_size)
            if isinstance(loc, str):
                return EntryLocation(unknown=loc)
            piece, ref = loc
            if ref:
                return EntryLocation(unknown="a piece passed by reference")
            pieces.append(piece)
            value_offset += piece_size
            current = []
        else:
            current.append(op)
    if current:
        if pieces:
            return EntryLocation(unknown="operations after the last piece")
        loc = _single(current, size, 0, facts, base, pointer_size)
        if isinstance(loc, str):
            return EntryLocation(unknown=loc)
        piece, by_ref = loc
        pieces.append(piece)
    if not pieces:
        return EntryLocation(unknown="empty location")
    return EntryLocation(tuple(pieces), by_ref)


def _single(ops, size: int, value_offset: int, facts: DwarfFacts, base: FrameBase,
            pointer_size: int) -> tuple[DwPiece, bool] | str:
    """One simple location: (piece, by_ref) or the reason it is not an entry location."""
    first = ops[0]
    names = [op.op_name for op in ops]
    if any(n in _CONSTANT_OPS for n in names) and "DW_OP_stack_value" in names:
        return "a constant (propagated from the callers)"
    if first.op_name in _ENTRY_VALUE_OPS and names[1:] == ["DW_OP_stack_value"]:
        # The value the register had at entry: at the first instruction, the register itself.
        inner = first.args[0] if first.args else []
        if len(inner) == 1 and _reg(inner[0]) is not None:
            return DwPiece(reg_name(facts, _reg(inner[0])), None, value_offset, size), False
        return "an entry value of something other than a register"
    if first.op_name in ("DW_OP_implicit_pointer", "DW_OP_GNU_implicit_pointer"):
        return "an implicit pointer"
    number = _reg(first)
    if number is not None and len(ops) == 1:
        return DwPiece(reg_name(facts, number), None, value_offset, size), False
    reg, offset = _breg(first)
    if first.op_name == "DW_OP_fbreg":
        if base.sp_offset is None:
            return base.unknown or "frame base unknown"
        reg, offset = facts.sp, base.sp_offset + first.args[0]
    if reg is None:
        return f"location {' '.join(names)}"
    rest = names[1:]
    if reg == facts.sp:
        if not rest:
            return DwPiece(None, offset, value_offset, size), False
        if rest == ["DW_OP_deref"]:
            # The stack slot holds the value's address.
            return DwPiece(None, offset, 0, pointer_size), True
        return f"location {' '.join(names)}"
    if not rest and offset == 0:
        # The value is in memory a register points to: passed by reference.
        return DwPiece(reg_name(facts, reg), None, 0, pointer_size), True
    return f"memory at {reg_name(facts, reg)}{offset:+d}"


def _sp_relative(ops, facts: DwarfFacts, base: FrameBase) -> bool:
    for op in ops:
        if op.op_name == "DW_OP_fbreg" and base.moves:
            return True
        reg, _ = _breg(op)
        if reg is not None and reg == facts.sp:
            return True
    return False


def _reg(op) -> int | None:
    if op.op_name in _REG_OPS:
        return _REG_OPS[op.op_name]
    if op.op_name == "DW_OP_regx":
        return op.args[0]
    return None


def _breg(op) -> tuple[int | None, int]:
    if op.op_name in _BREG_OPS:
        return _BREG_OPS[op.op_name], op.args[0]
    if op.op_name == "DW_OP_bregx":
        return op.args[0], op.args[1]
    return None, 0
