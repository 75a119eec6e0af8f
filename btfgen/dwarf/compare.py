"""btfgen's placement of a function's parameters against DWARF's entry locations.

Per parameter the verdict is `agree`, `disagree`, or why the two cannot be compared (DWARF has no
entry location, btfgen marks the value unavailable, the parameter has no bytes, DWARF's location is
the callee's own home that the prologue fills). Per function: `disagree` when any parameter does,
`agree` when at least one parameter was compared and all compared agree; a DWARF parameter list
other than BTF's (implicit arguments, a clone) is its own verdict, never an agreement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from btfgen.abi.convention import Convention
from btfgen.btf import measure
from btfgen.btf import types as T
from btfgen.layout import FunctionLayout, RegPiece, StackPiece, ValueLayout

from .locations import EntryLocation
from .reader import DwarfFunction, DwarfParam

AGREE = "agree"
DISAGREE = "disagree"
PARAMS_DIFFER = "parameter list differs from BTF"
SHADOW = "DWARF gives the register's slot in the parameter save area (the callee's home)"
CALLEE_FRAME = "DWARF gives the callee's own frame (the prologue fills it)"
POST_PROLOGUE = "DWARF gives the value's home for the whole function, not its entry location"
NO_PARAMETERS = "no parameters"


@dataclass(frozen=True, slots=True)
class ParamVerdict:
    name: str
    verdict: str  # AGREE, DISAGREE, or why not comparable
    btfgen: str  # btfgen's placement, described
    dwarf: str  # DWARF's entry location, described


@dataclass(frozen=True, slots=True)
class FunctionVerdict:
    name: str
    address: int | None
    verdict: str  # AGREE, DISAGREE, PARAMS_DIFFER, or why not comparable
    params: tuple[ParamVerdict, ...] = ()
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of a check happened: functions compared out of those that could be. Every
    function with parameters could; one not compared (no symbol tied to its DWARF, no DWARF
    definition, a differing parameter list, nothing known at entry) counts against it."""

    compared: int
    comparable: int

    @property
    def percent(self) -> float:
        return 100.0 * self.compared / self.comparable if self.comparable else 0.0

    @property
    def shown(self) -> str:
        """The percentage to one decimal, rounded down: 79.96% is not shown as 80.0%."""
        return f"{math.floor(self.percent * 10) / 10:.1f}%"

    def below(self, minimum: float) -> bool:
        """Below `minimum` percent; with nothing comparable, below any minimum above 0."""
        return minimum > 0 and (not self.comparable or self.percent < minimum)

    def describe(self) -> str:
        return (f"{self.compared} of {self.comparable} functions with parameters compared "
                f"({self.shown})")


def coverage_of(verdicts) -> Coverage:
    comparable = [v for v in verdicts if v.verdict != NO_PARAMETERS]
    return Coverage(sum(v.verdict in (AGREE, DISAGREE) for v in comparable), len(comparable))


def describe_value(v: ValueLayout) -> str:
    if v.unavailable:
        return f"unavailable ({v.unavailable})"
    parts = []
    for p in v.pieces:
        where = p.hwreg if isinstance(p, RegPiece) else f"sp+{p.stack}"
        parts.append(f"{where}[{p.value_offset}:{p.value_offset + p.size}]")
    text = " ".join(parts) or "(no bytes)"
    return f"*({text})" if v.by_ref else text


def _norm_layout(v: ValueLayout) -> tuple:
    pieces = []
    for p in v.pieces:
        if isinstance(p, RegPiece):
            pieces.append(("reg", p.hwreg, p.value_offset, p.size))
        elif isinstance(p, StackPiece):
            pieces.append(("stack", p.stack, p.value_offset, p.size))
    return v.by_ref, _merge(pieces)


def _norm_dwarf(loc: EntryLocation) -> tuple:
    pieces = [("reg", p.reg, p.value_offset, p.size) if p.reg is not None
              else ("stack", p.stack, p.value_offset, p.size) for p in loc.pieces]
    return loc.by_ref, _merge(pieces)


def _merge(pieces: list[tuple]) -> tuple:
    """Adjacent stack pieces that continue each other in memory and in the value are one."""
    out: list[tuple] = []
    for p in sorted(pieces, key=lambda p: p[2]):
        if out and p[0] == "stack" and out[-1][0] == "stack":
            kind, at, off, size = out[-1]
            if at + size == p[1] and off + size == p[2]:
                out[-1] = (kind, at, off, size + p[3])
                continue
        out.append(p)
    return tuple(out)


def _shadow(loc: EntryLocation, v: ValueLayout, conv: Convention) -> bool:
    """With shared_slots (ppc64's parameter save area) a register has a stack slot of its own
    that the callee may home it in: DWARF naming that slot for a value btfgen puts in the
    register is the home, not the entry location."""
    regs = [p for p in v.pieces if isinstance(p, RegPiece)]
    if not conv.shared_slots or not regs or loc.by_ref or v.by_ref:
        return False
    if any(p.stack is None for p in loc.pieces):
        return False
    pool = next((pool for pool in conv.pools.values() if regs[0].hwreg in pool), ())
    if not pool:
        return False
    shadow = conv.stack_base + conv.slot * pool.index(regs[0].hwreg)
    return min(p.stack for p in loc.pieces) == shadow


def _caller_wrote(loc: EntryLocation) -> bool:
    """Whether a whole-function location is memory the caller filled: the stack (a register
    or a pointer named for the whole function is where the body keeps the value)."""
    return not loc.by_ref and all(p.stack is not None for p in loc.pieces)


def _too_wide(loc: EntryLocation, conv: Convention) -> bool:
    """A piece wider than the integer register it names (clang says a7 for a 64-bit value
    split between a7 and the stack on riscv32): DWARF's own imprecision, no entry location."""
    ctx_regs = {e.hwreg for spec in conv.ctxs.values() for e in spec.entries}
    return any(p.reg in ctx_regs and p.size > conv.pointer_size for p in loc.pieces)


def compare_param(v: ValueLayout, param: DwarfParam, conv: Convention) -> ParamVerdict:
    ours = describe_value(v)
    theirs = param.location.describe()
    name = v.name or param.name
    if v.size == 0 or param.size == 0:
        return ParamVerdict(name, "zero-size parameter", ours, theirs)
    if param.location.unknown:
        return ParamVerdict(name, f"DWARF: {param.location.unknown}", ours, theirs)
    if v.unavailable:
        return ParamVerdict(name, "btfgen: unavailable", ours, theirs)
    if _norm_layout(v) == _norm_dwarf(param.location):
        return ParamVerdict(name, AGREE, ours, theirs)
    # One expression for the whole function (no location list) names the value's home: where
    # the prologue keeps it (a callee-saved register, the callee's frame, a register's shadow
    # slot; gcc even gives __int128 halves swapped there). It is the entry location only
    # where the caller wrote it.
    loc = param.location
    if param.whole_function and not _caller_wrote(loc):
        return ParamVerdict(name, POST_PROLOGUE, ours, theirs)
    if any(p.stack is not None and p.stack < conv.stack_base for p in loc.pieces):
        # Below where stack arguments start (below the entry SP, the return address, s390x's
        # save area): no caller writes an argument there; the prologue does (arm's variadic
        # functions push r0-r3 so that the named arguments and the rest are contiguous).
        return ParamVerdict(name, CALLEE_FRAME, ours, theirs)
    if _shadow(loc, v, conv):
        return ParamVerdict(name, SHADOW, ours, theirs)
    if _too_wide(loc, conv):
        return ParamVerdict(name, "DWARF: a register piece wider than the register", ours, theirs)
    return ParamVerdict(name, DISAGREE, ours, theirs)


def params_match(layout: FunctionLayout, fn: DwarfFunction) -> str:
    """'' when DWARF's parameter list is BTF's (count, sizes, variadic), else how it differs."""
    if len(fn.params) != len(layout.args):
        return f"DWARF lists {len(fn.params)} parameters, BTF {len(layout.args)}"
    if fn.variadic != layout.variadic:
        return "variadic in one, not in the other"
    for i, (v, p) in enumerate(zip(layout.args, fn.params)):
        size = measure.size_of(v.type) if not v.size else v.size
        if p.size is not None and p.size != size:
            return f"parameter {i} ({v.name or p.name}): {p.size} bytes in DWARF, {size} in BTF"
    return ""


def compare_function(layout: FunctionLayout, instances: list[DwarfFunction],
                     conv: Convention) -> FunctionVerdict:
    """One BTF function against every DWARF definition of its name (statics may be several)."""
    tied = [f for f in instances if f.is_symbol]
    if not tied:
        if instances:
            clones = sorted({s for f in instances for s in f.symbols})
            return FunctionVerdict(layout.name, instances[0].address,
                                   "only clones in DWARF" if clones else "no ELF symbol",
                                   detail=", ".join(clones[:4]))
        return FunctionVerdict(layout.name, None, "no DWARF definition")
    matching = [f for f in tied if not params_match(layout, f)]
    if not matching:
        f = tied[0]
        return FunctionVerdict(layout.name, f.address, PARAMS_DIFFER,
                               detail=params_match(layout, f))
    if not layout.args:
        return FunctionVerdict(layout.name, matching[0].address, NO_PARAMETERS)
    verdicts = []
    for f in matching:
        params = tuple(compare_param(v, p, conv) for v, p in zip(layout.args, f.params))
        kinds = {p.verdict for p in params}
        if DISAGREE in kinds:
            verdict = DISAGREE
        elif AGREE in kinds:
            verdict = AGREE
        else:
            verdict = "no parameter comparable"
        verdicts.append(FunctionVerdict(layout.name, f.address, verdict, params,
                                        detail=f"{len(matching)} definitions"
                                        if len(matching) > 1 else ""))
    for v in verdicts:
        if v.verdict == DISAGREE:
            return v
    for v in verdicts:
        if v.verdict == AGREE:
            return v
    return verdicts[0]
