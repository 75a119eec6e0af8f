"""Golden examples (generated/examples/<arch>/) stay in sync with the generators; each compiles
(BPF C for its arch's byte order with -D__TARGET_ARCH_<x>, no vmlinux.h) and imports (Python)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import golden
import pytest
from toolchains import ARCHES, TOOLCHAINS

from btfgen.abi.arches import load_arch
from btfgen.decoder.generic import MAX_OPS
from btfgen.probe import spec_format

REGEN = os.environ.get("BTFGEN_REGEN_GOLDEN") == "1"


@pytest.fixture(scope="module", params=ARCHES)
def arch_outputs(request):
    arch = request.param
    if not TOOLCHAINS[arch].available():
        pytest.skip(f"{TOOLCHAINS[arch].compiler} not installed")
    btf, layout = golden.build(arch)
    if len(layout.functions) != len(golden.FUNCTIONS):
        # e.g. pahole reading names wrong from an object whose .debug_str relocations it does
        # not apply: then no FUNC has the name asked for.
        pytest.skip(f"{arch}: pahole's BTF lacks the functions ({len(layout.functions)} found)")
    return arch, golden.outputs(arch)


def test_golden_files_match(arch_outputs):
    arch, out = arch_outputs
    d = golden.GOLDEN / arch
    if REGEN:
        from btfgen.commands.write import write_if_changed

        for name, text in out.items():
            write_if_changed(d / name, text)
    assert sorted(p.name for p in d.iterdir()) == sorted(out), \
        "golden set differs: BTFGEN_REGEN_GOLDEN=1 to regenerate"
    for name, text in out.items():
        assert (d / name).read_text() == text, \
            f"{arch}/{name} is stale: BTFGEN_REGEN_GOLDEN=1 to regenerate"


_CHILD = """
import hashlib, json, sys
sys.path[:0] = sys.argv[2:]
import golden
out = golden.outputs(sys.argv[1])
print(json.dumps({n: hashlib.sha256(t.encode()).hexdigest() for n, t in out.items()}))
"""


def test_generation_is_deterministic(arch_outputs):
    """Two fresh processes with different hash seeds (set and dict order, id()s and string hashes
    all differ) give the outputs of this one."""
    arch, out = arch_outputs
    want = {n: hashlib.sha256(t.encode()).hexdigest() for n, t in out.items()}
    here = str(Path(__file__).resolve().parent)
    tests = str(Path(__file__).resolve().parents[1])
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed,
                   PYTHONPATH=os.pathsep.join([str(golden.ROOT), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, "-c", _CHILD, arch, here, tests], env=env,
                              capture_output=True, text=True, cwd=golden.ROOT)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == want, f"PYTHONHASHSEED={seed}"


def test_parallel_generation_gives_the_same_files(arch_outputs):
    """The whole-kernel path renders in forked processes: not one byte may differ."""
    from btfgen.codegen.outputs import generate

    arch, out = arch_outputs
    btf, layout = golden.build(arch)
    assert generate(layout, btf, self_contained=True, jobs=2) == out


def test_golden_bpf_compiles(arch_outputs, tmp_path):
    arch, out = arch_outputs
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    src = tmp_path / "t.bpf.c"
    calls = "\n".join(
        f'SEC("kprobe") int run_{n}(void *ctx) {{ struct btfgen_args_{n} a; '
        f"return btfgen_entry_{n}(ctx, &a); }}" for n in golden.FUNCTIONS)
    src.write_text('#define BTFGEN_SAVE_ARGS\n#include "btfgen.bpf.h"\n#include "btfgen_specs.h"\n'
                   'char LICENSE[] SEC("license") = "GPL";\n' + calls + "\n")
    big = arch == "s390x"
    target = load_arch(arch).target_arch
    proc = subprocess.run(["clang-19", "-target", "bpfeb" if big else "bpfel", "-O2", "-g",
                           "-Wall", "-Werror", f"-D__TARGET_ARCH_{target}", "-c",
                           str(src), "-o", str(tmp_path / "t.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


# One program for entry and exit (BTFGEN_SESSION), both ways the kernel declares the session
# kfuncs: the per-function decoders with a slot keyed by the session cookie, and the generic
# decoder with the carried pointer in the cookie. (Run by tests/probe/test_session.py.)
SESSION_PROGRAM = """#define BTFGEN_SESSION
#include "btfgen.bpf.h"
char LICENSE[] SEC("license") = "GPL";
struct btfgen_spec spec;
struct btfgen_record rec;
SEC("kprobe") int per_function(void *ctx)
{
	const struct btfgen_args_ret_big *saved;
	struct btfgen_ret_ret_big r;
	int err;

	if (!btfgen_session_is_return(ctx)) {
		struct btfgen_args_ret_big *a = btfgen_session_save_slot(ctx);

		return !a || btfgen_entry_ret_big(ctx, a);
	}
	saved = btfgen_session_saved_slot(ctx);
	err = btfgen_exit_ret_big(ctx, saved, &r);
	btfgen_session_release_slot(ctx);
	return err;
}
SEC("kprobe") int generic(void *ctx)
{
	if (btfgen_session_is_return(ctx))
		return btfgen_generic_session_exit(ctx, BTFGEN_SP(ctx), &spec, &rec);
	return btfgen_generic_session_entry(ctx, BTFGEN_SP(ctx), &spec, &rec);
}
"""


@pytest.mark.parametrize("kfunc_ctx", [False, True], ids=["before-7.0", "7.0-on"])
def test_golden_bpf_session_compiles(arch_outputs, tmp_path, kfunc_ctx):
    arch, out = arch_outputs
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    src = tmp_path / "s.bpf.c"
    src.write_text(SESSION_PROGRAM)
    target = load_arch(arch).target_arch
    proc = subprocess.run(["clang-19", "-target", "bpfeb" if arch == "s390x" else "bpfel",
                           "-O2", "-g", "-Wall", "-Werror", f"-D__TARGET_ARCH_{target}",
                           *(["-DBTFGEN_SESSION_KFUNC_CTX"] if kfunc_ctx else []), "-c",
                           str(src), "-o", str(tmp_path / "s.o")], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # The kfuncs are in the object as the kernel must resolve them, with the arity it declares.
    btf = subprocess.run(["bpftool", "btf", "dump", "file", str(tmp_path / "s.o")],
                         capture_output=True, text=True)
    if btf.returncode == 0:
        protos = {line.split("'")[1]: line for line in btf.stdout.splitlines()
                  if "FUNC 'bpf_session_" in line}
        assert set(protos) == {"bpf_session_cookie", "bpf_session_is_return"}, btf.stdout


def test_golden_python_imports(arch_outputs, tmp_path):
    arch, out = arch_outputs
    (name, text), = [(n, t) for n, t in out.items() if n.endswith(".py")]
    compile(text, name, "exec")
    path = tmp_path / name
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert sorted(mod.names()) == sorted(golden.FUNCTIONS)
    assert mod.ARCH == arch
    heads = spec_format.size_of(spec_format.EVENT_HEAD) + spec_format.size_of(
        spec_format.RECORD_HEAD)
    for n in golden.FUNCTIONS:
        spec = mod.spec(n)
        assert len(spec) == 20 + 8 * MAX_OPS  # the header, then 8 bytes per op
        # The record sizes the BPF side sends, as the spec says them and as the run side
        # learns them from the descriptor: one number.
        head = spec_format.read_head(spec, mod.BYTE_ORDER)
        desc = mod._descriptor(n)[0]
        assert [head["entry_size"], head["exit_size"]] == [
            spec_format.event_size(desc, k) - heads for k in (0, 1)]
