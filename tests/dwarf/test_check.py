"""`btfgen check` against real compilers' DWARF: the conformance executables of all ten arches
agree everywhere; a function compiled with another convention than its prototype says (i386
regparm(0), as the kernel's asmlinkage) is found."""

from __future__ import annotations

import subprocess
import sys

import pytest
import toolchains

import btfgen
from btfgen.commands.check import summarize
from btfgen.dwarf.compare import AGREE, DISAGREE

REGPARM = """
struct pair { int a, b; };
int sink(int, int, const char *);
__attribute__((regparm(0))) int asml(int facility, int level, const char *fmt)
{ return sink(facility, level, fmt) + 1; }
int normal(int a, int b, int c) { return sink(a, b, 0) + c; }
long long wide(int a, long long b, int c) { return a + b * c; }
int pr(struct pair p, int x) { return p.a * x + p.b; }
"""


def _conformance_exe(arch: str):
    from conformance.capture import batches, build  # tests/ is on sys.path (conftest.py)

    return build(batches(arch)[0])


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_conformance_objects_agree_with_dwarf(arch):
    if not (toolchains.TOOLCHAINS[arch].available() and toolchains.have("pahole")):
        pytest.skip(f"no toolchain for {arch}")
    obj, exe = _conformance_exe(arch)
    verdicts = btfgen.open(str(obj), arch=arch, dwarf=str(exe)).check()
    s = summarize(verdicts)
    bad = [f"{v.name}: " + "; ".join(f"{p.name} btfgen {p.btfgen} DWARF {p.dwarf}"
                                     for p in v.params if p.verdict == DISAGREE)
           for v in verdicts if v.verdict == DISAGREE]
    assert not bad, "\n".join(bad[:20])
    # Most functions with parameters are compared (not set aside as not comparable).
    assert s["compared"] >= 200 and s["params_compared"] >= 600, s


def test_regparm0_divergence_is_found():
    if not toolchains.TOOLCHAINS["i386"].available() or not toolchains.have("pahole"):
        pytest.skip("no i386 toolchain")
    obj = toolchains.compile_c(REGPARM, "i386")
    verdicts = {v.name: v for v in btfgen.open(str(obj), arch="i386", dwarf=str(obj)).check()}
    asml = verdicts["asml"]
    assert asml.verdict == DISAGREE
    assert [(p.name, p.btfgen, p.dwarf) for p in asml.params] == [
        ("facility", "eax[0:4]", "sp+4[0:4]"),
        ("level", "edx[0:4]", "sp+8[0:4]"),
        ("fmt", "ecx[0:4]", "sp+12[0:4]"),
    ]
    for name in ("normal", "wide", "pr"):
        assert verdicts[name].verdict == AGREE, verdicts[name]
    proc = subprocess.run([sys.executable, "-m", "btfgen", "check", str(obj)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "asml" in proc.stdout and "1 disagree" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "btfgen", "check", str(obj), "--func", "normal",
                           "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert '"agree": 1' in proc.stdout
