"""Each generated header includes what it uses: a BPF program that includes vmlinux.h and then
one btfgen header (nothing of libbpf's) compiles with -Wall -Werror on every arch, and so does a
--self-contained header alone. Generated through the command a build step runs."""

from __future__ import annotations

import subprocess
import sys

import golden
import pytest
from toolchains import ARCHES, TOOLCHAINS, compile_c

from btfgen.abi.arches import load_arch

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
"""


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


def _compile(arch: str, d, prelude: str, header: str) -> None:
    src = d / f"uses_{header.replace('.', '_')}.bpf.c"
    body = {
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
