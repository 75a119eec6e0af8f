"""The generated kernel C run in user space, over the kernel's own headers' stand-ins
(kernel_shim/: the x86_64 layouts, the nofault copies as copies that fault below 64 KiB): the
per-function decoders and the generic decoder over struct ftrace_regs give what the Python
decoders read from the same register and stack image, for the golden functions (stack
arguments, structs by value in registers and on the stack, a struct returned through a hidden
pointer); a fault is a failed bit, never a value; the function table finds functions by
address through their symbol names. The real kernel's headers and compiler build the same
header in tests/live_kernel (test_kernel_module.py)."""

from __future__ import annotations

import importlib.util
import random
import struct
import subprocess
from pathlib import Path

import golden
import pytest
from toolchains import TOOLCHAINS

HERE = Path(__file__).resolve().parent
SHIM = HERE / "kernel_shim"
PT_REGS = ("r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di orig_ax ip cs flags sp ss"
           .split())
STACK_BYTES = 256
RECORD = 16 + 8192  # struct btfgen_record: its head and data

HARNESS = r"""
#include "btfgen.kernel.h"
#include <stdio.h>
#include <unistd.h>

static unsigned long addrs[BTFGEN_NSPECS];
uintptr_t shim_mapped_lo, shim_mapped_hi;
const char *shim_symbol_of(unsigned long ip)
{
	for (int i = 0; i < BTFGEN_NSPECS; i++)
		if (addrs[btfgen_functions[i].spec] == ip)
			return btfgen_functions[i].name;
	return "no_such_function";
}

static void out(const void *p, size_t n) { fwrite(p, 1, n, stdout); }

int main(void)
{
	static struct pt_regs entry, exit_;
	static unsigned char stack[%(stack)d] __attribute__((aligned(16)));
	static struct btfgen_record rec;
	static struct btfgen_carry carry;

	if (fread(&entry, sizeof(entry), 1, stdin) != 1 ||
	    fread(&exit_, sizeof(exit_), 1, stdin) != 1 ||
	    fread(stack, sizeof(stack), 1, stdin) != 1)
		return 2;
	entry.sp = (unsigned long)stack;
	exit_.sp = (unsigned long)stack;
	shim_mapped_lo = (uintptr_t)stack;
	shim_mapped_hi = (uintptr_t)stack + sizeof(stack);
	btfgen_spec_cache_init();
	for (int i = 0; i < BTFGEN_NSPECS; i++)
		addrs[i] = 0x100000 + 64 * i;
	/* per function, in the table's order: args struct, ret struct, entry record, exit record */
	%(calls)s
	return 0;
}
"""

CALL = r"""
	{
		struct btfgen_args_%(n)s a;
		struct btfgen_ret_%(n)s r;
		const struct btfgen_spec *s = btfgen_spec_by_ip(addrs[BTFGEN_SPEC_%(n)s]);

		if (s != btfgen_spec_by_name("%(n)s") || s != &btfgen_specs[BTFGEN_SPEC_%(n)s])
			return 3;
		memset(&a, 0, sizeof(a));
		memset(&r, 0, sizeof(r));
		btfgen_entry_%(n)s((const void *)&entry, &a);
		btfgen_exit_%(n)s((const void *)&exit_, &a, &r);
		__u32 sizes[2] = { sizeof(a), sizeof(r) };

		out(sizes, sizeof(sizes));
		out(&a, sizeof(a));
		out(&r, sizeof(r));
		/* bytes no decoder writes are noise, never read as a value */
		memset(&rec, 0xa5, sizeof(rec));
		btfgen_generic_entry((const void *)&entry, s, &rec, &carry, BTFGEN_CARRY_SIZE);
		out(&rec, sizeof(rec));
		memset(&rec, 0x5a, sizeof(rec));
		btfgen_generic_exit((const void *)&exit_, s, &rec, &carry, BTFGEN_CARRY_SIZE);
		out(&rec, sizeof(rec));
	}
"""


# The generic decoder's two ways: the straight-line decoders the specs name (entry_plan,
# exit_plan), and the ops interpreter every spec falls back to.
WAYS = {"straight": [], "interpreter": ["-DBTFGEN_INTERPRET_ONLY"]}


@pytest.fixture(scope="module", params=sorted(WAYS))
def built(tmp_path_factory, request):
    if not TOOLCHAINS["x86_64"].available():
        pytest.skip("gcc not installed")
    out = golden.kernel_outputs("x86_64")
    if request.param == "straight":  # the golden functions have decoders of their own
        assert ".entry_plan = 2" in out["btfgen.kernel.h"]
    d = tmp_path_factory.mktemp("kernel_c")
    (d / "btfgen.kernel.h").write_text(out["btfgen.kernel.h"])
    (d / "btfgen_x86_64.py").write_text(out["btfgen_x86_64.py"])
    names = list(golden.FUNCTIONS)
    calls = "".join(CALL % {"n": n} for n in names)
    (d / "h.c").write_text(HARNESS % {"stack": STACK_BYTES, "calls": calls})
    proc = subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Werror", "-Wno-unused-function",
                           *WAYS[request.param],
                           "-I", str(SHIM), "-I", str(d), str(d / "h.c"), "-o", str(d / "h")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    spec = importlib.util.spec_from_file_location("btfgen_x86_64_kernel", d / "btfgen_x86_64.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return d / "h", mod, names


def _image(rng, sp_bad: bool = False):
    regs = {r: rng.getrandbits(64) for r in PT_REGS}
    return regs


def _pack(regs) -> bytes:
    return struct.pack("<21Q", *(regs[r] for r in PT_REGS))


def _run(exe, entry, exit_, stack) -> bytes:
    p = subprocess.run([str(exe)], input=_pack(entry) + _pack(exit_) + stack, capture_output=True)
    assert p.returncode == 0, p.returncode
    return p.stdout


@pytest.mark.parametrize("seed", range(5))
def test_records_decode_to_what_python_reads_from_the_same_image(built, seed):
    exe, mod, names = built
    rng = random.Random(seed)
    entry, exit_ = _image(rng), _image(rng)
    stack = bytes(rng.getrandbits(8) for _ in range(STACK_BYTES))
    got = memoryview(_run(exe, entry, exit_, stack))
    at = 0
    for name in names:
        f = mod.function(name)
        args_size, ret_size = struct.unpack_from("<II", got, at)
        at += 8 + args_size + ret_size
        erec = bytes(got[at:at + RECORD])
        at += RECORD
        xrec = bytes(got[at:at + RECORD])
        at += RECORD
        # the stack image at the entry stack pointer: the harness's buffer; the ctx with the
        # stack pointer the Python side reads the stack from (offset 0 = sp)
        want = f.entry(_pack(entry), stack)
        assert f.decode_record(erec) == want, name
        if name == "scalars":  # the typed struct: the same values, field by field
            a = bytes(got[at - 2 * RECORD - ret_size - args_size:at - 2 * RECORD - ret_size])
            fields = struct.unpack_from("<iB?2xQqh6xqI4xq", a)
            assert fields[0:3] == tuple(want[0:3]) and fields[4:] == tuple(want[4:]), fields
            assert fields[3] == want[3], (fields[3], want[3])
        if f.desc.ret is not None:
            ret = f.decode_record(xrec)
            if name == "ret_big":
                # returned through the pointer in rax at exit: random, so unmapped here; the
                # record says the read failed, never a value
                head = struct.unpack_from("<IIQ", xrec)
                assert head[2] != 0 and not isinstance(ret, dict), ret
            else:
                assert ret == f.decode_exit(_pack(exit_), stack,
                                            saved_entry=(_pack(entry), stack)), (name, ret)


CAPTURE_HARNESS = r"""
#include "btfgen.kernel.h"
#include <stdio.h>
#include <sys/mman.h>

uintptr_t shim_mapped_lo, shim_mapped_hi;
const char *shim_symbol_of(unsigned long ip) { return "no_such_function"; }

int main(void)
{
	static struct pt_regs regs;
	static struct btfgen_record rec;
	static struct btfgen_carry carry;
	unsigned char *mem = mmap((void *)%(at)#x, %(size)d, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (mem != (void *)%(at)#x || fread(&regs, sizeof(regs), 1, stdin) != 1 ||
	    fread(mem, %(size)d, 1, stdin) != 1)
		return 2;
	/* the page after the string's is not mapped: a string running into it is cut there */
	shim_mapped_lo = (uintptr_t)mem;
	shim_mapped_hi = (uintptr_t)mem + %(size)d;
	btfgen_spec_cache_init();
	for (int i = 0; i < BTFGEN_NSPECS; i++) {
		memset(&rec, 0xa5, sizeof(rec)); /* noise where nothing is written */
		btfgen_generic_entry((const void *)&regs, &btfgen_specs[btfgen_functions[i].spec], &rec,
				     &carry, BTFGEN_CARRY_SIZE);
		fwrite(&rec, sizeof(rec), 1, stdout);
	}
	return 0;
}
"""
MEM_AT, MEM_SIZE = 0x2000_0000, 4096


@pytest.mark.parametrize("way", sorted(WAYS))
def test_captures_follow_pointers_and_read_strings_a_page_at_most(tmp_path, way):
    """--capture in kernel C: a string behind an argument, and one behind a pointer in a
    struct the argument points to (a hop), read with the nofault copies; a string that runs to
    the end of the mapped memory is cut there, not read past it; a NULL pointer is said."""
    if not TOOLCHAINS["x86_64"].available():
        pytest.skip("gcc not installed")
    from toolchains import compile_c

    import btfgen

    obj = compile_c(golden.SOURCE, "x86_64")
    t = btfgen.open(str(obj), arch="x86_64", ctx="ftrace_regs")
    out = t.generate(["with_enum", "tiny"], ("kernel", "python"),
                     captures=["with_enum: s", "tiny: n->name"])
    if way == "straight":  # each capture's list has a decoder of its own
        assert out["btfgen.kernel.h"].count("btfgen_capture_load(rec, ") >= 2
    (tmp_path / "btfgen.kernel.h").write_text(out["btfgen.kernel.h"])
    (tmp_path / "m.py").write_text(out["btfgen_x86_64.py"])
    (tmp_path / "h.c").write_text(CAPTURE_HARNESS % {"at": MEM_AT, "size": MEM_SIZE})
    p = subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Werror", "-Wno-unused-function",
                        *WAYS[way],
                        "-I", str(SHIM), "-I", str(tmp_path), str(tmp_path / "h.c"), "-o",
                        str(tmp_path / "h")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    spec = importlib.util.spec_from_file_location("kernel_caps", tmp_path / "m.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    names = sorted(["tiny", "with_enum"])  # the table's order: by name

    def run(rdx: int, mem: bytes) -> dict:
        regs = {r: 0 for r in PT_REGS} | {"dx": rdx, "sp": MEM_AT}
        got = subprocess.run([str(tmp_path / "h")], input=_pack(regs) + mem,
                             capture_output=True)
        assert got.returncode == 0, got.returncode
        return {n: mod.function(n).decode_captures(got.stdout[i * RECORD:(i + 1) * RECORD])
                for i, n in enumerate(names)}

    mem = bytearray(MEM_SIZE)
    # a struct node at +128: next, name (-> +192), u
    struct.pack_into("<QQ", mem, 128, 0, MEM_AT + 192)
    mem[192:200] = b"kestrel\0"
    caps = run(MEM_AT + 192, bytes(mem))
    assert str(caps["with_enum"]["s"]) == "kestrel"
    caps = run(MEM_AT + 128, bytes(mem))
    assert str(caps["tiny"]["n->name"]) == "kestrel"
    # a string running to the end of mapped memory: cut at the page's end, never read past it
    tail = bytearray(mem)
    tail[MEM_SIZE - 5:] = b"abcde"
    caps = run(MEM_AT + MEM_SIZE - 5, bytes(tail))
    assert str(caps["with_enum"]["s"]) == "abcde"
    # unmapped: a fault, said; a NULL struct pointer: said
    caps = run(0x1000, bytes(mem))
    said = caps["with_enum"]["s"]
    assert not isinstance(said, str) and "fault" in repr(said).lower(), said
    caps = run(0, bytes(mem))
    said = caps["tiny"]["n->name"]
    assert not isinstance(said, str) and "null" in repr(said).lower(), said


STORE_HARNESS = r"""
#define BTFGEN_STORE_SLOTS 4
#define BTFGEN_STORE_BYTES 64
#include "btfgen.kernel.h"

uintptr_t shim_mapped_lo, shim_mapped_hi;
const char *shim_symbol_of(unsigned long ip) { return ""; }
static struct btfgen_store store;

int main(void)
{
	void *a = btfgen_store_put(&store, 0x1000, 64), *b = btfgen_store_put(&store, 0x2000, 8);

	if (!a || !b || a == b || btfgen_store_put(&store, 0x3000, 65))
		return 1; /* two calls, two slots; more than BTFGEN_STORE_BYTES refused */
	memcpy(a, "first", 6);
	memcpy(b, "second", 7);
	if (btfgen_store_find(&store, 0x1000) != a || btfgen_store_find(&store, 0x2000) != b ||
	    strcmp(btfgen_store_find(&store, 0x2000), "second") || btfgen_store_find(&store, 0x4000))
		return 2; /* each call finds its own, an unknown call nothing */
	if (!btfgen_store_put(&store, 0x3000, 8) || !btfgen_store_put(&store, 0x4000, 8) ||
	    btfgen_store_put(&store, 0x5000, 8))
		return 3; /* full: refused */
	btfgen_store_release(&store, a);
	if (btfgen_store_find(&store, 0x1000) || !btfgen_store_put(&store, 0x5000, 8))
		return 4; /* released: gone, and its slot taken again */
	if (btfgen_store_put(&store, 0, 8))
		return 5; /* no key */
	return 0;
}
"""


def test_store_keeps_each_call_its_own_slot_and_refuses_when_full(tmp_path):
    """struct btfgen_store (arguments larger than an fprobe's entry_data, kept by the call):
    a slot a call, found by its key, refused when full or too large, released for reuse."""
    if not TOOLCHAINS["x86_64"].available():
        pytest.skip("gcc not installed")
    (tmp_path / "btfgen.kernel.h").write_text(golden.kernel_outputs("x86_64")["btfgen.kernel.h"])
    (tmp_path / "s.c").write_text(STORE_HARNESS)
    p = subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Werror", "-Wno-unused-function",
                        "-I", str(SHIM), "-I", str(tmp_path), str(tmp_path / "s.c"), "-o",
                        str(tmp_path / "s")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert subprocess.run([str(tmp_path / "s")]).returncode == 0
