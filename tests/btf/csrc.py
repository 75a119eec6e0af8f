"""C sources that exercise what gcc/clang + pahole put in BTF, and builders for their objects.

Every type is the type of a global variable or a parameter of a non-inlined function, so DWARF
(and from it BTF) has it. `LAYOUT_*` name what the compiler reports about the types: the source
gets a `btfgen_layout` array of sizeof/_Alignof/offsetof values in the same order.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import toolchains

TYPES_C = r"""
typedef unsigned long ulong_t;
typedef ulong_t ulong2_t;
typedef int (*callback_t)(int, long);
typedef char name_t[16];

struct bits {
    unsigned int a : 3;
    unsigned int b : 5;
    int c : 7;
    unsigned long long d : 40;
    char e;
    unsigned short f : 9;
    _Bool g : 1;
    long long h : 33;
};

struct __attribute__((packed)) packed {
    char c;
    int i;
    short s;
    long long l;
};

struct packed_bits {
    char c;
    unsigned int x : 20;
    unsigned int y : 20;
} __attribute__((packed));

struct anon {
    int kind;
    union {
        int i;
        struct { short lo, hi; };
        long l;
        union { char b; long long q; };
    };
    char tail;
};

struct flex { int n; long data[]; };
struct flex_char { short n; char data[]; };

struct ll_after_int { int i; long long ll; };
struct ll_after_char { char c; long long ll; double d; };
struct dbl { char c; double d; };
struct ld { char c; long double ld; };
struct ptrs {
    struct ptrs *next;
    const volatile int *restrict p;
    struct fwd_only *f;
    union fwd_u *fu;
    callback_t cb;
    int (*cb2)(const char *, ...);
    int (*arrp)[4];
    void *(*ret_fp)(void *);
    name_t name;
    int matrix[3][4];
    char *const cpc;
    const char *const *argv;
    float fl;
    double db;
    _Bool flag;
    ulong2_t u2;
};
struct aligned { char c; int x __attribute__((aligned(16))); };
struct nested { struct dbl a; char b; struct ll_after_int c[2]; };
struct empty_tail { long l; char c; };
#ifdef __SIZEOF_INT128__
struct i128 { char c; __int128 x; };
#endif

enum small { S_NEG = -5, S_ZERO = 0, S_POS = 7 };
enum big64 { B_BIG = 0x123456789abcdefULL, B_ONE = 1 };
enum negbig { NB_MIN = -0x100000000LL, NB_X = 3 };
enum uns { U_A = 1, U_B = 0x80000000u };
enum __attribute__((packed)) tiny { T_A = 1, T_B = 200 };

struct bits g_bits;
struct packed g_packed;
struct packed_bits g_packed_bits;
struct anon g_anon;
struct flex g_flex;
struct flex_char g_flex_char;
struct ll_after_int g_lai;
struct ll_after_char g_lac;
struct dbl g_dbl;
struct ld g_ld;
struct ptrs g_ptrs;
struct aligned g_aligned;
struct nested g_nested;
struct empty_tail g_empty_tail;
#ifdef __SIZEOF_INT128__
struct i128 g_i128;
#endif
enum small g_small;
enum big64 g_big64;
enum negbig g_negbig;
enum uns g_uns;
enum tiny g_tiny;
union u { int i; float f; double d; char c[6]; } g_u;
long long g_ll;
long double g_ldv;
"""

FUNCS_A_C = r"""
#define NOINLINE __attribute__((noinline, used))

NOINLINE int takes_all(struct bits *b, enum big64 e, enum negbig n, enum small s, float x,
                       const char *str, char *const cp, volatile int *vp, callback_t cb,
                       struct fwd_only *f, union u uv, name_t nm)
{ return b->a + (int)e + (int)n + s + (int)x + str[0] + *cp + *vp + cb(1, 2) + (f != 0)
         + uv.i + nm[0]; }

NOINLINE int vsum(int n, ...)
{
    __builtin_va_list ap;
    __builtin_va_start(ap, n);
    int s = __builtin_va_arg(ap, int);
    __builtin_va_end(ap);
    return s + n;
}

NOINLINE static int helper(int x) { return x * 3 + g_small; }
NOINLINE void *(*ret_fp(int k))(void *) { return k ? g_ptrs.ret_fp : 0; }
NOINLINE struct dbl by_value(struct packed p, struct anon a, long long ll, ulong2_t u)
{ struct dbl d = { p.c, a.l + ll + u }; return d; }
NOINLINE int use_helper(int x) { return helper(x); }
NOINLINE void no_args(void) { g_small = S_POS; }
NOINLINE _Bool pred(const struct ptrs *restrict p, int (*arrp)[4])
{ return p->flag && arrp; }
"""

FUNCS_B_C = r"""
#define NOINLINE __attribute__((noinline, used))
struct other { int x; long y; };
NOINLINE static long helper(long a, long b) { return a - b; }
NOINLINE long use_helper_b(struct other *o) { return helper(o->x, o->y); }
"""

# What the layout array records: (C type, [members whose offsetof is asked]).
LAYOUT_TYPES: list[tuple[str, list[str]]] = [
    ("struct packed", ["c", "i", "s", "l"]),
    ("struct anon", ["kind", "i", "lo", "hi", "l", "b", "q", "tail"]),
    ("struct flex", ["n", "data"]),
    ("struct flex_char", ["n", "data"]),
    ("struct ll_after_int", ["i", "ll"]),
    ("struct ll_after_char", ["c", "ll", "d"]),
    ("struct dbl", ["c", "d"]),
    ("struct ld", ["c", "ld"]),
    ("struct ptrs", ["next", "p", "cb", "name", "matrix", "fl", "db", "flag", "u2"]),
    ("struct aligned", ["c", "x"]),
    ("struct nested", ["a", "b", "c"]),
    ("struct empty_tail", ["l", "c"]),
    ("struct bits", ["e"]),
    ("struct packed_bits", ["c"]),
    ("union u", ["i", "c"]),
    ("enum small", []),
    ("enum big64", []),
    ("enum tiny", []),
    ("long long", []),
    ("double", []),
    ("long double", []),
    ("void *", []),
    ("long", []),
    ("short", []),
    ("_Bool", []),
]
INT128_LAYOUT = [("struct i128", ["c", "x"]), ("__int128", [])]

# Bitfields whose bit positions the compiler shows: (struct, member).
BITFIELDS = [("bits", m) for m in "abcdfgh"] + [("packed_bits", "x"), ("packed_bits", "y")]


def layout_types(int128: bool) -> list[tuple[str, list[str]]]:
    return LAYOUT_TYPES + (INT128_LAYOUT if int128 else [])


def layout_source(int128: bool) -> str:
    values = []
    for ctype, members in layout_types(int128):
        values += [f"sizeof({ctype})", f"_Alignof({ctype})"]
        values += [f"__builtin_offsetof({ctype}, {m})" for m in members]
    lines = [TYPES_C, "const unsigned int btfgen_layout[] = {", ",\n".join(values), "};"]
    # One object per bitfield with only that bitfield all ones: the bytes show where it lives.
    for i, (struct, member) in enumerate(BITFIELDS):
        lines.append(f"const union {{ struct {struct} s; "
                     f"unsigned char b[sizeof(struct {struct})]; }}"
                     f" btfgen_bf_{i} = {{ .s = {{ .{member} = -1 }} }};")
    return "\n".join(lines) + "\n"


def a_source() -> str:
    return TYPES_C + FUNCS_A_C


def b_source() -> str:
    return FUNCS_B_C


def pahole(obj: Path, *, base: Path | None = None, flags: tuple[str, ...] = ()) -> Path:
    """Encode .BTF into `obj` in place (a copy the caller owns)."""
    cmd = ["pahole", "-J", *flags]
    if base is not None:
        cmd += ["--btf_base", str(base)]
    proc = subprocess.run([*cmd, str(obj)], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} {obj}: {proc.stderr}")
    return obj


def object_copy(source: str, arch: str, dest: Path, *, extra: tuple[str, ...] = ()) -> Path:
    """A private copy of the (cached) object compiled from `source` for `arch`, without BTF
    (linked where pahole needs it: `RESOLVE_FIRST`)."""
    obj = toolchains.compile_c(source, arch, extra=extra, btf=False)
    if arch in RESOLVE_FIRST:
        return link([obj], arch, dest)
    shutil.copyfile(obj, dest)
    return dest


# pahole 1.24 (elfutils) does not apply loongarch64 or mips64el relocations to DWARF in
# relocatable objects: names come out wrong, FUNCs go missing. A linked file has none left to apply.
RESOLVE_FIRST = {"loongarch64", "mips64el"}


def link(objs: list[Path], arch: str, dest: Path) -> Path:
    """Merge objects into one, as the kernel's vmlinux merges its files: relocatable (`cc -r`),
    or linked with relocations resolved where pahole needs that."""
    tc = toolchains.TOOLCHAINS[arch]
    libs: list[str] = []
    if arch in RESOLVE_FIRST:
        mode = ["-static", "-Wl,-e,0", "-Wl,--unresolved-symbols=ignore-all"]
        if tc.compiler.endswith("-gcc"):
            # Soft-float helpers: an unresolved one sits at 0, out of a MIPS jal's reach.
            libs = ["-lgcc"]
    else:
        mode = ["-r"]
    proc = subprocess.run([*tc.cc, *mode, "-nostdlib", *tc.ld_flags, *map(str, objs), *libs,
                           "-o", str(dest)], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(proc.stderr)
    return dest


def bpftool_dump(path: Path | str, base: Path | str | None = None) -> bytes:
    # bpftool 7.1 takes the base of split BTF as an option (-B), not as `... base FILE`.
    cmd = ["bpftool"] + (["-B", str(base)] if base is not None else [])
    cmd += ["btf", "dump", "file", str(path), "format", "raw"]
    proc = subprocess.run(cmd, capture_output=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout
