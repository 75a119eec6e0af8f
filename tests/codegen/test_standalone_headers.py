"""Each generated header includes what it uses: a BPF program that includes vmlinux.h and then
one btfgen header (nothing of libbpf's) compiles with -Wall -Werror on every arch, and so does a
--self-contained header alone. Generated through the command a build step runs."""

from __future__ import annotations

import subprocess
import sys

import golden
import pytest
from toolchains import ARCHES, TOOLCHAINS, compile_c

from btfgen.abi.arches import conventions, load_arch

HEADERS = ("btfgen.bpf.h", "btfgen_specs.h")
# A kernel's BTF always has the <linux/types.h> names the headers use; a small object has them
# only when it uses them.
SOURCE = golden.SOURCE + r"""
typedef signed char __s8; typedef unsigned char __u8; typedef short __s16;
typedef unsigned short __u16; typedef int __s32; typedef unsigned int __u32;
typedef long long __s64; typedef unsigned long long __u64;
typedef __u16 __be16; typedef __u32 __be32; typedef __u32 __wsum;
struct kernel_types { __s8 a; __u8 b; __s16 c; __u16 d; __s32 e; __u32 f; __s64 g; __u64 h;
                      __be16 i; __be32 j; __wsum k; };
struct kernel_types kernel_types;
__attribute__((noinline)) int twin_a(int x, long y) { return x + y; }
__attribute__((noinline)) int twin_b(int x, long y) { return x - y; }
"""
# Functions of one prototype (one FUNC_PROTO in the object's BTF), which share their values.
TWINS = ("twin_a", "twin_b")


def _generate(arch: str, out, *extra: str):
    if not TOOLCHAINS[arch].available():
        pytest.skip(f"{TOOLCHAINS[arch].compiler} not installed")
    obj = compile_c(SOURCE, arch)
    funcs = [a for f in golden.FUNCTIONS for a in ("--func", f)]
    proc = subprocess.run([sys.executable, "-m", "btfgen", str(obj), "--arch", arch, "--lang",
                           "bpf", "-q", "-o", str(out), *funcs, *extra],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return obj


GENERIC_BODY = ("struct btfgen_spec spec; struct btfgen_record rec; __u64 cookie;\n"
                'SEC("kprobe") int run(void *ctx) { '
                "return btfgen_generic_decode(ctx, BTFGEN_SP(ctx), &spec, 0, &rec) + "
                "btfgen_generic_decode_cookie(ctx, cookie, 0, &rec); }\n")


def _compile(arch: str, d, prelude: str, header: str, body: str | None = None) -> None:
    src = d / f"uses_{header.replace('.', '_')}.bpf.c"
    body = body or {
        "btfgen.bpf.h": 'SEC("kprobe") int run(void *ctx) { struct btfgen_args_scalars a; '
                        "return btfgen_entry_scalars(ctx, &a); }\n",
        "btfgen_specs.h": "struct btfgen_record rec;\n"
                          'SEC("kprobe") int run(void *ctx) { const struct btfgen_spec *s = '
                          "btfgen_spec_at(BTFGEN_SPEC_scalars);\n"
                          "\treturn s ? btfgen_generic_decode(ctx, BTFGEN_SP(ctx), s, 0, &rec) "
                          ": 0; }\n",
    }[header]
    src.write_text(f'{prelude}#include "{header}"\nchar LICENSE[] SEC("license") = "GPL";\n'
                   + body)
    a = load_arch(arch)
    proc = subprocess.run(
        ["clang-19", "-target", "bpfeb" if a.byte_order == "big" else "bpfel", "-O2", "-g",
         "-Wall", "-Werror", f"-D__TARGET_ARCH_{a.target_arch}", f"-I{d}", "-c", str(src),
         "-o", str(src.with_suffix(".o"))], capture_output=True, text=True)
    assert proc.returncode == 0, f"{arch}: {header} after {prelude!r}:\n{proc.stderr}"
    assert proc.stderr == ""


@pytest.mark.parametrize("arch", ARCHES)
def test_after_vmlinux_h_alone(arch, tmp_path):
    """32-bit targets get self-contained headers anyway (BPF's long is 64 bits): those must not
    clash with vmlinux.h either."""
    obj = _generate(arch, tmp_path)
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(obj), "format", "c"],
                          capture_output=True, check=True)
    (tmp_path / "vmlinux.h").write_bytes(dump.stdout)
    for header in HEADERS:
        _compile(arch, tmp_path, '#include "vmlinux.h"\n', header)


@pytest.mark.parametrize("arch", ARCHES)
def test_self_contained_alone(arch, tmp_path):
    _generate(arch, tmp_path, "--self-contained")
    for header in HEADERS:
        _compile(arch, tmp_path, "", header)


@pytest.mark.parametrize("arch", ("x86_64", "s390x", "arm"))
def test_generic_only_leaves_the_per_function_decoders_out(arch, tmp_path):
    """BTFGEN_GENERIC_ONLY (what `btfgen trace`'s program defines): the generic decoder compiles
    without the per-function types and decoders, after vmlinux.h or self-contained, and they are
    really left out (a program using one no longer compiles)."""
    obj = _generate(arch, tmp_path / "vmlinux")
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(obj), "format", "c"],
                          capture_output=True, check=True)
    (tmp_path / "vmlinux" / "vmlinux.h").write_bytes(dump.stdout)
    _generate(arch, tmp_path / "self", "--self-contained")
    only = "#define BTFGEN_GENERIC_ONLY\n"
    _compile(arch, tmp_path / "vmlinux", '#include "vmlinux.h"\n' + only, "btfgen.bpf.h",
             GENERIC_BODY)
    _compile(arch, tmp_path / "self", only, "btfgen.bpf.h", GENERIC_BODY)
    with pytest.raises(AssertionError, match="btfgen_args_scalars|btfgen_entry_scalars"):
        _compile(arch, tmp_path / "self", only, "btfgen.bpf.h")


@pytest.mark.parametrize("arch", ("x86_64", "s390x", "arm"))
def test_only_wanted_keeps_only_the_wanted_decoders(arch, tmp_path):
    """BTFGEN_ONLY_WANTED with BTFGEN_WANT_<name> (what `btfgen trace --filter` defines for the
    filtered functions): that function's decoder compiles, another's is left out (and is there
    without the macro)."""
    _generate(arch, tmp_path, "--self-contained")
    only = "#define BTFGEN_ONLY_WANTED\n#define BTFGEN_WANT_scalars\n"
    _compile(arch, tmp_path, only, "btfgen.bpf.h")  # scalars'
    other = ('SEC("kprobe") int run(void *ctx) { struct btfgen_args_with_enum a; '
             "return btfgen_entry_with_enum(ctx, &a); }\n")
    _compile(arch, tmp_path, "", "btfgen.bpf.h", other)
    with pytest.raises(AssertionError, match="btfgen_args_with_enum|btfgen_entry_with_enum"):
        _compile(arch, tmp_path, only, "btfgen.bpf.h", other)


# User space (the loader that fills the spec map and reads records) includes btfgen_specs.h with
# its own C library: the arches whose cross gcc has one here.
USER_CC = {"x86_64": "gcc", "i386": "i686-linux-gnu-gcc", "arm64": "aarch64-linux-gnu-gcc",
           "riscv64": "riscv64-linux-gnu-gcc", "s390x": "s390x-linux-gnu-gcc",
           "ppc64le": "powerpc64le-linux-gnu-gcc", "arm": "arm-linux-gnueabihf-gcc",
           "mips64el": "mips64el-linux-gnuabi64-gcc"}

_PRINT_TABLE = r"""
#include <stdio.h>
#include "btfgen_specs.h"
static void show(const char *what, const struct btfgen_value_info *v)
{
	printf("%s %s %s %s %d %d %u %u %llx\n", what, v->name, v->type,
	       v->unavailable ? v->unavailable : "-", v->data_off, v->ptr_off, v->size, v->kind,
	       (unsigned long long)v->op_mask);
}
int main(void)
{
	for (unsigned i = 0; i < BTFGEN_NSPECS; i++) {
		printf("func %s %u %u %u\n", btfgen_funcs[i].name, btfgen_funcs[i].btf_id,
		       btfgen_funcs[i].nargs, btfgen_specs[i].nentry);
		for (unsigned a = 0; a < btfgen_funcs[i].nargs; a++)
			show("arg", &btfgen_funcs[i].args[a]);
		if (btfgen_funcs[i].ret)
			show("ret", btfgen_funcs[i].ret);
	}
	return 0;
}
"""


@pytest.mark.parametrize("arch", sorted(USER_CC))
def test_specs_header_in_user_space(arch, tmp_path):
    """It compiles with the target's own C compiler (-Wall -Wextra -Werror) and, run on this
    machine, describes each record as the generic plans that wrote the spec table lay it out."""
    import shutil

    from btfgen.decoder import generic

    cc = USER_CC[arch]
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    _generate(arch, tmp_path, *(a for f in TWINS for a in ("--func", f)))
    src = tmp_path / "loader.c"
    src.write_text(_PRINT_TABLE)
    exe = tmp_path / "loader"
    proc = subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror",
                           f"-I{tmp_path}", str(src), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    if arch != "x86_64":
        return
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    from btfgen.abi.arches import load_arch
    from btfgen.btf.reader import open_btf
    from btfgen.place import place_functions

    btf = open_btf(str(compile_c(SOURCE, arch)))
    funcs = [f for name in golden.FUNCTIONS + TWINS for f in btf.find_funcs(name)]
    layout = place_functions(btf, load_arch(arch, btf.pointer_size), funcs)
    twins = [f for f in layout.functions if f.name in TWINS]
    assert len(twins) == 2 and twins[0].proto is twins[1].proto
    text = (tmp_path / "btfgen_specs.h").read_text()
    assert text.count("btfgen_value_info btfgen_args_") == len(funcs) - 1  # the twins' is one
    want = {}
    for f in layout.functions:
        p = generic.plan(f, layout.byte_order, layout.pointer_size)
        rows = want[f.name] = [f"func {f.name} {f.btf_id} {len(f.args)} {len(p.entry_ops)}"]
        values = [("arg", a, vp) for a, vp in zip(f.args, p.entry)]
        if f.ret is not None:
            values.append(("ret", f.ret, p.exit[0] if p.exit else None))
        for what, v, vp in values:
            off = (vp.data_off, vp.ptr_off, f"{vp.op_mask:x}") if vp else (-1, -1, "0")
            assert (v.unavailable is None) == (vp is not None)
            rows.append(f"{what} {v.name} {v.type_name} {v.unavailable or '-'} {off[0]} "
                        f"{off[1]} {v.size} {_kind(v)} {off[2]}")
    got: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("func "):
            block = got[line.split()[1]] = []
        block.append(line)
    assert got == want


def _kind(v) -> int:
    from btfgen.btf import walk
    from btfgen.btf import types as T

    t = walk.strip(v.type)
    if v.unavailable:
        return 0
    if isinstance(t, T.Int) and t.is_bool:
        return 3
    if isinstance(t, T.Ptr):
        return 4
    if isinstance(t, (T.Int, T.Enum)):
        return 1 if v.signed else 2
    return 5


TRAMPOLINE_BODY = {
    "btfgen.bpf.h": 'SEC("fentry/scalars") int run(__u64 *ctx) { struct btfgen_args_scalars a; '
                    "return btfgen_entry_scalars(ctx, &a); }\n"
                    'SEC("fexit/scalars") int out(__u64 *ctx) { struct btfgen_ret_scalars r; '
                    "return btfgen_exit_scalars(ctx, 0, &r); }\n",
    "btfgen_specs.h": "struct btfgen_record rec; __u64 cookie;\n"
                      'SEC("fexit.multi/*") int run(__u64 *ctx) { const struct btfgen_spec *s = '
                      "btfgen_spec_at(BTFGEN_SPEC_scalars);\n"
                      "\treturn (s ? btfgen_generic_decode(ctx, BTFGEN_SP(ctx), s, 1, &rec) : 0)"
                      " + btfgen_generic_decode_cookie(ctx, cookie, 1, &rec); }\n",
}


@pytest.mark.parametrize("arch", sorted(c.name for c in conventions() if "trampoline" in c.ctxs))
def test_trampoline_headers_after_vmlinux_h(arch, tmp_path):
    """`--ctx trampoline` on every arch that has one: both headers after the arch's vmlinux.h,
    in fentry, fexit and fexit.multi programs (their ctx is the slot array)."""
    obj = _generate(arch, tmp_path, "--ctx", "trampoline")
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(obj), "format", "c"],
                          capture_output=True, check=True)
    (tmp_path / "vmlinux.h").write_bytes(dump.stdout)
    for header in HEADERS:
        _compile(arch, tmp_path, '#include "vmlinux.h"\n', header, TRAMPOLINE_BODY[header])
