"""The view model of the generated kernel C header (`--lang kernel`): the BPF header's per-function
decoders and generic record, for kernel code's own callbacks (fprobe, function-graph, kprobe).

It shares with the BPF header what makes one wire layout: the per-function blocks are the BPF
template's, rendered over declarations for kernel C (`CTypes` mode "kernel": nothing the kernel's
headers define is defined again), and the table's specs are the ones the Python module and the BPF
spec table hold. What differs is how memory is reached (the kernel's nofault copies, no helpers)
and the ctx: the callback's `struct ftrace_regs *` (or `struct pt_regs *`), whose offsets the
header asserts against the kernel's own struct at compile time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from btfgen.codegen import bpf, straight
from btfgen.codegen.cdecl import CTypes
from btfgen.codegen.names import c_comment, c_ident, c_string
from btfgen.codegen.render import environment
from btfgen.decoder import generic
from btfgen.errors import BtfgenError
from btfgen.layout import ArchLayout
from btfgen.probe import spec_format

# The ctxs a kernel callback is handed: fprobe and function-graph callbacks take struct
# ftrace_regs * (since 6.14 fprobe's handlers have no pt_regs), kprobe handlers struct pt_regs *.
KERNEL_CTXS = ("ftrace_regs", "pt_regs")
DEFAULT_CTX = "ftrace_regs"


@dataclass(frozen=True, slots=True)
class RegisterView:
    hwreg: str
    field: str  # C member designator in the ctx struct ("regs.di", "regs[3]")
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class KernelHeaderView:
    guard: str
    arch: str
    ctx_name: str
    ctx_struct: str
    ctx_source: str
    ftrace: bool  # the ctx is struct ftrace_regs (else struct pt_regs)
    ctx_type: str  # the struct whose members the registers are
    ctx_decl: str  # the struct the callback is handed
    registers: tuple[RegisterView, ...]
    sp_offset: int | None
    sp_type: str
    pointer_size: int
    big_endian: bool
    captures: bool
    pointee_forwards: tuple[tuple[str, str], ...]
    ip_slots: int
    # The straight-line decoders (btfgen/codegen/straight.py), the BPF header's: the same specs
    # name them. A kernel ctx has no trampoline slots.
    straight_entry: tuple[straight.Straight, ...] = ()
    straight_exit: tuple[straight.Straight, ...] = ()
    straight_counts: str = "none"
    ptr_type: str = "__u64"
    slots: bool = False
    max_ops: int = generic.MAX_OPS
    data_size: int = generic.DATA_SIZE
    op_limit: int = generic.OP_LIMIT
    carry_missing_bit: int = generic.CARRY_MISSING_BIT
    carry_words: int = spec_format.CARRY_WORDS
    op_fields: tuple[spec_format.Field, ...] = spec_format.OP
    spec_fields: tuple[spec_format.Field, ...] = spec_format.SPEC_HEAD
    record_fields: tuple[spec_format.Field, ...] = spec_format.RECORD_HEAD
    capture_fields: tuple[spec_format.Field, ...] = spec_format.CAPTURE_HEAD
    # The BPF side's clock is bpf_ktime_get_ns; the kernel's own name for it is ktime_get_ns.
    event_fields: tuple[spec_format.Field, ...] = tuple(
        f._replace(comment="CLOCK_MONOTONIC: ktime_get_ns()") if f.name == "ns" else f
        for f in spec_format.EVENT_HEAD)
    event_thread_lost: int = spec_format.EVENT_THREAD_LOST
    event_some_lost: int = spec_format.EVENT_SOME_LOST


def check_ctx(arch: ArchLayout) -> None:
    """Kernel C is for a ctx a kernel callback is handed with the arguments in it: one line
    (BtfgenError) otherwise."""
    ctx = arch.ctx
    if ctx.name not in KERNEL_CTXS or ctx.slots:
        raise BtfgenError(f"--lang kernel: a kernel callback is handed "
                          f"{' or '.join(KERNEL_CTXS)}, not the {ctx.name} ctx (--ctx)")
    if ctx.without_args:
        raise BtfgenError(f"--lang kernel --ctx {ctx.name} on {arch.arch}: {ctx.without_args}")


def _ip_slots(n: int) -> int:
    """Slots of the address table: a power of two, at least twice the functions (a probe run
    stays short), at least 64."""
    size = 64
    while size < 2 * n:
        size *= 2
    return size


def render(arch: ArchLayout, table, plans, plan_table: straight.PlanTable,
           captures: dict | None = None) -> str:
    """btfgen.kernel.h for `arch` (placed for a kernel ctx: check_ctx)."""
    check_ctx(arch)
    env = environment()
    ctx = arch.ctx
    ctypes = CTypes(table, arch.pointer_size, "kernel", max_align=arch.max_scalar_align)
    cnames = bpf.function_names(arch.functions)
    func_t = env.get_template("bpf_function.h.j2")
    ptr = bpf.PtrType(bpf.reg_type(arch.pointer_size))
    blocks = bpf.function_blocks(arch, cnames, ctypes,
                                 lambda fs: func_t.render(fs=fs, h=ptr, end=bpf.BLOCK_END)
                                 .split(bpf.BLOCK_END), captures or {})
    ops_t = env.get_template("spec_ops.h.j2")
    specs = bpf.spec_views(arch, cnames, plans, lambda ss: ops_t.render(ss=ss).split("\0"),
                           plan_table)
    ftrace = ctx.name == "ftrace_regs"
    regs = tuple(RegisterView(c_comment(r.hwreg), _designator(r.field), r.offset, r.size)
                 for r in ctx.registers)
    h = KernelHeaderView(
        guard=c_ident(f"BTFGEN_KERNEL_{arch.arch}_H").upper(),
        arch=c_comment(arch.arch),
        ctx_name=c_comment(ctx.name),
        ctx_struct=c_comment(ctx.struct_name),
        ctx_source="read from its BTF" if ctx.source == "btf" else
        "the arch description's defaults: its BTF has no such struct",
        ftrace=ftrace,
        ctx_type="struct __arch_ftrace_regs" if ftrace else "struct pt_regs",
        ctx_decl="struct ftrace_regs" if ftrace else "struct pt_regs",
        registers=regs,
        sp_offset=ctx.sp_offset,
        sp_type=bpf.reg_type(arch.pointer_size),
        pointer_size=arch.pointer_size,
        big_endian=arch.byte_order == "big",
        captures=bool(captures),
        pointee_forwards=tuple(sorted(ctypes.forwards.values(), key=lambda kv: (kv[1], kv[0]))),
        ip_slots=_ip_slots(len(arch.functions)),
        straight_entry=plan_table.entry,
        straight_exit=plan_table.exit,
        straight_counts=straight.counts(plan_table),
        ptr_type=bpf.reg_type(arch.pointer_size),
    )
    first: dict[str, int] = {}
    for i, f in enumerate(arch.functions):
        first.setdefault(f.name, i)
    sorted_names = [(c_string(name), at) for name, at in
                    sorted(first.items(), key=lambda kv: kv[0].encode())]
    return env.get_template("kernel.h.j2").render(h=h, blocks=blocks, specs=specs,
                                                  sorted_names=sorted_names)


def _designator(field: str) -> str:
    """A ctx field as a C member designator (the arch descriptions spell them so already:
    `regs.di`, `regs[3]`); anything else is refused rather than printed into C."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])?(\.[A-Za-z_][A-Za-z0-9_]*"
                        r"(\[[0-9]+\])?)*", field):
        raise BtfgenError(f"ctx field {field!r} is not a C member designator")
    return field
