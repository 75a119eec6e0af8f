"""Put the compiler's word into a layout: where a function's compiled convention differs from
its prototype (DWARF disagrees with the arch description), its parameters are placed where DWARF
says they are at entry, or marked unavailable with the reason; never left silently wrong.

Every value of the corrected layout says which source placed it ("abi" or "dwarf"). The return
value stays the description's: DWARF says nothing about where a value is returned. How many
functions DWARF could be checked against is counted too: a function whose DWARF definition is
not tied to its symbol keeps the description's placement unchecked, and where that is most of
them the caller says so (MOSTLY_UNCHECKED).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from btfgen.abi.convention import Convention
from btfgen.layout import (
    ArchLayout,
    CtxRegister,
    FunctionLayout,
    ProtoLayout,
    RegPiece,
    StackPiece,
    ValueLayout,
)

from .compare import AGREE, DISAGREE, Coverage, FunctionVerdict, compare_function, coverage_of
from .reader import DwarfFile, DwarfFunction, DwarfParam


# Below this percentage of the functions with parameters checked against DWARF, the correction
# mostly did not happen (DWARF not tied to the symbols): worth a warning.
MOSTLY_UNCHECKED = 50.0


@dataclass(frozen=True, slots=True)
class Correction:
    name: str
    verdict: FunctionVerdict  # the disagreement that made DWARF place the function


class Corrected(NamedTuple):
    layout: ArchLayout
    corrections: list[Correction]
    coverage: Coverage  # the functions checked against DWARF, of those with parameters

    def warning(self, path: str) -> str | None:
        """What to tell the user when DWARF could not be checked for most functions."""
        if not self.coverage.below(MOSTLY_UNCHECKED):
            return None
        return (f"DWARF ({path}) checked {self.coverage.describe()}: the others are placed "
                f"from their prototype alone, unchecked (`btfgen check` says why)")


def read_dwarf(path: str, conv: Convention, names: set[str] | None,
               on_unit=None) -> dict[str, list]:
    """DWARF definitions by name (with `names`, only the compile units that hold them);
    `on_unit(done, size)` after each unit, in bytes of .debug_info."""
    found: dict[str, list[DwarfFunction]] = {}
    with DwarfFile(path, conv) as dwarf:
        dwarf.on_unit = on_unit
        for fn in dwarf.functions(names):
            if names is None or fn.name in names:
                found.setdefault(fn.name, []).append(fn)
    return found


def correct_layout(layout: ArchLayout, dwarf_path: str, conv: Convention,
                   selected: bool = True) -> tuple[ArchLayout, list[Correction]]:
    """`layout` with DWARF's placement for every function that disagrees with it. `selected`:
    the layout holds named functions (read only their compile units), not the whole file."""
    corrected = correct(layout, dwarf_path, conv, selected)
    return corrected.layout, corrected.corrections


def correct(layout: ArchLayout, dwarf_path: str, conv: Convention,
            selected: bool = True) -> Corrected:
    """correct_layout, with how many functions DWARF was checked against."""
    names = {f.name for f in layout.functions}
    found = read_dwarf(dwarf_path, conv, names if selected else None)
    regs = {r.hwreg: r for r in layout.ctx.registers}
    marked: dict[ProtoLayout, ProtoLayout] = {}  # keep one object per prototype
    functions = []
    corrections = []
    verdicts: dict[str, FunctionVerdict] = {}
    for f in layout.functions:
        verdict = compare_function(f, found.get(f.name, []), conv)
        verdicts.setdefault(f.name, verdict)
        if verdict.verdict == DISAGREE:
            fn = next(d for d in found[f.name] if d.address == verdict.address)
            functions.append(_from_dwarf(f, fn, verdict, regs))
            corrections.append(Correction(f.name, verdict))
            continue
        proto = marked.get(f.proto)
        if proto is None:
            proto = marked[f.proto] = ProtoLayout(tuple(_source(a, "abi") for a in f.args),
                                                  _source(f.ret, "abi"), f.variadic)
        functions.append(dataclasses.replace(f, proto=proto))
    return Corrected(dataclasses.replace(layout, functions=tuple(functions)), corrections,
                     coverage_of(verdicts.values()))


def _source(v: ValueLayout | None, source: str) -> ValueLayout | None:
    return None if v is None else dataclasses.replace(v, source=source)


def _from_dwarf(f: FunctionLayout, fn: DwarfFunction, verdict: FunctionVerdict,
                regs: dict[str, CtxRegister]) -> FunctionLayout:
    args = tuple(_arg(v, p, pv.verdict, regs)
                 for v, p, pv in zip(f.args, fn.params, verdict.params))
    return dataclasses.replace(f, proto=ProtoLayout(args, _source(f.ret, "abi"), f.variadic))


def _arg(v: ValueLayout, p: DwarfParam, verdict: str, regs: dict[str, CtxRegister]) -> ValueLayout:
    why = "compiled with another convention than its prototype (DWARF)"
    if verdict not in (AGREE, DISAGREE):
        return _unavailable(v, f"{why}; DWARF gives no entry location ({verdict})")
    pieces = []
    for piece in p.location.pieces:
        if piece.reg is None:
            pieces.append(StackPiece(piece.stack, piece.value_offset, piece.size))
            continue
        r = regs.get(piece.reg)
        if r is None:
            return _unavailable(v, f"{why}; in {piece.reg}, which the trace ctx does not hold")
        pieces.append(RegPiece(r.field, r.hwreg, r.offset, r.size, piece.value_offset,
                               piece.size))
    return dataclasses.replace(v, pieces=tuple(pieces), by_ref=p.location.by_ref,
                               at_exit=False, unavailable=None, source="dwarf")


def _unavailable(v: ValueLayout, reason: str) -> ValueLayout:
    return dataclasses.replace(v, pieces=(), by_ref=False, at_exit=False, unavailable=reason,
                               source="dwarf")
