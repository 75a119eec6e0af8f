"""A user stack unwound offline, as `perf --call-graph dwarf` does: from the registers at the
call and the slice of the stack above them (stack_wire.StackSample), frame by frame by the
rules of each object's .eh_frame (eh_frame.py). Where a frame cannot be followed, the walk
stops and says why: the stack shown is then likely cut, never passed off as whole."""

from __future__ import annotations

import struct
from typing import Callable, NamedTuple

from . import eh_frame, stack_wire

# Each arch's DWARF register numbers of the registers the BPF side copies (build.py's
# STACK_REGS): the stack pointer, the frame pointer, the link register (the return address's
# column holds the caller's pc).
DWARF_REGS = {"x86_64": {"sp": 7, "fp": 6}, "arm64": {"sp": 31, "fp": 29, "lr": 30}}
# The user addresses a return address may hold on arm64, where pointer authentication signs the
# top bits of one saved on the stack (48-bit user space).
ADDRESS_MASK = {"x86_64": (1 << 64) - 1, "arm64": (1 << 48) - 1}
MOST_FRAMES = 64


class Walk(NamedTuple):
    """The frames' pcs, innermost (the call's own) first, and why the walk stopped short (None:
    it reached the outermost frame, whose return address the CFI says is undefined)."""

    pcs: tuple
    cut: str | None


# pc -> (the object's EhFrame, the pc as the object's own address) or why there is none
Lookup = Callable[[int], "tuple[eh_frame.EhFrame, int] | str"]


def walk(sample, arch: str, lookup: Lookup, returns=None) -> Walk:
    """Unwind `sample` (a StackSample) on `arch`, finding each pc's CFI with `lookup`.
    `returns(ra, k)`: where a return address read is the kernel's uretprobe trampoline (a
    traced call still running: its return was taken over at its entry), the `k`th such from
    the innermost (0 first), the address it stands for, or None where that is not known."""
    numbers = DWARF_REGS.get(arch)
    if numbers is None:
        return Walk((sample.ip,), f"unwinding on {arch} is not known")
    mask = ADDRESS_MASK[arch]
    sp_reg = numbers["sp"]
    regs = {sp_reg: sample.sp, numbers["fp"]: sample.fp}
    if "lr" in numbers:
        regs[numbers["lr"]] = sample.lr
    memory = _Memory(sample)
    pcs = [sample.ip]
    pc, first, hijacked = sample.ip, True, 0
    while len(pcs) < MOST_FRAMES:
        # a caller's pc is its return address: the call is the instruction before it
        found = lookup(pc if first else pc - 1)
        if isinstance(found, str):
            return Walk(tuple(pcs), found)
        frames, addr = found
        try:
            row = frames.row(addr)
        except (eh_frame.CfiError, struct.error, IndexError) as e:
            return Walk(tuple(pcs), f"its CFI at {pc:#x} could not be read ({e})")
        if row is None:
            return Walk(tuple(pcs), f"no CFI covers {pc:#x}")
        if row.cfa_reg is None:
            return Walk(tuple(pcs), f"the frame at {pc:#x} finds its caller by a DWARF "
                        "expression, which is not followed")
        base = regs.get(row.cfa_reg)
        if base is None:
            return Walk(tuple(pcs), f"the frame at {pc:#x} needs register {row.cfa_reg}, "
                        "which was not recorded")
        cfa = base + row.cfa_offset
        ra_rule = row.rules.get(row.ra)
        if ra_rule is not None and ra_rule[0] == eh_frame.UNDEFINED:
            return Walk(tuple(pcs), None)  # the outermost frame
        new = dict(regs)
        for reg, (rule, arg) in row.rules.items():
            if rule == eh_frame.OFFSET:
                value = memory.word(cfa + arg)
                if value is None:
                    if reg == row.ra:
                        return Walk(tuple(pcs), _copy_ends(len(sample.slice)))
                    new.pop(reg, None)
                    continue
                new[reg] = value
            elif rule == eh_frame.VAL_OFFSET:
                new[reg] = cfa + arg
            elif rule == eh_frame.REGISTER:
                if arg in regs:
                    new[reg] = regs[arg]
                else:
                    new.pop(reg, None)
            elif rule in (eh_frame.UNDEFINED, eh_frame.EXPRESSION):
                new.pop(reg, None)
        ra = new.get(row.ra)
        if ra is None:
            return Walk(tuple(pcs), f"the return address of the frame at {pc:#x} is not known")
        ra &= mask
        if ra == 0:
            return Walk(tuple(pcs), None)
        if returns is not None:
            real = returns(ra, hijacked)
            if real is not None and real != ra:
                hijacked += 1
                ra = real
            elif real is None:
                return Walk(tuple(pcs), "a traced call's return address is the uretprobe "
                            "trampoline's, and its own was not seen at its entry")
        if cfa <= regs[sp_reg] and not first:
            return Walk(tuple(pcs), f"the frame at {pc:#x} does not move up the stack")
        new[sp_reg] = cfa
        regs, pc, first = new, ra, False
        pcs.append(pc)
    return Walk(tuple(pcs), f"{MOST_FRAMES} frames shown")


def _copy_ends(size: int) -> str:
    """Why the walk stops at the end of the stack copied: its bound, or a page the BPF program
    could not read (not resident: it cannot fault one in), since every frame a stack's end
    holds was reached before it."""
    if size >= stack_wire.SLICE:
        return f"the stack copied ({size} bytes) ends before the next frame"
    return (f"the stack copied ({size} bytes) ends before the next frame, at a page that could "
            "not be read (not resident: the program cannot fault it in)")


class _Memory:
    """The user stack as copied: words at addresses from sp."""

    def __init__(self, sample) -> None:
        self.base, self.data = sample.sp, sample.slice
        self.word_of = struct.Struct("<Q" if sample.order == "little" else ">Q").unpack_from

    def word(self, addr: int) -> int | None:
        at = addr - self.base
        if 0 <= at <= len(self.data) - 8:
            return self.word_of(self.data, at)[0]
        return None
