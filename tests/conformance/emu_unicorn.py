"""Run a batch executable in unicorn and snapshot every target at entry and at its return.

One block hook does it all: a function entry and a return address both start a translation block
(calls end blocks), so the hook sees every entry and return without a per-instruction callback.
"""

from __future__ import annotations

import unicorn as uc
from unicorn import arm64_const, arm_const, mips_const, riscv_const, s390x_const, x86_const

from .elfinfo import Executable
from .machines import Machine
from .snapshot import Memory, Snapshot, Stop

STACK_BASE = 0x7F000000
STACK_SIZE = 0x100000
STACK_TOP = STACK_BASE + STACK_SIZE
START_SP = STACK_TOP - 0x1000  # room above for what _start's prologue writes into its caller
MAX_INSNS = 50_000_000


class EmulationError(RuntimeError):
    pass


def _const(module, prefix: str, name: str) -> int:
    return getattr(module, f"{prefix}{name.upper()}")


def _setup(m: Machine) -> tuple[uc.Uc, dict[str, int]]:
    """The engine and its register ids, by the register names of `m`."""
    if m.arch in ("x86_64", "i386"):
        e = uc.Uc(uc.UC_ARCH_X86, uc.UC_MODE_64 if m.ptr == 8 else uc.UC_MODE_32)
        regs = {r: _const(x86_const, "UC_X86_REG_", r) for r in m.regs}
    elif m.arch == "arm64":
        e = uc.Uc(uc.UC_ARCH_ARM64, uc.UC_MODE_ARM)
        regs = {r: _const(arm64_const, "UC_ARM64_REG_", r) for r in m.regs}
    elif m.arch.startswith("riscv"):
        e = uc.Uc(uc.UC_ARCH_RISCV, uc.UC_MODE_RISCV64 if m.ptr == 8 else uc.UC_MODE_RISCV32)
        regs = {r: _const(riscv_const, "UC_RISCV_REG_", r) for r in m.regs}
    elif m.arch == "s390x":
        e = uc.Uc(uc.UC_ARCH_S390X, uc.UC_MODE_BIG_ENDIAN)
        # 64-bit addressing (PSW bits 31 EA and 32 BA), as Linux runs user code.
        e.reg_write(s390x_const.UC_S390X_REG_PSWM,
                    e.reg_read(s390x_const.UC_S390X_REG_PSWM) | 0x1_8000_0000)
        regs = {r: _const(s390x_const, "UC_S390X_REG_", r) for r in m.regs}
    elif m.arch == "arm":
        e = uc.Uc(uc.UC_ARCH_ARM, uc.UC_MODE_ARM)
        e.ctl_set_cpu_model(arm_const.UC_CPU_ARM_CORTEX_A15)
        regs = {r: _const(arm_const, "UC_ARM_REG_", r) for r in m.regs}
    elif m.arch == "mips64el":
        e = uc.Uc(uc.UC_ARCH_MIPS, uc.UC_MODE_MIPS64 | uc.UC_MODE_LITTLE_ENDIAN)
        # gcc's default for this target is mips64r2 (dext, dins, seb...), which R4000 lacks.
        e.ctl_set_cpu_model(mips_const.UC_CPU_MIPS64_MIPS64R2_GENERIC)
        # `m.regs` lists $1-$31 in order; unicorn numbers them UC_MIPS_REG_0 + n.
        regs = {r: mips_const.UC_MIPS_REG_0 + n for n, r in enumerate(m.regs, 1)}
    else:
        raise EmulationError(f"{m.arch}: unicorn does not run this arch here")
    return e, regs


def _page_span(lo: int, hi: int) -> tuple[int, int]:
    lo &= ~0xFFF
    return lo, ((hi + 0xFFF) & ~0xFFF) - lo


def run(m: Machine, exe: Executable, targets: dict[int, str], done: int) -> list[Stop]:
    try:
        e, regs = _setup(m)
    except uc.UcError as err:  # e.g. a cpu model this unicorn lacks
        raise EmulationError(f"{m.arch}: {err}") from err
    mapped: list[tuple[int, int]] = []
    for seg in exe.segments:
        lo, size = _page_span(seg.vaddr, seg.vaddr + len(seg.data))
        # Segments may share a page; map only what is not mapped yet.
        for base, length in mapped:
            if lo < base + length and base < lo + size:
                start = max(lo, base + length)
                size, lo = lo + size - start, start
        if size > 0:
            e.mem_map(lo, size)
            mapped.append((lo, size))
        e.mem_write(seg.vaddr, seg.data)
    e.mem_map(STACK_BASE, STACK_SIZE)
    sp = START_SP - (m.ptr if m.ret_addr == "[sp]" else 0)  # as if _start had been called
    e.reg_write(regs[m.sp], sp)
    if "__global_pointer$" in exe.symbols:  # gp-relative accesses after linker relaxation
        e.reg_write(regs["gp"], exe.symbols["__global_pointer$"])
    writable = [(s.vaddr, len(s.data)) for s in exe.segments if s.writable]

    def snapshot(entry_sp: int) -> Snapshot:
        values = {r: e.reg_read(i) for r, i in regs.items()}
        cur = values[m.sp]
        low = min(cur, entry_sp)
        regions = [(low, bytes(e.mem_read(low, STACK_TOP - low)))]
        regions += [(a, bytes(e.mem_read(a, n))) for a, n in writable]
        return Snapshot(values, cur, Memory(tuple(regions)))

    pending: dict[int, tuple[str, Snapshot]] = {}
    stops: list[Stop] = []

    def on_block(engine, address, size, _user):
        name = targets.get(address)
        if name is not None:
            snap = snapshot(engine.reg_read(regs[m.sp]))
            if m.ret_addr == "[sp]":
                ret = int.from_bytes(snap.memory.read(snap.sp, m.ptr), m.byte_order)
            else:
                ret = snap.regs[m.ret_addr]
            pending[ret] = (name, snap)
            return
        hit = pending.pop(address, None)
        if hit is not None:
            stops.append(Stop(hit[0], hit[1], snapshot(hit[1].sp)))

    e.hook_add(uc.UC_HOOK_BLOCK, on_block)
    try:
        e.emu_start(exe.entry, done, count=MAX_INSNS)
    except uc.UcError as err:
        pc = e.reg_read(_pc_id(m))
        raise EmulationError(f"{m.arch}: {exe.path}: {err} at pc {pc:#x}") from err
    if e.reg_read(_pc_id(m)) != done:
        raise EmulationError(f"{m.arch}: {exe.path}: did not reach {done:#x}")
    return stops


def _pc_id(m: Machine) -> int:
    return {
        "x86_64": x86_const.UC_X86_REG_RIP, "i386": x86_const.UC_X86_REG_EIP,
        "arm64": arm64_const.UC_ARM64_REG_PC, "riscv64": riscv_const.UC_RISCV_REG_PC,
        "riscv32": riscv_const.UC_RISCV_REG_PC, "s390x": s390x_const.UC_S390X_REG_PC,
        "arm": arm_const.UC_ARM_REG_PC, "mips64el": mips_const.UC_MIPS_REG_PC,
    }[m.arch]
