"""The trampoline ctx's goldens (generated/examples/trampoline/<arch>/) stay in sync with the
generators, and their BPF C compiles (-Wall -Werror, the arch's byte order) into the programs a
trampoline runs: fentry and fexit with the per-function decoders, the generic decoder over the
spec table at entry and exit (the tracing_multi way: every slot through bpf_get_func_arg)."""

from __future__ import annotations

import importlib.util
import os
import subprocess

import golden
import pytest
from toolchains import TOOLCHAINS

from btfgen.abi.arches import conventions, load_arch

REGEN = os.environ.get("BTFGEN_REGEN_GOLDEN") == "1"
ARCHES = sorted(c.name for c in conventions() if "trampoline" in c.ctxs)
# The arches whose trampoline outputs are kept as goldens (the others are compiled and
# imported below, not kept: their text differs from these only where their rules do).
GOLDEN_ARCHES = ("arm64", "x86_64")


def test_every_arch_with_a_trampoline_is_tested():
    assert ARCHES == ["arm64", "loongarch64", "ppc64le", "riscv64", "s390x", "x86_64"]


@pytest.fixture(scope="module", params=ARCHES)
def arch_outputs(request):
    arch = request.param
    if not TOOLCHAINS[arch].available():
        pytest.skip(f"{TOOLCHAINS[arch].compiler} not installed")
    btf, layout = golden.build(arch, "trampoline")
    if len(layout.functions) != len(golden.TRAMPOLINE_FUNCTIONS):
        pytest.skip(f"{arch}: pahole's BTF lacks the functions ({len(layout.functions)} found)")
    return arch, golden.outputs(arch, "trampoline"), layout


def test_golden_files_match(arch_outputs):
    arch, out, _ = arch_outputs
    if arch not in GOLDEN_ARCHES:
        pytest.skip(f"{arch}: no trampoline goldens kept")
    d = golden.TRAMPOLINE / arch
    if REGEN:
        from btfgen.commands.write import write_if_changed

        for name, text in out.items():
            write_if_changed(d / name, text)
    assert sorted(p.name for p in d.iterdir()) == sorted(out), \
        "golden set differs: BTFGEN_REGEN_GOLDEN=1 to regenerate"
    for name, text in out.items():
        assert (d / name).read_text() == text, \
            f"trampoline/{arch}/{name} is stale: BTFGEN_REGEN_GOLDEN=1 to regenerate"


def test_refused_functions_say_why_in_the_header(arch_outputs):
    arch, out, layout = arch_outputs
    header = out["btfgen.bpf.h"]
    refused = {f.name: f.refused for f in layout.functions if f.refused}
    # SOURCE's struct returns and its 40-byte struct argument: btf_distill_func_proto's.
    assert {"pass_pair", "ret_big", "tiny"} <= set(refused), refused
    for reason in refused.values():
        assert f"The trampoline cannot take it: {reason}" in header
    assert "bpf_get_func_arg(" in header and "bpf_get_func_ret(" in header


PROGRAM = """#define BTFGEN_SAVE_ARGS
#include "btfgen.bpf.h"
#include "btfgen_specs.h"
char LICENSE[] SEC("license") = "GPL";
struct btfgen_record rec;
%s
SEC("fentry.multi/*") int generic_entry(__u64 *ctx)
{
	const struct btfgen_spec *s = btfgen_spec_at(BTFGEN_SPEC_two_slots);

	return s ? btfgen_generic_decode(ctx, BTFGEN_SP(ctx), s, 0, &rec) : 0;
}
SEC("fexit.multi/*") int generic_exit(__u64 *ctx)
{
	const struct btfgen_spec *s = btfgen_spec_at(BTFGEN_SPEC_two_slots);

	return s ? btfgen_generic_decode(ctx, BTFGEN_SP(ctx), s, 1, &rec) : 0;
}
"""


def test_golden_bpf_compiles(arch_outputs, tmp_path):
    arch, out, layout = arch_outputs
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    calls = []
    for f in layout.functions:
        n = f.name
        calls.append(f'SEC("fentry/{n}") int entry_{n}(__u64 *ctx) {{ struct btfgen_args_{n} a; '
                     f"return btfgen_entry_{n}(ctx, &a); }}")
        if f.ret is not None:
            calls.append(f'SEC("fexit/{n}") int exit_{n}(__u64 *ctx) {{ '
                         f"struct btfgen_ret_{n} r; return btfgen_exit_{n}(ctx, 0, &r); }}")
    src = tmp_path / "t.bpf.c"
    src.write_text(PROGRAM % "\n".join(calls))
    target = load_arch(arch).target_arch
    # The header reads slots through a call by default and inlines them for BPF cpu v4 (as
    # `btfgen trace` builds its trampoline programs): both must build.
    for cpu in ([], ["-mcpu=v4"]):
        proc = subprocess.run(["clang-19", "-target", "bpfeb" if arch == "s390x" else "bpfel",
                               "-O2", "-g", "-Wall", "-Werror", *cpu, f"-D__TARGET_ARCH_{target}",
                               "-c", str(src), "-o", str(tmp_path / "t.o")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, (cpu, proc.stderr)
        assert proc.stderr == "", cpu


def test_golden_python_imports(arch_outputs, tmp_path):
    arch, out, _ = arch_outputs
    (name, text), = [(n, t) for n, t in out.items() if n.endswith(".py")]
    path = tmp_path / name
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert sorted(mod.names()) == sorted(golden.TRAMPOLINE_FUNCTIONS)
    assert mod.ARCH == arch and mod.CTX == "trampoline"


def test_layout_json_says_what_is_refused(arch_outputs):
    """layout.json (spliced per prototype for speed) is the document `btfgen layout --json`
    builds: with each refused function's reason."""
    import json

    from btfgen.codegen.outputs import layout_doc

    arch, out, layout = arch_outputs
    doc = json.loads(out["layout.json"])
    assert doc == layout_doc(layout)
    assert doc["ctx_info"]["slots"] is True
    assert {f["name"]: f.get("refused") for f in doc["functions"]} == {
        f.name: f.refused for f in layout.functions}
