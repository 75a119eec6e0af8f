"""The Python decoder against the real compiler: a program built for the target (run natively
or under qemu-user) fills structs with bitfields, enums, unions and arrays and prints their bytes
and its own view of each member; decoding those bytes with the BTF of the same types must give
the same numbers, on a little- and a big-endian target. Plus register narrowing and sign
extension from the declared width."""

from __future__ import annotations

import shutil
import subprocess

import golden
import pytest

from btfgen.btf import types as T
from btfgen.decoder.describe import type_desc
from btfgen.decoder.generic import plan as generic_plan
from btfgen.decoder import runtime
from btfgen.decoder.runtime import Enumerator, Unavailable, convert

PROGRAM = r"""
#include <stdio.h>
#include <string.h>
__TYPES__
static void dump(const char *name, const void *p, unsigned n)
{
	const unsigned char *b = p;
	printf("%s ", name);
	for (unsigned i = 0; i < n; i++)
		printf("%02x", b[i]);
	printf("\n");
}
int main(void)
{
	struct flags f; struct pair p; struct small s; struct node n;
	memset(&f, 0xa5, sizeof f);  /* garbage in the padding */
	f.a = 5; f.b = -7; f.c = BLUE; f.tail = 200;
	memset(&p, 0x5a, sizeof p);
	p.a = -1234567; p.b = 42;
	s.c = -3; s.s = -30000;
	n.next = (struct node *)0x1234; n.name = (const char *)0x5678; n.u.i = -2;
	dump("flags", &f, sizeof f); dump("pair", &p, sizeof p);
	dump("small", &s, sizeof s); dump("node", &n, sizeof n);
	/* the compiler's own reading of each member (plain char is unsigned on s390x) */
	printf("v.flags.a %lld\nv.flags.b %lld\nv.flags.c %lld\nv.flags.tail %lld\n",
	       (long long)f.a, (long long)f.b, (long long)f.c, (long long)f.tail);
	printf("v.pair.a %lld\nv.pair.b %lld\n", (long long)p.a, (long long)p.b);
	printf("v.small.c %lld\nv.small.s %lld\n", (long long)s.c, (long long)s.s);
	printf("v.node.next %lld\nv.node.name %lld\nv.node.i %lld\n", (long long)n.next,
	       (long long)n.name, (long long)n.u.i);
	return 0;
}
"""
STRUCTS = ("flags", "pair", "small", "node")
TARGETS = {
    "x86_64": (["gcc"], [], "little"),
    "s390x": (["s390x-linux-gnu-gcc", "-static"], ["qemu-s390x"], "big"),
}


def _types_source() -> str:
    src = golden.SOURCE
    return src[: src.index("volatile long sink;")]


@pytest.mark.parametrize("arch", list(TARGETS))
def test_struct_bytes_from_the_compiler_decode_to_its_values(arch, tmp_path):
    cc, runner, order = TARGETS[arch]
    if not all(shutil.which(x) for x in [cc[0], *runner]):
        pytest.skip(f"{arch}: needs {cc[0]} {' '.join(runner)}")
    c = tmp_path / "p.c"
    c.write_text(PROGRAM.replace("__TYPES__", _types_source()))
    exe = tmp_path / "p"
    subprocess.run([*cc, "-O1", str(c), "-o", str(exe)], check=True)
    out = subprocess.run([*runner, str(exe)], capture_output=True, text=True, check=True).stdout
    dumps = dict(line.split() for line in out.splitlines())
    btf, _ = golden.build(arch)
    for name in STRUCTS:
        want = {k.split(".")[2]: int(v) for k, v in dumps.items() if k.startswith(f"v.{name}.")}
        (t,) = [x for x in btf.find_types(name) if isinstance(x, T.Struct)]
        data = bytes.fromhex(dumps[name])
        assert len(data) == t.size
        got = convert(type_desc(t), data, 0, order)
        if name == "node":
            got = {"next": got["next"], "name": got["name"], "i": got["u"]["i"]}
        else:
            got = {k: got[k] for k in want}
        assert got == want, name
        if name == "small":
            assert want["c"] == (253 if arch == "s390x" else -3)  # the test saw both signs
        if name == "flags":
            assert isinstance(got["c"], Enumerator) and got["c"].name == "BLUE"


def test_register_narrowing_and_sign_extension():
    import zoo

    from btfgen.decode import function

    table, arch = zoo.build()
    fn = function(arch.functions[0], arch)  # scalars(int a, u8 b, bool c, void *d, long e, ...)
    ctx = bytearray(range(1, 169))
    ctx[112:120] = (0xDEADBEEF_FFFFFFFB).to_bytes(8, "little")  # rdi: int -5, garbage above
    ctx[104:112] = (0x12345678_9ABCDEC8).to_bytes(8, "little")  # rsi: u8 200
    ctx[96:104] = (0xFF00).to_bytes(8, "little")  # rdx: bool false (only the low byte counts)
    ctx[64:72] = (0x7777_8000).to_bytes(8, "little")  # r9: short -32768
    stack = (bytes(8) + (-9).to_bytes(8, "little", signed=True)
             + (0xAAAA_0000_0007).to_bytes(8, "little"))
    v = fn.as_dict(fn.entry(bytes(ctx), stack))
    assert (v["a"], v["b"], v["c"], v["f"], v["g"], v["h"]) == (-5, 200, False, -32768, -9, 7)
    fast = function(arch.functions[1], arch)  # regs_only: one struct read
    assert fast.entry != fast.decode_entry
    assert fast.entry(bytes(ctx)) == fast.decode_entry(bytes(ctx))
    batch = bytes(ctx) * 3
    assert list(fast.entries(batch, len(ctx))) == [fast.decode_entry(bytes(ctx))] * 3


@pytest.mark.parametrize("arch,order", [("s390x", "big"), ("arm64", "little")])
def test_generic_record_header_is_in_target_byte_order(arch, order):
    """A generic record is written by the target's BPF, header included: a big-endian exit
    record (kind 1) must not read as kind 0x01000000 on a little-endian host."""
    import struct

    import toolchains

    import btfgen.decode as bd

    obj = toolchains.compile_c("int __attribute__((noinline)) f(int a, long b) "
                               "{ return a + b; }", arch)
    fn = bd.load(str(obj), arch=arch).function("f")
    head = runtime.RECORD_HEADERS[order].format
    # An int's bytes sit where its whole register word puts them (past the high four bytes on
    # a big-endian target): the record holds register words as the register image copies them.
    exit_rec = struct.pack(head, fn.btf_id, 1, 0) + (42).to_bytes(8, order) + bytes(1016)
    assert fn.decode_record(exit_rec) == 42
    entry_rec = (struct.pack(head, fn.btf_id, 0, 0) + (7).to_bytes(8, order)
                 + (-5).to_bytes(8, order, signed=True) + bytes(1008))
    assert fn.decode_record(entry_rec) == (7, -5)


@pytest.mark.parametrize("arch,order", [("s390x", "big"), ("arm64", "little")])
def test_generic_exit_follows_the_return_pointer_carried_from_entry(arch, order):
    """A struct returned through a pointer the callee does not hand back (s390x's r2, arm64's
    x8): the entry record holds the pointer (`carry`), the exit record has it at data offset 0
    and the struct after it; without it the value is reported missing, never read."""
    import struct

    import toolchains

    import btfgen.decode as bd
    from btfgen.decoder.generic import CARRY_MISSING_BIT

    obj = toolchains.compile_c("struct big { long a, b, c, d; };\n"
                               "struct big __attribute__((noinline)) f(long x) "
                               "{ struct big r = { x, 2, 3, 4 }; return r; }", arch)
    dec = bd.load(str(obj), arch=arch)
    fn = dec.function("f")
    placed = dec.arch_layout("f")
    plan = generic_plan(dec.layout("f"), placed.byte_order, placed.pointer_size)
    assert plan.carry >= 0 and plan.carry_code == 1 + plan.carry // 8
    head = runtime.RECORD_HEADERS[order].format
    value = b"".join(v.to_bytes(8, order, signed=True) for v in (-1, 2, 3, 4))
    exit_rec = (struct.pack(head, fn.btf_id, 1, 0) + (0xFFFF0000DEAD0000).to_bytes(8, order)
                + value + bytes(1024 - 40))
    assert fn.decode_record(exit_rec) == {"a": -1, "b": 2, "c": 3, "d": 4}
    missing = struct.pack(head, fn.btf_id, 1, 1 << CARRY_MISSING_BIT) + bytes(1024)
    got = fn.decode_record(missing)
    assert isinstance(got, Unavailable) and "entry" in got.reason


@pytest.mark.parametrize("arch,runs", [("x86_64", 1), ("i386", 6)])
def test_generic_plan_reads_a_run_of_stack_arguments_with_one_op(arch, runs):
    """Stack arguments at the same stride in the stack and in the record are one op (one read
    on the BPF side); i386's 4-byte slots against the record's 8-byte ones are not. When the
    merged read fails, every value it carries is reported failed, the register values not."""
    import struct

    import toolchains

    import btfgen.decode as bd
    from btfgen.layout import StackPiece
    from btfgen.decoder.generic import FROM_STACK

    src = ("long __attribute__((noinline)) f(long a, long b, long c, long d, long e, long g, "
           "long s1, int s2, long s3) { return a + b + c + d + e + g + s1 + s2 + s3; }")
    dec = bd.load(str(toolchains.compile_c(src, arch)), arch=arch)
    placed, layout = dec.arch_layout("f"), dec.layout("f")
    plan = generic_plan(layout, placed.byte_order, placed.pointer_size)
    stack_ops = [op for op in plan.entry_ops if op.source == FROM_STACK]
    on_stack = [v for a, v in zip(layout.args, plan.entry)
                if all(isinstance(p, StackPiece) for p in a.pieces)]
    assert len(stack_ops) == runs and len(on_stack) >= 3
    if arch != "x86_64":
        return
    bit = next(i for i, op in enumerate(plan.entry_ops) if op.source == FROM_STACK)
    assert all(v.op_mask == 1 << bit for v in on_stack)
    fn = dec.function("f")
    head = runtime.RECORD_HEADERS["little"].format
    data = bytearray(1024)
    for i in range(6):
        data[8 * i:8 * i + 8] = (i + 1).to_bytes(8, "little")
    got = fn.decode_record(struct.pack(head, fn.btf_id, 0, 1 << bit) + bytes(data))
    assert list(got[:6]) == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(v, Unavailable) for v in got[6:])


@pytest.mark.parametrize("arch,order", [("s390x", "big"), ("x86_64", "little")])
def test_integer_records_read_in_one_pass_agree_with_value_by_value(arch, order):
    """A record whose values are all whole integers and pointers reads them with one
    precompiled struct; it must give what the value-by-value path gives, fall back to it where
    an op failed, and refuse a record too short for its values as that path does."""
    import struct

    import toolchains

    import btfgen.decode as bd
    from btfgen.decoder.runtime import DecodeError

    obj = toolchains.compile_c(
        "long __attribute__((noinline)) f(signed char a, unsigned short b, int c, "
        "unsigned long d, void *e, long long g) { return a + b + c + d + (long)e + g; }", arch)
    fn = bd.load(str(obj), arch=arch).function("f")
    assert fn._record_fast[0] is not None and fn._record_fast[1] is not None
    slow = runtime.Function(fn.desc)
    slow._record_fast = (None, None)
    head = runtime.RECORD_HEADERS[order].format
    values = ((-3, 1, True), (65000, 2, False), (-70000, 4, True), (2**63 + 5, 8, False),
              (0xFFFF000012345678, 8, False), (-(2**40), 8, True))
    data = bytearray(1024)
    for (v, size, signed), plan in zip(values, fn.desc.record.entry):
        data[plan.data_off:plan.data_off + size] = v.to_bytes(size, order, signed=signed)
    entry = struct.pack(head, fn.btf_id, 0, 0) + bytes(data)
    assert fn.decode_record(entry) == slow.decode_record(entry) == tuple(v[0] for v in values)
    third = fn.desc.record.entry[2].op_mask
    failed = struct.pack(head, fn.btf_id, 0, third) + bytes(data)
    got = fn.decode_record(failed)
    assert got == slow.decode_record(failed) and isinstance(got[2], Unavailable)
    assert got[:2] == (-3, 65000)
    exit_rec = struct.pack(head, fn.btf_id, 1, 0) + (-9).to_bytes(8, order, signed=True)
    assert fn.decode_record(exit_rec + bytes(8)) == -9
    for short in (entry[:len(entry) - 1024 + fn.desc.record.entry[5].data_off + 4],
                  exit_rec[:-1]):
        with pytest.raises(DecodeError, match="data bytes"):
            fn.decode_record(short)
