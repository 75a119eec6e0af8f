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
struct three { char a, b, c; };
struct twelve { int a, b, c; };
struct al16 { long a; } __attribute__((aligned(16)));
int three_arg(struct three t, int x) { return t.c + x; }
int twelve_arg(struct twelve t, int x) { return t.c + x; }
int odd_wide(long a, __int128 b) { return a + b; }
int al16_arg(long a, struct al16 s) { return a + s.a; }
int nine(long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, int a9)
{ return a9; }
int stack_pair(long a1, long a2, long a3, long a4, long a5, long a6, long a7, struct sixteen s)
{ return s.b; }
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


# An arch whose trampoline takes fewer slots refuses such a function at an earlier argument:
# loongarch64's reads a0-a7 alone (arch/loongarch/net/bpf_jit.c).
FEWER_SLOTS = {("loongarch64", "thirteen"): "arg8 (a9): more than 8 argument slots"}


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
@pytest.mark.parametrize("name", sorted(EVERY_ARCH))
def test_what_every_kernel_refuses_is_refused_with_the_reason(arch, name):
    fs, _ = _layout(arch)
    f = fs[name]
    want = FEWER_SLOTS.get((arch, name), EVERY_ARCH[name])
    assert f.refused is not None and f.refused.startswith(want), f.refused
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
    assert fs["stack_pair"].refused == "arg7 (s): a struct past the 6 argument registers"
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


# What each arch's own trampoline builder refuses beyond btf_distill_func_proto (the sources
# are cited in each arch's description), and what it takes that another refuses. None: taken.
ARCH_RULES = {
    "arm64": {"sse_struct": "arg0 (d): a struct in FP registers",
              "odd_wide": "arg1 (b): a 16-byte integer",
              "wide_arg": "arg0 (a): a 16-byte integer",
              "al16_arg": "arg1 (s): a 16-byte-aligned struct",
              "stack_pair": "arg7 (s): a struct past the 8 argument registers",
              "stack_struct": None, "nine": None, "three_arg": None, "twelve_arg": None},
    # A 16-byte struct may straddle a7 and the stack: so do its slots (store_args).
    "riscv64": {"sse_struct": None, "odd_wide": None, "wide_arg": None, "al16_arg": None,
                "stack_struct": None, "nine": None, "twelve_arg": None, "stack_pair": None},
    "loongarch64": {"nine": "arg8 (a9): more than 8 argument slots", "stack_struct": None,
                    "stack_pair": "arg7 (s): more than 8 argument slots",
                    "sse_struct": None, "wide_arg": None},
    "s390x": {"three_arg": "arg0 (t): a 3-, 5-, 6- or 7-byte struct",
              "twelve_arg": "arg0 (t): a 9-15 byte struct",
              "stack_struct": "arg5 (s): a struct past the 5 argument registers",
              "stack_pair": "arg7 (s): a struct past the 5 argument registers",
              "sse_struct": None, "wide_arg": None, "nine": None, "small_struct": None},
    "ppc64le": {"al16_arg": "arg1 (s): a quadword-aligned struct", "wide_arg": None,
                "stack_pair": "arg7 (s): a struct past the 8 argument registers",
                "odd_wide": None, "stack_struct": None, "nine": None, "sse_struct": None},
}


@pytest.mark.parametrize("arch", sorted(ARCH_RULES))
def test_each_arch_refuses_what_its_trampoline_builder_does(arch):
    fs, _ = _layout(arch)
    got = {name: fs[name].refused for name in ARCH_RULES[arch]}
    for name, want in ARCH_RULES[arch].items():
        if want is None:
            assert got[name] is None, (name, got[name])
        else:
            assert got[name] is not None and got[name].startswith(want), (name, got[name])


@pytest.mark.parametrize("arch", sorted(ARCH_RULES))
def test_a_taken_function_has_every_value_in_slots_and_the_return_after_them(arch):
    """Whatever each arch takes, its slots are whole, in order, with no gap, and the return
    value is in the slot after the last (bpf_get_func_arg_cnt's index)."""
    fs, _ = _layout(arch)
    for f in fs.values():
        if f.refused:
            continue
        at = 0
        for a in f.args:
            slots = sorted({s for s, _, _ in _slots(a)})
            assert slots == list(range(at, at + len(slots))), (f.name, a.name, slots)
            assert len(slots) == -(-a.size // 8), (f.name, a.name)
            at += len(slots)
        assert arg_slots(f.proto) == at
        if f.ret is not None and not f.ret.unavailable:
            assert _slots(f.ret)[0][0] == at, f.name


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


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
def test_btfgen_open_with_the_trampoline_ctx_decodes_slots(arch):
    """The public API: btfgen.open(..., ctx="trampoline") places by the arch's trampoline rules
    and its decoders read slot arrays; refusals() says what it refuses, and why."""
    import btfgen

    if not available(arch):
        pytest.skip(f"no {arch} toolchain or pahole")
    btf = source_btf(arch, SOURCE)
    t = btfgen.open(btf.path, arch=arch, ctx="trampoline", dwarf=None)
    fn = t.function("ints")
    order = "big" if load_arch(arch).byte_order == "big" else "little"
    slots = b"".join(v.to_bytes(8, order, signed=True) for v in (-4, 0x7f41, -9, 12))
    assert fn.entry(slots) == (-4, 0x41, -9) and fn.decode_exit(slots) == 12
    names = {f.id: f.name for f in t.every_function()}
    refused = {names[i] for i in t.refusals()}
    assert {"big_arg", "ret_struct", "fp_arg", "vararg"} <= refused and "ints" not in refused


def _run_ops(ops, slots: bytes, nargs: int, ret_slot: int, order: str, data: bytearray):
    """The BPF runtime's ctx ops (bpf.h.j2: btfgen_tramp_slot into the interpreter's snapshot)
    over a trampoline's slot array: word K < nargs is bpf_get_func_arg's slot K, word nargs and
    word `ret_slot` bpf_get_func_ret's value, any other word 0."""
    from btfgen.decoder.generic import FROM_CTX

    words = [slots[8 * k:8 * k + 8] for k in range(len(slots) // 8)]
    snap = bytearray()
    for k in range(ret_slot + 1):
        if k < nargs:
            snap += words[k]
        elif k in (nargs, ret_slot):
            snap += words[nargs]
        else:
            snap += bytes(8)
    for op in ops:
        assert op.source == FROM_CTX, op  # a trampoline's values are all in slots
        assert op.src + op.size <= len(snap), op  # within the snapshot: never read as memory
        data[op.dst:op.dst + op.size] = snap[op.src:op.src + op.size]


@pytest.mark.parametrize("arch", TRAMPOLINE_ARCHES)
def test_the_generic_spec_table_decodes_what_the_slots_hold(arch):
    """The spec table's ops, run as the BPF runtime runs them, make records that decode to what
    the per-function decoders read from the same slots; every exit reads the return value at
    the one return slot past the arguments (ctx.ret_slot), so one op list (the register image)
    serves every function's exit whatever its argument count."""
    import random

    from btfgen.codegen.outputs import plans
    from btfgen.decoder.runtime import RECORD_HEADERS
    from btfgen.target import function_decoder

    fs, lay = _layout(arch)
    ret_slot = lay.ctx.ret_slot
    assert ret_slot == lay.ctx.size - 8 and lay.ctx.registers[-1].field == "[nargs]"
    order = lay.byte_order
    rng = random.Random(arch)
    decoded = 0
    exits = set()
    for f, p in zip(lay.functions, plans(lay)):
        if f.refused:
            assert p.entry_ops == () and p.exit_ops == ()
            continue
        nargs = arg_slots(f.proto)
        slots = bytes(rng.randrange(256) for _ in range(8 * (nargs + 1)))
        fn = function_decoder(f, lay)
        head = RECORD_HEADERS[order].format
        entry = bytearray(1024)
        _run_ops(p.entry_ops, slots, nargs, ret_slot // 8, order, entry)
        rec = struct.pack(head, f.btf_id, 0, 0) + bytes(entry)
        assert fn.decode_record(rec) == fn.entry(slots), f.name
        if f.ret is not None and f.ret.pieces:
            exits.add(p.exit_ops)
            out = bytearray(1024)
            _run_ops(p.exit_ops, slots, nargs, ret_slot // 8, order, out)
            rec = struct.pack(head, f.btf_id, 1, 0) + bytes(out)
            assert fn.decode_record(rec) == fn.decode_exit(slots), f.name
        decoded += 1
    assert decoded >= 10
    assert {op.src - op.src % 8 for ops in exits for op in ops} == {ret_slot}


@pytest.mark.parametrize("arch", ["i386", "arm", "riscv32", "mips64el"])
@pytest.mark.parametrize("command", ["generate", "layout"])
def test_asking_an_arch_without_a_trampoline_for_one_is_one_line_and_status_2(
        arch, command, tmp_path):
    """`btfgen --ctx trampoline` on an arch whose JIT builds no trampoline (its own BTF, so the
    only thing wrong is the ctx): one line saying which ctxs it has, exit 2, nothing written."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from abi_corpus import protos_btf

    if not available(arch):
        pytest.skip(f"no {arch} toolchain or pahole")
    path = protos_btf(arch).path
    root = Path(__file__).resolve().parents[2]
    args = (["layout", path] if command == "layout" else [path, "-o", str(tmp_path / "out")])
    run = subprocess.run([sys.executable, "-m", "btfgen", *args, "--arch", arch,
                          "--ctx", "trampoline"], capture_output=True, text=True, cwd=root,
                         env=dict(os.environ, PYTHONPATH=str(root)))
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert f"arch {arch} describes no trampoline ctx (has: ftrace_regs, pt_regs)" in run.stderr
    assert run.stdout == "" and not (tmp_path / "out").exists()
