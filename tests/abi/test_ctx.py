"""Trace-ctx layouts: read from the BTF in hand when it has the struct, else the defaults."""

from __future__ import annotations

import os
import platform

import pytest
from abi_corpus import available
from toolchains import compile_c

from btfgen.btf.made import MadeTypes
from btfgen.abi.arches import load_arch
from btfgen.abi.ctx import resolve_ctx
from btfgen.btf.reader import open_btf

VMLINUX = "/sys/kernel/btf/vmlinux"


@pytest.mark.skipif(not os.path.exists(VMLINUX) or platform.machine() != "x86_64",
                    reason="needs an x86_64 kernel with BTF")
def test_running_kernel_pt_regs_equals_the_description_defaults():
    conv = load_arch("x86_64")
    got = resolve_ctx(open_btf(VMLINUX), conv, "pt_regs")
    want = resolve_ctx(MadeTypes(), conv, "pt_regs")  # a table with no structs: the defaults
    assert got.source == "btf" and want.source == "default"
    assert got.registers == want.registers and got.sp_offset == want.sp_offset == 152
    assert (got.struct_name, got.size) == ("pt_regs", 168) == (want.struct_name, want.size)


RISCV_FTRACE = """
struct __arch_ftrace_regs {
    unsigned long epc, ra, sp, s0, t1;
#ifdef DIRECT_CALLS
    unsigned long direct_tramp;
#endif
    union {
        unsigned long args[8];
        struct { unsigned long a0, a1, a2, a3, a4, a5, a6, a7; };
    };
};
struct ftrace_regs;
int use(struct __arch_ftrace_regs *r, struct ftrace_regs *o) { return r->a0 != 0 && o; }
"""


@pytest.mark.parametrize("direct,a0", [(True, 48), (False, 40)])
def test_riscv_ftrace_regs_read_from_btf(direct, a0):
    if not available("riscv64"):
        pytest.skip("no riscv64 toolchain")
    extra = ("-DDIRECT_CALLS",) if direct else ()
    btf = open_btf(str(compile_c(RISCV_FTRACE, "riscv64", extra=extra)))
    ctx = resolve_ctx(btf, load_arch("riscv64"), "ftrace_regs")
    assert (ctx.source, ctx.struct_name) == ("btf", "__arch_ftrace_regs")
    regs = {r.hwreg: (r.field, r.offset, r.size) for r in ctx.registers}
    assert regs["a0"] == ("a0", a0, 8) and regs["a7"] == ("a7", a0 + 56, 8)
    assert (ctx.sp_field, ctx.sp_offset) == ("sp", 16)


def test_fields_the_btf_struct_lacks_are_left_out():
    # An old-style arm64 ftrace_regs with only x0-x3: x4+ must not be read at a guessed offset.
    src = """
struct __arch_ftrace_regs { unsigned long regs[4]; unsigned long sp; };
int use(struct __arch_ftrace_regs *r) { return r->sp != 0; }
"""
    if not available("arm64"):
        pytest.skip("no arm64 toolchain")
    btf = open_btf(str(compile_c(src, "arm64")))
    ctx = resolve_ctx(btf, load_arch("arm64"), "ftrace_regs")
    assert [r.hwreg for r in ctx.registers] == ["x0", "x1", "x2", "x3", "sp"]
    assert ctx.sp_offset == 32
