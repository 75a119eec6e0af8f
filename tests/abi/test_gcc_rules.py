"""Regression tables for ABI rules found by the conformance suite, one C source per arch.

Each source is compiled with the kernel's ABI flags (tests/toolchains.py) and turned into BTF by
pahole; btfgen's placement must equal the table. Every line was checked against gcc -O2 -S (the
callee reading its last argument, the caller storing each argument). Notation as in
test_placement.py: register names, `@N` entry SP + N, `,` between pieces, `&` by reference,
`!` unavailable, `-> ret`, `(exit)` when readable at exit.
"""

from __future__ import annotations

import pytest
from abi_corpus import available, source_btf
from test_placement import render

from btfgen.abi.arches import load_arch
from btfgen.place import place_functions

SOURCES = {
    # i386 passes and returns by gcc's machine mode (-mregparm=3 -freg-struct-return): a struct
    # a float spans is DFmode/SFmode (stack, x87 return), a union never is; an aggregate holding
    # an array no integer mode fits (char[3], char[6]) is BLKmode: returned through the hidden
    # pointer, which takes eax and shifts the arguments.
    "i386": ("""
        struct sd { double f0; }; struct sf { float f0; }; struct ssd { struct sd x; };
        struct sad { double f[1]; }; union ud { double d; }; struct sfa2 { float f[2]; };
        struct c31 { char f0[3]; char f1; }; union u6 { int a; char b[6]; short c; };
        struct s22 { char f0[2]; char f1[2]; }; struct n31 { struct c31 x; };
        struct s63 { short f0[3]; short f1; }; struct sa22 { char a[2][2]; };
        int i_sd(int p0, struct sd p1, int p2) { return p2; }
        int i_sf(struct sf p0, int p1) { return p1; }
        int i_ssd(struct ssd p0, int p1) { return p1; }
        int i_sad(struct sad p0, int p1) { return p1; }
        int i_ud(union ud p0, int p1) { return p1; }
        int i_sfa2(struct sfa2 p0, int p1) { return p1; }
        struct c31 r_c31(int p0, int p1) { struct c31 r = {{0}}; return r; }
        union u6 r_u6(int p0, int p1) { union u6 r = {0}; return r; }
        struct n31 r_n31(int p0, int p1) { struct n31 r = {{{0}}}; return r; }
        struct s63 r_s63(int p0, int p1) { struct s63 r = {{0}}; return r; }
        struct s22 r_s22(int p0, int p1) { struct s22 r = {{0}}; return r; }
        struct sa22 r_sa22(int p0, int p1) { struct sa22 r = {{{0}}}; return r; }
        union ud r_ud(int p0) { union ud r = {0}; return r; }
        struct sd r_sd(int p0) { struct sd r = {0}; return r; }
        struct ssd r_ssd(int p0) { struct ssd r = {{0}}; return r; }
        struct sfa2 r_sfa2(int p0) { struct sfa2 r = {{0}}; return r; }
    """, """
        i_sd eax @4 edx -> eax (exit)
        i_sf @4 eax -> eax (exit)
        i_ssd @4 eax -> eax (exit)
        i_sad @4 eax -> eax (exit)
        i_ud eax,edx ecx -> eax (exit)
        i_sfa2 eax,edx ecx -> eax (exit)
        r_c31 edx ecx -> &eax (exit)
        r_u6 edx ecx -> &eax (exit)
        r_n31 edx ecx -> &eax (exit)
        r_s63 edx ecx -> &eax (exit)
        r_s22 eax edx -> eax (exit)
        r_sa22 eax edx -> eax (exit)
        r_ud eax -> eax,edx (exit)
        r_sd eax -> !
        r_ssd eax -> !
        r_sfa2 eax -> eax,edx (exit)
    """),
    # arm (gcc >= 9, PR 88469): a direct bitfield of declared type long long makes even a packed
    # struct or union doubleword-aligned for passing; a packed double, or the bitfield one level
    # down, does not.
    "arm": ("""
        struct __attribute__((packed)) p1 { char f0; long long f1 : 40; };
        struct __attribute__((packed)) p2 { char f0; double f1; };
        struct in { struct p1 x; };
        struct __attribute__((packed)) p5 {
            char f0; unsigned short f1 : 5; long long f2 : 12; double f3; double f4; };
        union __attribute__((packed)) pu { char c[3]; long long x : 20; };
        int a_p1(int a, struct p1 b, int c) { return c; }
        int a_p2(int a, struct p2 b, int c) { return c; }
        int a_in(int a, struct in b, int c) { return c; }
        int a_p5(int a, long long b, int c, struct p5 d, int e) { return e; }
        int a_pu(int a, union pu b, int c) { return c; }
    """, """
        a_in r0 r1,r2 r3 -> r0 (exit)
        a_p1 r0 r2,r3 @0 -> r0 (exit)
        a_p2 r0 r1,r2,r3 @0 -> r0 (exit)
        a_p5 r0 r2,r3 @0 @8 @28 -> r0 (exit)
        a_pu r0 r2 r3 -> r0 (exit)
    """),
    # arm64: a union whose members are all the same FP type (arrays of it included) is an HFA
    # with as many members as its largest member: v registers, arguments and returns alike.
    "arm64": ("""
        union u1 { double f0[2]; double f1; }; union u2 { float a; double b; };
        union u4 { float a[3]; float b; }; struct s5 { union u1 u; double d; };
        union u6 { double a[5]; }; union u7 { float a; int b; };
        long a_u1(int a, union u1 b, long c) { return c; }
        long a_u2(int a, union u2 b, long c) { return c; }
        long a_u4(int a, union u4 b, long c) { return c; }
        long a_s5(int a, struct s5 b, long c) { return c; }
        long a_u6(int a, union u6 b, long c) { return c; }
        long a_u7(int a, union u7 b, long c) { return c; }
        union u1 r_u1(long a) { union u1 r = {{0}}; return r; }
        union u4 r_u4(long a) { union u4 r = {{0}}; return r; }
        union u2 r_u2(long a) { union u2 r = {0}; return r; }
    """, """
        a_s5 x0 ! x1 -> x0 (exit)
        a_u1 x0 ! x1 -> x0 (exit)
        a_u2 x0 x1 x2 -> x0 (exit)
        a_u4 x0 ! x1 -> x0 (exit)
        a_u6 x0 &x1 x2 -> x0 (exit)
        a_u7 x0 x1 x2 -> x0 (exit)
        r_u1 x0 -> !
        r_u2 x0 -> x0 (exit)
        r_u4 x0 -> !
    """),
    # mips64el n64, soft-float: a struct of exactly two direct floating-point fields is returned
    # as if in $f0 and $f2, which without an FPU are $2 and $4 (each field in its own register,
    # packed or not); arrays, nesting, unions and three fields come back in $2/$3 as bytes.
    "mips64el": ("""
        struct fd { float a; double b; }; struct df { double a; float b; };
        struct __attribute__((packed)) pfd { float a; double b; };
        struct fa2 { float a[2]; }; struct f3 { float a, b, c; }; union uf { float a; double b; };
        struct nf { struct { float a; } x; float b; };
        volatile struct fd g_fd; volatile struct df g_df; volatile struct pfd g_pfd;
        volatile struct fa2 g_fa2; volatile struct f3 g_f3; volatile union uf g_uf;
        volatile struct nf g_nf;
        struct fd r_fd(int p0) { return g_fd; }
        struct df r_df(int p0) { return g_df; }
        struct pfd r_pfd(int p0) { return g_pfd; }
        struct fa2 r_fa2(int p0) { return g_fa2; }
        struct f3 r_f3(int p0) { return g_f3; }
        union uf r_uf(int p0) { return g_uf; }
        struct nf r_nf(int p0) { return g_nf; }
    """, """
        r_df a0 -> v0,a0 (exit)
        r_fa2 a0 -> v0 (exit)
        r_f3 a0 -> v0,v1 (exit)
        r_fd a0 -> v0,a0 (exit)
        r_nf a0 -> v0 (exit)
        r_pfd a0 -> v0,a0 (exit)
        r_uf a0 -> v0 (exit)
    """),
}

CASES = [(arch, line.split()[0], line.strip())
         for arch, (_, table) in SOURCES.items() for line in table.strip().splitlines()]


def layout(arch: str):
    if not available(arch):
        pytest.skip(f"no {arch} toolchain")
    btf = source_btf(arch, SOURCES[arch][0])
    return place_functions(btf, load_arch(arch, btf.pointer_size), btf.funcs())


@pytest.mark.parametrize("arch,name,expected", CASES, ids=[f"{a}-{n}" for a, n, _ in CASES])
def test_placement_matches_compiler(arch, name, expected):
    f = next(f for f in layout(arch).functions if f.name == name)
    assert render(f) == expected


@pytest.mark.parametrize("arch", list(SOURCES))
def test_every_function_is_in_the_table(arch):
    assert sorted(f.name for f in layout(arch).functions) == sorted(
        line.split()[0] for line in SOURCES[arch][1].strip().splitlines())


@pytest.mark.parametrize("name,want", [
    ("r_fd", [("v0", 0, 8), ("a0", 8, 8)]),     # the float, then padding, in $2
    ("r_df", [("v0", 0, 8), ("a0", 8, 8)]),
    ("r_pfd", [("v0", 0, 4), ("a0", 4, 8)]),    # packed: the double at byte 4, whole in $4
])
def test_mips64el_float_pair_pieces(name, want):
    from btfgen.layout import RegPiece

    ret = next(f for f in layout("mips64el").functions if f.name == name).ret
    assert all(isinstance(p, RegPiece) for p in ret.pieces)
    assert [(p.hwreg, p.value_offset, p.size) for p in ret.pieces] == want
