"""A program built with -g and no .BTF is input enough: `btfgen layout` and generation take their
types from its DWARF (through pahole, the one type model), on all ten arches, and the layouts
equal those from the object's own pahole BTF."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import toolchains


def _layout(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "btfgen", "layout", *args, "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {f["name"]: {k: v for k, v in f.items() if k != "btf_id"}
            for f in json.loads(proc.stdout)["functions"]}


def _without_source(funcs: dict) -> dict:
    def strip(v):
        return None if v is None else {k: x for k, x in v.items() if k != "source"}
    return {n: {**f, "args": [strip(a) for a in f["args"]], "ret": strip(f["ret"])}
            for n, f in funcs.items()}


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_layout_from_a_debug_binary_equals_pahole_btf(arch, tmp_path):
    if not (toolchains.TOOLCHAINS[arch].available() and toolchains.have("pahole")):
        pytest.skip(f"no toolchain for {arch}")
    from conformance.capture import batches, build  # tests/ is on sys.path (conftest.py)

    obj, exe = build(batches(arch)[0])
    bare = tmp_path / "prog"
    subprocess.run(["llvm-objcopy-19", "--remove-section=.BTF", str(exe), str(bare)], check=True)
    from_btf = _layout(str(obj), "--arch", arch, "--no-dwarf")
    from_dwarf = _layout(str(bare), "--arch", arch, "--no-dwarf")
    assert len(from_btf) >= 400
    assert from_dwarf == from_btf
    # With the binary's DWARF consulted (the default), nothing moves: all agree on these.
    consulted = _layout(str(bare), "--arch", arch)
    assert _without_source(consulted) == from_btf
    assert {a["source"] for f in consulted.values() for a in f["args"]} <= {"abi"}


def test_generate_from_a_debug_binary(tmp_path):
    if not toolchains.have("gcc", "pahole"):
        pytest.skip("no gcc or pahole")
    src = tmp_path / "p.c"
    src.write_text("struct s { long a; int b; };\n"
                   "__attribute__((noinline)) long foo(struct s v, int k)\n"
                   "{ return v.a * k + v.b; }\n"
                   "int main(void) { struct s v = {2, 3}; return (int)foo(v, 4); }\n")
    prog = tmp_path / "prog"
    subprocess.run(["gcc", "-O2", "-g", str(src), "-o", str(prog)], check=True)
    proc = subprocess.run([sys.executable, "-m", "btfgen", str(prog), "--func", "foo",
                           "-o", str(tmp_path / "out"), "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "btfgen_entry_foo" in (tmp_path / "out" / "btfgen.bpf.h").read_text()
    nodebug = tmp_path / "nodebug"
    subprocess.run(["gcc", "-O2", str(src), "-o", str(nodebug)], check=True)
    proc = subprocess.run([sys.executable, "-m", "btfgen", "layout", str(nodebug)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "neither .BTF nor DWARF" in proc.stderr and len(proc.stderr.splitlines()) == 1
