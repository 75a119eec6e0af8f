"""Placement of real prototypes on all ten arches, against what the compilers do.

tests/abi/protos.c is compiled per arch with the kernel's ABI flags and pahole makes its BTF;
btfgen places every function and the result must equal the tables below. Each line was checked
against the caller's side in the cross compiler's assembly (gcc/clang -O2 -S with the same flags:
which register or stack offset each argument constant is stored to).

Notation per value: a register is its hardware name; `@N` is a stack piece at entry SP + N
(big-endian s390x: narrow values sit at the right end of their 8-byte slot); pieces of one
value are joined by `,`; `&` = passed by reference (the pieces locate the pointer); `!` =
unavailable (FP/vector register); `-> ret` is the return value, `(exit)` when readable at exit.
"""

from __future__ import annotations

import pytest
from abi_corpus import available, protos_btf
from toolchains import ARCHES

from btfgen.abi.arches import load_arch
from btfgen.layout import RegPiece, StackPiece
from btfgen.place import place_functions

EXPECTED = {
    "x86_64": """
        f_7s16 rdi rsi rdx rcx r8 r9 @8 @16 @32
        f_8i128 rdi rsi rdx rcx r8 r9 @8 @16 @24 @40
        f_9 rdi rsi rdx rcx r8 r9 @8 @16 @24 @32
        f_a16 rdi rsi,rdx rcx
        f_bf rdi rsi
        f_c9 rdi rsi rdx rcx r8 r9 @8 @16 @24 @32
        f_d rdi ! ! rsi
        f_dl ! rsi
        f_i128 rdi rsi,rdx rcx
        f_ll rdi rsi rdx
        f_ll3 rdi rsi rdx rcx r8
        f_ll7 rdi rsi rdx rcx r8 r9 @8 @16 @24
        f_ll8 rdi rsi rdx rcx r8 r9 @8 @16 @24 @32
        f_misc rdi rsi rdx rcx r8 r9
        f_nest rdi !
        f_p @8 @16 rdi
        f_s12 rdi rsi rdx,rcx r8
        f_s16 rdi rsi rdx rcx,r8 r9
        f_s24 rdi @8
        f_s3 rdi rsi rdx
        f_s72 rdi @8 rsi
        f_va rdi rsi ...
        f_x1 rdi rsi rdx rcx r8 @8 r9
        r_c rdi -> rax (exit)
        r_f rdi -> !
        r_f1 rdi -> !
        r_f2 rdi -> !
        r_i128 rdi -> rax,rdx (exit)
        r_ll rdi -> rax (exit)
        r_s12 rdi -> rax,rdx (exit)
        r_s16 rdi -> rax,rdx (exit)
        r_s24 rsi -> &rax (exit)
        r_s3 rdi -> rax (exit)
        r_s4 rdi -> rax (exit)
        r_s8 rdi -> rax (exit)
    """,
    "i386": """
        f_7s16 eax edx ecx @4 @8 @12 @16 @20 @36
        f_9 eax edx ecx @4 @8 @12 @16 @20 @24 @28
        f_a16 eax @4 @20
        f_bf eax edx
        f_c9 eax edx ecx @4 @8 @12 @16 @20 @24 @28
        f_d eax @4 @12 edx
        f_dl eax,edx,ecx @4
        f_ll eax edx,ecx @4
        f_ll3 eax edx ecx @4 @12
        f_ll7 eax edx ecx @4 @8 @12 @16 @20 @28
        f_ll8 eax edx ecx @4 @8 @12 @16 @20 @24 @28
        f_misc eax edx ecx @4 @8 @12
        f_nest eax,edx @4
        f_p eax,edx @4 @16
        f_s12 eax edx @4 @16
        f_s16 eax edx ecx @4 @20
        f_s24 eax @4
        f_s3 eax edx ecx
        f_s72 eax @4 @76
        f_va @4 @8 ...
        f_x1 eax edx ecx @4 @8 @12 @28
        r_c eax -> eax (exit)
        r_f eax -> !
        r_f1 eax -> !
        r_f2 eax -> eax,edx (exit)
        r_ll eax -> eax,edx (exit)
        r_s12 edx -> &eax (exit)
        r_s16 edx -> &eax (exit)
        r_s24 edx -> &eax (exit)
        r_s3 edx -> &eax (exit)
        r_s4 eax -> eax (exit)
        r_s8 eax -> eax,edx (exit)
    """,
    "arm64": """
        f_7s16 x0 x1 x2 x3 x4 x5 x6 @0 @16
        f_8i128 x0 x1 x2 x3 x4 x5 x6 x7 @0 @16
        f_9 x0 x1 x2 x3 x4 x5 x6 x7 @0 @8
        f_a16 x0 x2,x3 x4
        f_bf x0 x1
        f_c9 x0 x1 x2 x3 x4 x5 x6 x7 @0 @8
        f_d x0 ! ! x1
        f_dl x0,x1 x2
        f_i128 x0 x2,x3 x4
        f_ll x0 x1 x2
        f_ll3 x0 x1 x2 x3 x4
        f_ll7 x0 x1 x2 x3 x4 x5 x6 x7 @0
        f_ll8 x0 x1 x2 x3 x4 x5 x6 x7 @0 @8
        f_misc x0 x1 x2 x3 x4 x5
        f_nest x0 !
        f_p x0 x1,x2 x3
        f_s12 x0 x1 x2,x3 x4
        f_s16 x0 x1 x2 x3,x4 x5
        f_s24 x0 &x1
        f_s3 x0 x1 x2
        f_s72 x0 &x1 x2
        f_va x0 x1 ...
        f_x1 x0 x1 x2 x3 x4 x5,x6 x7
        r_c x0 -> x0 (exit)
        r_f x0 -> !
        r_f1 x0 -> !
        r_f2 x0 -> !
        r_i128 x0 -> x0,x1 (exit)
        r_ll x0 -> x0 (exit)
        r_s12 x0 -> x0,x1 (exit)
        r_s16 x0 -> x0,x1 (exit)
        r_s24 x0 -> &x8
        r_s3 x0 -> x0 (exit)
        r_s4 x0 -> x0 (exit)
        r_s8 x0 -> x0 (exit)
    """,
    "riscv64": """
        f_7s16 a0 a1 a2 a3 a4 a5 a6 a7,@0 @8
        f_8i128 a0 a1 a2 a3 a4 a5 a6 a7 @0 @16
        f_9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_a16 a0 a1,a2 a3
        f_bf a0 a1
        f_c9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_d a0 a1 a2 a3
        f_dl a0,a1 a2
        f_i128 a0 a1,a2 a3
        f_ll a0 a1 a2
        f_ll3 a0 a1 a2 a3 a4
        f_ll7 a0 a1 a2 a3 a4 a5 a6 a7 @0
        f_ll8 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_misc a0 a1 a2 a3 a4 a5
        f_nest a0 a1
        f_p a0 a1,a2 a3
        f_s12 a0 a1 a2,a3 a4
        f_s16 a0 a1 a2 a3,a4 a5
        f_s24 a0 &a1
        f_s3 a0 a1 a2
        f_s72 a0 &a1 a2
        f_va a0 a1 ...
        f_x1 a0 a1 a2 a3 a4 a5,a6 a7
        r_c a0 -> a0 (exit)
        r_f a0 -> a0 (exit)
        r_f1 a0 -> a0 (exit)
        r_f2 a0 -> a0 (exit)
        r_i128 a0 -> a0,a1 (exit)
        r_ll a0 -> a0 (exit)
        r_s12 a0 -> a0,a1 (exit)
        r_s16 a0 -> a0,a1 (exit)
        r_s24 a1 -> &a0
        r_s3 a0 -> a0 (exit)
        r_s4 a0 -> a0 (exit)
        r_s8 a0 -> a0 (exit)
    """,
    "riscv32": """
        f_7s16 a0 a1 a2 a3 a4 a5 a6 &a7 @0
        f_9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @4
        f_a16 a0 &a1 a2
        f_bf a0 a1
        f_c9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @4
        f_d a0 a1,a2 a3 a4
        f_dl &a0 a1
        f_ll a0 a1,a2 a3
        f_ll3 a0 a1 a2 a3,a4 a5
        f_ll7 a0 a1 a2 a3 a4 a5 a6 a7,@0 @4
        f_ll8 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_misc a0 a1 a2 a3 a4 a5,a6
        f_nest a0,a1 a2,a3
        f_p a0,a1 &a2 a3
        f_s12 a0 a1 &a2 a3
        f_s16 a0 a1 a2 &a3 a4
        f_s24 a0 &a1
        f_s3 a0 a1 a2
        f_s72 a0 &a1 a2
        f_va a0 a1 ...
        f_x1 a0 a1 a2 a3 a4 &a5 a6
        r_c a0 -> a0 (exit)
        r_f a0 -> a0 (exit)
        r_f1 a0 -> a0 (exit)
        r_f2 a0 -> a0,a1 (exit)
        r_ll a0 -> a0,a1 (exit)
        r_s12 a1 -> &a0
        r_s16 a1 -> &a0
        r_s24 a1 -> &a0
        r_s3 a0 -> a0 (exit)
        r_s4 a0 -> a0 (exit)
        r_s8 a0 -> a0,a1 (exit)
    """,
    "loongarch64": """
        f_7s16 a0 a1 a2 a3 a4 a5 a6 a7,@0 @8
        f_8i128 a0 a1 a2 a3 a4 a5 a6 a7 @0 @16
        f_9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_a16 a0 a1,a2 a3
        f_bf a0 a1
        f_c9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_d a0 a1 a2 a3
        f_dl a0,a1 a2
        f_i128 a0 a1,a2 a3
        f_ll a0 a1 a2
        f_ll3 a0 a1 a2 a3 a4
        f_ll7 a0 a1 a2 a3 a4 a5 a6 a7 @0
        f_ll8 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_misc a0 a1 a2 a3 a4 a5
        f_nest a0 a1
        f_p a0 a1,a2 a3
        f_s12 a0 a1 a2,a3 a4
        f_s16 a0 a1 a2 a3,a4 a5
        f_s24 a0 &a1
        f_s3 a0 a1 a2
        f_s72 a0 &a1 a2
        f_va a0 a1 ...
        f_x1 a0 a1 a2 a3 a4 a5,a6 a7
        r_c a0 -> a0 (exit)
        r_f a0 -> a0 (exit)
        r_f1 a0 -> a0 (exit)
        r_f2 a0 -> a0 (exit)
        r_i128 a0 -> a0,a1 (exit)
        r_ll a0 -> a0 (exit)
        r_s12 a0 -> a0,a1 (exit)
        r_s16 a0 -> a0,a1 (exit)
        r_s24 a1 -> &a0
        r_s3 a0 -> a0 (exit)
        r_s4 a0 -> a0 (exit)
        r_s8 a0 -> a0 (exit)
    """,
    "s390x": """
        f_7s16 r2 r3 r4 r5 r6 @164 @172 &@176 @188
        f_8i128 r2 r3 r4 r5 r6 @164 @172 @180 @188 &@192
        f_9 r2 r3 r4 r5 r6 @164 @172 @180 @188 @196
        f_a16 r2 &r3 r4
        f_bf r2 r3
        f_c9 r2 r3 r4 r5 r6 @160 @168 @176 @191 @198
        f_d r2 r3 r4 r5
        f_dl &r2 r3
        f_i128 r2 &r3 r4
        f_ll r2 r3 r4
        f_ll3 r2 r3 r4 r5 r6
        f_ll7 r2 r3 r4 r5 r6 @164 @172 @176 @188
        f_ll8 r2 r3 r4 r5 r6 @164 @172 @180 @188 @192
        f_misc r2 r3 r4 r5 r6 @160
        f_nest &r2 r3
        f_p &r2 &r3 r4
        f_s12 r2 r3 &r4 r5
        f_s16 r2 r3 r4 &r5 r6
        f_s24 r2 &r3
        f_s3 &r2 r3 r4
        f_s72 r2 &r3 r4
        f_va r2 r3 ...
        f_x1 r2 r3 r4 r5 r6 &@160 @168
        r_c r2 -> r2 (exit)
        r_f r2 -> r2 (exit)
        r_f1 r3 -> &r2
        r_f2 r3 -> &r2
        r_i128 r3 -> &r2
        r_ll r2 -> r2 (exit)
        r_s12 r3 -> &r2
        r_s16 r3 -> &r2
        r_s24 r3 -> &r2
        r_s3 r3 -> &r2
        r_s4 r3 -> &r2
        r_s8 r3 -> &r2
    """,
    "ppc64le": """
        f_7s16 r3 r4 r5 r6 r7 r8 r9 r10,@96 @104
        f_8i128 r3 r4 r5 r6 r7 r8 r9 r10 @96 @104
        f_9 r3 r4 r5 r6 r7 r8 r9 r10 @96 @104
        f_a16 r3 r5,r6 r7
        f_bf r3 r4
        f_c9 r3 r4 r5 r6 r7 r8 r9 r10 @96 @104
        f_d r3 r4 r5 r6
        f_dl r3,r4 r5
        f_i128 r3 r4,r5 r6
        f_ll r3 r4 r5
        f_ll3 r3 r4 r5 r6 r7
        f_ll7 r3 r4 r5 r6 r7 r8 r9 r10 @96
        f_ll8 r3 r4 r5 r6 r7 r8 r9 r10 @96 @104
        f_misc r3 r4 r5 r6 r7 r8
        f_nest r3 r4
        f_p r3 r4,r5 r6
        f_s12 r3 r4 r5,r6 r7
        f_s16 r3 r4 r5 r6,r7 r8
        f_s24 r3 r4,r5,r6
        f_s3 r3 r4 r5
        f_s72 r3 r4,r5,r6,r7,r8,r9,r10,@96 @112
        f_va r3 r4 ...
        f_x1 r3 r4 r5 r6 r7 r8,r9 r10
        r_c r3 -> r3 (exit)
        r_f r3 -> r3 (exit)
        r_f1 r3 -> r3 (exit)
        r_f2 r3 -> r3 (exit)
        r_i128 r3 -> r3,r4 (exit)
        r_ll r3 -> r3 (exit)
        r_s12 r3 -> r3,r4 (exit)
        r_s16 r3 -> r3,r4 (exit)
        r_s24 r4 -> &r3
        r_s3 r3 -> r3 (exit)
        r_s4 r3 -> r3 (exit)
        r_s8 r3 -> r3 (exit)
    """,
    "arm": """
        f_7s16 r0 r1 r2 r3 @0 @4 @8 @16 @32
        f_9 r0 r1 r2 r3 @0 @4 @8 @12 @16 @20
        f_a16 r0 r2,r3,@0 @8
        f_bf r0 r1
        f_c9 r0 r1 r2 r3 @0 @4 @8 @12 @16 @20
        f_d r0 r2,r3 @0 @4
        f_dl r0,r1,r2,r3 @0
        f_ll r0 r2,r3 @0
        f_ll3 r0 r1 r2 @0 @8
        f_ll7 r0 r1 r2 r3 @0 @4 @8 @16 @24
        f_ll8 r0 r1 r2 r3 @0 @4 @8 @12 @16 @24
        f_misc r0 r1 r2 r3 @0 @4
        f_nest r0,r1 r2,r3
        f_p r0,r1 r2,r3,@0 @4
        f_s12 r0 r1 r2,r3,@0 @4
        f_s16 r0 r1 r2 @0 @16
        f_s24 r0 r2,r3,@0
        f_s3 r0 r1 r2
        f_s72 r0 r2,r3,@0 @64
        f_va r0 r1 ...
        f_x1 r0 r1 r2 r3 @0 @8 @24
        r_c r0 -> r0 (exit)
        r_f r0 -> r0 (exit)
        r_f1 r0 -> r0 (exit)
        r_f2 r1 -> &r0
        r_ll r0 -> r0,r1 (exit)
        r_s12 r1 -> &r0
        r_s16 r1 -> &r0
        r_s24 r1 -> &r0
        r_s3 r0 -> r0 (exit)
        r_s4 r0 -> r0 (exit)
        r_s8 r1 -> &r0
    """,
    # n64 (soft-float): 16-byte-aligned values start at an even slot, aggregates of any size go
    # by value split between a7 and the stack, a struct of two floats comes back in $2 and $4.
    "mips64el": """
        f_7s16 a0 a1 a2 a3 a4 a5 a6 a7,@0 @8
        f_8i128 a0 a1 a2 a3 a4 a5 a6 a7 @0 @16
        f_9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_a16 a0 a2,a3 a4
        f_bf a0 a1
        f_c9 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_d a0 a1 a2 a3
        f_dl a0,a1 a2
        f_i128 a0 a2,a3 a4
        f_ll a0 a1 a2
        f_ll3 a0 a1 a2 a3 a4
        f_ll7 a0 a1 a2 a3 a4 a5 a6 a7 @0
        f_ll8 a0 a1 a2 a3 a4 a5 a6 a7 @0 @8
        f_misc a0 a1 a2 a3 a4 a5
        f_nest a0 a1
        f_p a0 a1,a2 a3
        f_s12 a0 a1 a2,a3 a4
        f_s16 a0 a1 a2 a3,a4 a5
        f_s24 a0 a1,a2,a3
        f_s3 a0 a1 a2
        f_s72 a0 a1,a2,a3,a4,a5,a6,a7,@0 @16
        f_va a0 a1 ...
        f_x1 a0 a1 a2 a3 a4 a5,a6 a7
        r_c a0 -> v0 (exit)
        r_f a0 -> v0 (exit)
        r_f1 a0 -> v0 (exit)
        r_f2 a0 -> v0,a0 (exit)
        r_i128 a0 -> v0,v1 (exit)
        r_ll a0 -> v0 (exit)
        r_s12 a0 -> v0,v1 (exit)
        r_s16 a0 -> v0,v1 (exit)
        r_s24 a1 -> &a0
        r_s3 a0 -> v0 (exit)
        r_s4 a0 -> v0 (exit)
        r_s8 a0 -> v0 (exit)
    """,
}


def notation(v) -> str:
    if v.unavailable:
        return "!"
    text = ",".join(p.hwreg if isinstance(p, RegPiece) else f"@{p.stack}" for p in v.pieces)
    return ("&" if v.by_ref else "") + text


def render(f) -> str:
    line = " ".join([f.name] + [notation(a) or "-" for a in f.args])
    if f.ret is not None:
        line += " -> " + (notation(f.ret) or "-") + (" (exit)" if f.ret.at_exit else "")
    return line + (" ..." if f.variadic else "")


def layout(arch: str, ctx: str = "pt_regs"):
    if not available(arch):
        pytest.skip(f"no {arch} toolchain")
    btf = protos_btf(arch)
    funcs = sorted(btf.funcs(), key=lambda f: f.name)
    return place_functions(btf, load_arch(arch, btf.pointer_size), funcs, ctx=ctx)


def func(arch: str, name: str, ctx: str = "pt_regs"):
    return next(f for f in layout(arch, ctx).functions if f.name == name)


CASES = [(arch, line.split()[0], line.strip())
         for arch, table in EXPECTED.items() for line in table.strip().splitlines()]


@pytest.mark.parametrize("arch,name,expected", CASES, ids=[f"{a}-{n}" for a, n, _ in CASES])
def test_placement_matches_compiler(arch, name, expected):
    assert render(func(arch, name)) == expected


@pytest.mark.parametrize("arch", ARCHES)
def test_every_function_is_in_the_table(arch):
    assert sorted(f.name for f in layout(arch).functions) == sorted(
        line.split()[0] for line in EXPECTED[arch].strip().splitlines())


@pytest.mark.parametrize("arch", ARCHES)
def test_arguments_are_never_promised_at_exit(arch):
    # Argument registers are caller-saved and the stack-argument area is the callee's to reuse.
    for f in layout(arch).functions:
        assert not any(a.at_exit for a in f.args), f.name


def pieces(v):
    return [(p.hwreg, p.value_offset, p.size) if isinstance(p, RegPiece)
            else (p.stack, p.value_offset, p.size) for p in v.pieces]


def test_riscv64_2xlen_struct_with_one_register_left():
    s = func("riscv64", "f_7s16").args[7]
    assert pieces(s) == [("a7", 0, 8), (0, 8, 8)]


def test_riscv32_long_long_with_one_register_left():
    ll = func("riscv32", "f_ll7").args[7]
    assert pieces(ll) == [("a7", 0, 4), (0, 4, 4)] and ll.signed


def test_i386_long_long_after_two_ints_goes_to_the_stack_with_all_later():
    f = func("i386", "f_ll3")
    assert [pieces(a) for a in f.args] == [
        [("eax", 0, 4)], [("edx", 0, 4)], [("ecx", 0, 4)], [(4, 0, 8)], [(12, 0, 4)]]
    f = func("i386", "f_ll")  # with two registers left it takes them, low half first
    assert pieces(f.args[1]) == [("edx", 0, 4), ("ecx", 4, 4)]


def test_arm_long_long_after_one_int_takes_r2_r3():
    assert pieces(func("arm", "f_ll").args[1]) == [("r2", 0, 4), ("r3", 4, 4)]


def test_arm_composite_split_between_registers_and_stack():
    p9 = func("arm", "f_p").args[1]
    assert pieces(p9) == [("r2", 0, 4), ("r3", 4, 4), (0, 8, 1)]


def test_s390x_12_byte_struct_by_reference_and_right_justified_stack_values():
    f = func("s390x", "f_s12")
    assert f.args[2].by_ref and pieces(f.args[2]) == [("r4", 0, 8)]
    c9 = func("s390x", "f_c9")
    assert pieces(c9.args[8]) == [(191, 0, 1)] and pieces(c9.args[9]) == [(198, 0, 2)]


def test_ppc64le_argument_past_r10_uses_the_parameter_save_area():
    f = func("ppc64le", "f_s72")
    s = f.args[1]
    assert pieces(s)[-1] == (96, 56, 16) and [p[0] for p in pieces(s)[:7]] == [
        "r4", "r5", "r6", "r7", "r8", "r9", "r10"]
    assert pieces(f.args[2]) == [(112, 0, 4)]


def test_arm64_struct_return_with_x0_argument():
    f = func("arm64", "r_s24")
    assert pieces(f.args[0]) == [("x0", 0, 4)] and not f.args[0].at_exit
    # The result pointer arrives in x8; nothing promises it at exit: a copy saved at entry.
    assert f.ret.by_ref and pieces(f.ret) == [("x8", 0, 8)] and not f.ret.at_exit


def test_x86_64_struct_return_pointer_comes_back_in_rax():
    f = func("x86_64", "r_s24")
    assert pieces(f.args[0]) == [("rsi", 0, 4)]  # rdi carries the hidden pointer
    assert f.ret.by_ref and f.ret.at_exit and pieces(f.ret) == [("rax", 0, 8)]


def test_fp_registers_are_unavailable_with_a_reason():
    d = func("x86_64", "f_d").args[1]
    assert d.unavailable == "in xmm0, which pt_regs does not hold" and d.pieces == ()
    r = func("i386", "r_f1").ret
    assert "st(0)" in r.unavailable


def test_signedness_and_sizes_travel_with_the_layout():
    f = func("arm64", "f_misc")
    assert [(a.size, a.signed) for a in f.args] == [
        (1, False), (1, False), (2, True), (4, True), (8, False), (8, False)]
    assert func("x86_64", "r_c").ret.signed


def test_variadic_functions_place_named_arguments_and_flag_the_tail():
    f = func("x86_64", "f_va")
    assert f.variadic and [pieces(a) for a in f.args] == [[("rdi", 0, 4)], [("rsi", 0, 8)]]
    f = func("i386", "f_va")  # regparm does not apply to variadic functions
    assert [pieces(a) for a in f.args] == [[(4, 0, 4)], [(8, 0, 4)]]


@pytest.mark.parametrize("arch", ARCHES)
def test_ftrace_regs_fields(arch):
    lay = layout(arch, "ftrace_regs")
    assert lay.ctx.name == "ftrace_regs" and lay.ctx.source == "default"
    first = func(arch, "f_ll", "ftrace_regs").args[0].pieces[0]
    assert isinstance(first, RegPiece) and first.field.endswith(("[0]", "[2]", "[3]", "[4]",
                                                                 "ax", "a0", "di"))


def test_arm64_ftrace_regs_offsets():
    p = func("arm64", "r_s24", "ftrace_regs").ret.pieces[0]
    assert (p.field, p.ctx_offset) == ("regs[8]", 64)
    assert isinstance(func("arm64", "f_9").args[8].pieces[0], StackPiece)
