"""The golden examples in generated/examples/<arch>/: decoders for a few functions of a small C file
compiled for each arch with the kernel's ABI flags (tests/toolchains.py) and pahole -J.

Regenerate with `BTFGEN_REGEN_GOLDEN=1 python3 -m pytest tests/codegen/test_golden.py`."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "generated" / "examples"  # not generated/<arch>: btfgen's default output

SOURCE = r"""
struct pair { long a; int b; };
struct big { long v[5]; };
struct small { char c; short s; };
enum color { RED, GREEN = 5, BLUE = 9 };
struct flags { unsigned a : 3; int b : 5; enum color c : 4; unsigned char tail; };
struct node { struct node *next; const char *name; union { int i; float f; } u; };

volatile long sink;

__attribute__((noinline)) long scalars(int a, unsigned char b, _Bool c, void *d, long long e,
                                       short f, long g, unsigned h, long i)
{
	sink = a + b + c + (long)d + e + f + g + h + i;
	return sink;
}

__attribute__((noinline)) struct pair pass_pair(struct pair p, int x)
{
	p.b += x;
	sink = p.a;
	return p;
}

__attribute__((noinline)) struct big ret_big(struct big b, int n)
{
	b.v[0] += n;
	sink = b.v[1];
	return b;
}

__attribute__((noinline)) int with_enum(enum color c, struct flags f, const char *s)
{
	sink = f.a + f.b + f.tail + (long)s;
	return c;
}

__attribute__((noinline)) struct small tiny(struct small s, char c, struct node *n)
{
	s.c += c;
	sink = (long)n;
	return s;
}

void _start(void) {}
"""
FUNCTIONS = ("scalars", "pass_pair", "ret_big", "with_enum", "tiny")

# The trampoline's goldens (generated/examples/trampoline/<arch>/): SOURCE's functions (three of
# which return structs, which a trampoline refuses) and two it takes whose slots say the most.
TRAMPOLINE = GOLDEN / "trampoline"
TRAMPOLINE_SOURCE = SOURCE.replace("void _start(void) {}", r"""
__attribute__((noinline)) long two_slots(int a, struct pair p, short t)
{
	sink = p.a + p.b + t;
	return a;
}

__attribute__((noinline)) unsigned char narrow(signed char a, unsigned short b, int c,
                                               struct small s)
{
	sink = a + b + c + s.s;
	return (unsigned char)a;
}

void _start(void) {}
""")
TRAMPOLINE_FUNCTIONS = (*FUNCTIONS, "two_slots", "narrow")


def build(arch: str, ctx: str = "pt_regs"):
    """(btf, ArchLayout) of FUNCTIONS in SOURCE compiled for `arch` (with ctx "trampoline":
    TRAMPOLINE_FUNCTIONS in TRAMPOLINE_SOURCE), placed for `ctx`."""
    from toolchains import compile_c

    from btfgen.abi.arches import load_arch
    from btfgen.btf.reader import open_btf
    from btfgen.place import place_functions

    tramp = ctx == "trampoline"
    obj = compile_c(TRAMPOLINE_SOURCE if tramp else SOURCE, arch)
    btf = open_btf(str(obj))
    funcs = [f for name in (TRAMPOLINE_FUNCTIONS if tramp else FUNCTIONS)
             for f in btf.find_funcs(name)]
    return btf, place_functions(btf, load_arch(arch, btf.pointer_size), funcs, ctx=ctx)


def outputs(arch: str, ctx: str = "pt_regs") -> dict[str, str]:
    from btfgen.codegen.outputs import generate

    btf, layout = build(arch, ctx)
    return generate(layout, btf, self_contained=True)


# The kernel C goldens (generated/examples/kernel/<arch>/): SOURCE's functions placed for the ctx a
# kernel callback is handed on that arch (fprobe's ftrace_regs where the arch fills it with the
# arguments, else a kprobe's pt_regs), with the Python module that reads the records it makes.
KERNEL = GOLDEN / "kernel"


def kernel_ctx(arch: str) -> str:
    from btfgen.abi.arches import load_arch

    return "pt_regs" if load_arch(arch).ctxs["ftrace_regs"].without_args else "ftrace_regs"


def kernel_outputs(arch: str) -> dict[str, str]:
    from btfgen.codegen.outputs import generate

    btf, layout = build(arch, kernel_ctx(arch))
    return generate(layout, btf, ("kernel", "python"))
