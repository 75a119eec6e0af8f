"""The BPF trampoline's ctx (`--ctx trampoline`): each argument in whole u64 slots in order, the
return value in the slot after them, and what the kernel refuses refused with its reason.

The expectations are the kernel's rules as its sources state them (cited beside each in the
arch descriptions): kernel/bpf/btf.c btf_distill_func_proto for every arch, then each arch's
trampoline builder. Prototypes are compiled from C for the arch and read back as BTF (pahole),
as the kernel's own BTF is made."""

from __future__ import annotations

import struct

import pytest
from abi_corpus import available, source_btf

from btfgen.abi.arches import conventions, load_arch
from btfgen.errors import AbiError
from btfgen.layout import arg_slots
from btfgen.place import place_functions

SOURCE = r"""
struct pair { long a; int b; };
struct sixteen { long a, b; };
struct big { long a, b, c; };
struct small { char c; short s; };
struct empty { };
struct dd { double a, b; };
union u8 { long l; int i; };
volatile long sink;
int ints(int a, char b, long c) { return a + b + c; }
long two_slots(int a, struct pair p, short t) { return a + p.b + t; }
void nothing(void *p) { sink = (long)p; }
struct sixteen ret_struct(int a) { struct sixteen r = { a, a }; return r; }
int big_arg(struct big b) { return b.a; }
int twelve(long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, long a9,
           long a10, long a11, long a12) { return a12; }
int thirteen(long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, long a9,
             long a10, long a11, long a12, long a13) { return a13; }
int slots13(struct sixteen s, long a2, long a3, long a4, long a5, long a6, long a7, long a8,
            long a9, long a10, long a11, long a12) { return a12; }
int fp_arg(double d) { return d; }
double fp_ret(int a) { return a; }
int vararg(int a, ...) { return a; }
int with_union(union u8 u, int x) { return u.i + x; }
int small_struct(struct small s, int x) { return s.c + x; }
int stack_struct(long a1, long a2, long a3, long a4, long a5, struct sixteen s)
{ return s.a; }
int after_stack(long a1, long a2, long a3, long a4, long a5, long a6, long a7, int a8)
{ return a8; }
int sse_struct(struct dd d) { return d.a; }
__int128 wide_ret(long a) { return a; }
int wide_arg(__int128 a) { return a; }
"""

TRAMPOLINE_ARCHES = sorted(c.name for c in conventions() if "trampoline" in c.ctxs)


def _layout(arch: str):
    if not available(arch):
        pytest.skip(f"no {arch} toolchain or pahole")
    btf = source_btf(arch, SOURCE)
    conv = load_arch(arch)
    lay = place_functions(btf, conv, list(btf.funcs()), ctx="trampoline")
    return {f.name: f for f in lay.functions}, lay


def _slots(v) -> list[tuple[int, int, int]]:
    """(slot, value offset, size) of each piece."""
    return [(p.ctx_offset // 8, p.value_offset, p.size) for p in v.pieces]


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
def test_every_argument_takes_whole_slots_in_order(arch):
    fs, lay = _layout(arch)
    f = fs["ints"]
    assert f.refused is None
    assert [_slots(a) for a in f.args] == [[(0, 0, 4)], [(1, 0, 1)], [(2, 0, 8)]]
    # The return value follows the argument slots, in the slot bpf_get_func_ret reads.
    assert arg_slots(f.proto) == 3 and _slots(f.ret) == [(3, 0, 4)] and f.ret.at_exit
    assert f.args[0].signed and f.args[2].signed
    assert lay.ctx.slots and lay.ctx.sp_offset is None
    # A narrow value is the slot's least significant bytes: the high addresses when big-endian.
    skip = {p.size: p.skip(lay.byte_order) for a in f.args for p in a.pieces}
    assert skip == ({4: 4, 1: 7, 8: 0} if lay.byte_order == "big" else {4: 0, 1: 0, 8: 0})


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
def test_a_struct_of_9_to_16_bytes_takes_two_slots(arch):
    fs, _ = _layout(arch)
    f = fs["two_slots"]
    assert f.refused is None, f.refused
    a, p, t = f.args
    assert _slots(a) == [(0, 0, 4)]
    assert _slots(p) == [(1, 0, 8), (2, 8, 8)]
    assert _slots(t) == [(3, 0, 2)]
    assert arg_slots(f.proto) == 4 and _slots(f.ret) == [(4, 0, 8)]


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
def test_twelve_slots_are_taken_and_the_return_is_the_thirteenth(arch):
    fs, _ = _layout(arch)
    f = fs["twelve"]
    if f.refused:  # an arch whose trampoline reads registers only says so; checked below
        assert "argument registers" in f.refused or "slots" in f.refused, f.refused
        return
    assert [_slots(a) for a in f.args] == [[(k, 0, 8)] for k in range(12)]
    assert _slots(f.ret) == [(12, 0, 4)]


# What btf_distill_func_proto (kernel/bpf/btf.c) refuses on every arch.
EVERY_ARCH = {
    "ret_struct": "return value: a struct or union return value",
    "big_arg": "arg0 (b): a struct over 16 bytes",
    "thirteen": "arg12 (a13): more than 12",
    "fp_arg": "arg0 (d): a floating-point argument",
    "fp_ret": "return value: a floating-point return value",
    "vararg": "arg0 (a): variadic",
}


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
@pytest.mark.parametrize("name", sorted(EVERY_ARCH))
def test_what_every_kernel_refuses_is_refused_with_the_reason(arch, name):
    fs, _ = _layout(arch)
    f = fs[name]
    assert f.refused is not None and f.refused.startswith(EVERY_ARCH[name]), f.refused
    # Nothing of a refused function is read from a slot: every value says why.
    for v in (*f.args, *((f.ret,) if f.ret else ())):
        assert v.pieces == () and v.unavailable.endswith(f.refused)
        assert v.unavailable.startswith("the trampoline cannot take the function: ")


def test_x86_64_refusals_of_its_trampoline_builder():
    """arch/x86/net/bpf_jit_comp.c: a struct past the six argument registers (validate_args),
    more than 12 slots with a struct counting two, a struct save_args would look for in the
    wrong registers (SSE), a 16-byte integer (two slots saved, one counted)."""
    fs, _ = _layout("x86_64")
    assert fs["stack_struct"].refused == "arg5 (s): a struct past the 6 argument registers"
    assert fs["slots13"].refused.startswith("arg11 (a12): more than 12 argument slots")
    assert fs["sse_struct"].refused.startswith("arg0 (d): a struct in SSE registers")
    assert fs["wide_arg"].refused.startswith("arg0 (a): a 16-byte integer")
    # Scalars past the six registers are copied from the stack into their slots (Linux 6.6+).
    f = fs["after_stack"]
    assert f.refused is None and [_slots(a)[0][0] for a in f.args] == list(range(8))
    # rax alone is saved: the high half of an __int128 is not in the return slot.
    w = fs["wide_ret"]
    assert w.refused is None and "rax only" in w.ret.unavailable and w.args[0].pieces
    u = fs["with_union"]
    assert u.refused is None and _slots(u.args[0]) == [(0, 0, 8)]


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
def test_python_decodes_slot_bytes(arch):
    """btfgen's Python decoders read the slot array as the kernel lays it out: a narrow value
    is the slot's least significant bytes whatever the bits above it (what the caller left in
    the register), sign-extended by its type."""
    from btfgen.target import function_decoder

    fs, lay = _layout(arch)
    f = fs["two_slots"]
    if f.refused:
        pytest.skip(f"{arch} refuses it: {f.refused}")
    e = ">" if lay.byte_order == "big" else "<"
    pair_b = struct.pack(f"{e}i", -9) + b"\xaa" * 4  # struct pair's second word: b, padding
    slots = (struct.pack(f"{e}Q", 0xDEAD_0000_FFFF_FFFD)  # a = -3, garbage above
             + struct.pack(f"{e}q", 7) + pair_b  # p = {7, -9}
             + struct.pack(f"{e}Q", 0x1234_0000_0000_FFFE)  # t = -2
             + struct.pack(f"{e}q", 41))  # the return slot
    fn = function_decoder(f, lay)
    assert fn.as_dict(fn.entry(slots)) == {"a": -3, "p": {"a": 7, "b": -9}, "t": -2}
    assert fn.decode_exit(slots) == 41


@pytest.mark.parametrize("arch", ["i386", "arm", "riscv32", "mips64el"])
def test_an_arch_without_a_trampoline_has_no_such_ctx(arch):
    conv = load_arch(arch)
    assert "trampoline" not in conv.ctxs
    from btfgen.btf.made import MadeTypes

    with pytest.raises(AbiError, match=f"arch {arch} describes no trampoline ctx"):
        place_functions(MadeTypes(conv.pointer_size), conv, [], ctx="trampoline")


def test_the_target_says_which_functions_the_trampoline_refuses(tmp_path):
    """The query a tracer asks before it attaches: which of these can the trampoline take, and
    why not the others (they go through a kprobe)."""
    import btfgen

    if not available("x86_64"):
        pytest.skip("no x86_64 toolchain or pahole")
    btf = source_btf("x86_64", SOURCE)
    t = btfgen.open(btf.path, arch="x86_64", ctx="trampoline", dwarf=None)
    refused = t.refusals()
    names = {f.id: f.name for f in t.every_function()}
    by_name = {names[i]: why for i, why in refused.items()}
    assert by_name["big_arg"] == "arg0 (b): a struct over 16 bytes (btf_distill_func_proto)"
    assert "ints" not in by_name and "two_slots" not in by_name
    assert btfgen.open(btf.path, arch="x86_64", dwarf=None).refusals() == {}
