"""Kernel C (`--lang kernel`): the goldens (generated/examples/kernel/<arch>/) stay in sync with the
generators; the ctx rules (a kernel callback's ftrace_regs or pt_regs, never an arch's ftrace_regs
that holds no arguments) are one line and exit 2; names from BTF cannot reach the C."""

from __future__ import annotations

import os
import subprocess
import sys

import golden
import pytest
from toolchains import ARCHES, TOOLCHAINS

REGEN = os.environ.get("BTFGEN_REGEN_GOLDEN") == "1"


@pytest.fixture(scope="module", params=ARCHES)
def kernel_outputs(request):
    arch = request.param
    if not TOOLCHAINS[arch].available():
        pytest.skip(f"{TOOLCHAINS[arch].compiler} not installed")
    btf, layout = golden.build(arch, golden.kernel_ctx(arch))
    if len(layout.functions) != len(golden.FUNCTIONS):
        pytest.skip(f"{arch}: pahole's BTF lacks the functions ({len(layout.functions)} found)")
    return arch, golden.kernel_outputs(arch)


def test_golden_files_match(kernel_outputs):
    arch, out = kernel_outputs
    d = golden.KERNEL / arch
    if REGEN:
        from btfgen.commands.write import write_if_changed

        for name, text in out.items():
            write_if_changed(d / name, text)
    assert sorted(p.name for p in d.iterdir()) == sorted(out), \
        "golden set differs: BTFGEN_REGEN_GOLDEN=1 to regenerate"
    for name, text in out.items():
        assert (d / name).read_text() == text, \
            f"kernel/{arch}/{name} is stale: BTFGEN_REGEN_GOLDEN=1 to regenerate"


def test_the_ctx_offsets_are_asserted_against_the_kernels_struct(kernel_outputs):
    """Every register the ctx description names is checked at compile time against the kernel's
    own struct (its field and offset): a header generated from another kernel's BTF, or from a
    wrong description, does not compile rather than read the wrong word."""
    from btfgen.abi.arches import load_arch

    arch, out = kernel_outputs
    header = out["btfgen.kernel.h"]
    ctx = golden.kernel_ctx(arch)
    spec = load_arch(arch).ctxs[ctx]
    struct = "struct __arch_ftrace_regs" if ctx == "ftrace_regs" else "struct pt_regs"
    for e in spec.entries:
        assert f"_Static_assert(offsetof({struct}, {e.field}) == {e.offset} && " in header, \
            (arch, e)
    assert "bpf_" not in header.replace("btfgen_", ""), "kernel C calls no BPF helper"


def test_struct_by_value_is_its_bytes_and_pointees_are_the_kernels_structs(kernel_outputs):
    arch, out = kernel_outputs
    header = out["btfgen.kernel.h"]
    # pass_pair(struct pair p, int x): the bytes of struct pair, aligned as it is
    assert "__u8 p[" in header and "struct pair p;" not in header
    assert "struct pair {" not in header and "struct small {" not in header
    # tiny(..., struct node *n): a pointer to the kernel's struct, declared, not defined
    assert "\nstruct node;\n" in header and "struct node *n;" in header


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True,
                          text=True, cwd=cwd)


@pytest.mark.parametrize("arch, ctx, why", [
    ("i386", "ftrace_regs", "x86-32 has no DYNAMIC_FTRACE_WITH_ARGS"),
    ("arm", "ftrace_regs", "32-bit arm has no DYNAMIC_FTRACE_WITH_ARGS"),
    ("x86_64", "trampoline", "a kernel callback is handed ftrace_regs or pt_regs"),
])
def test_a_ctx_kernel_code_is_not_handed_is_one_line(tmp_path, arch, ctx, why):
    if not TOOLCHAINS[arch].available():
        pytest.skip(f"{TOOLCHAINS[arch].compiler} not installed")
    from toolchains import compile_c

    obj = compile_c(golden.SOURCE, arch)
    p = _run(str(obj), "--arch", arch, "--lang", "kernel", "--ctx", ctx, "-o", str(tmp_path / "o"),
             cwd=golden.ROOT)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()


def test_kernel_lang_defaults_to_ftrace_regs_and_i386_to_an_error(tmp_path):
    from toolchains import compile_c

    obj = compile_c(golden.SOURCE, "x86_64")
    p = _run(str(obj), "--arch", "x86_64", "--lang", "kernel", "-o", str(tmp_path), "-q",
             cwd=golden.ROOT)
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "btfgen.kernel.h").read_text()
    assert "(ftrace_regs, struct __arch_ftrace_regs)" in text
    if TOOLCHAINS["i386"].available():
        obj = compile_c(golden.SOURCE, "i386")
        p = _run(str(obj), "--arch", "i386", "--lang", "kernel", "-o", str(tmp_path / "i"),
                 cwd=golden.ROOT)
        assert p.returncode == 2 and "--ctx pt_regs" in p.stderr, p.stderr
        p = _run(str(obj), "--arch", "i386", "--lang", "kernel", "--ctx", "pt_regs", "-q",
                 "-o", str(tmp_path / "i"), cwd=golden.ROOT)
        assert p.returncode == 0, p.stderr
        assert "(pt_regs, struct pt_regs)" in (tmp_path / "i" / "btfgen.kernel.h").read_text()
