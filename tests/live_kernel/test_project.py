"""examples/project in real kernels: built here by its Makefile for the guest kernel's BTF and
arch (cross-compiled for arm64), run in the guest over the scenario's system calls, and every
printed value compared with the value the call passed: the typed per-function decoders
(kprobes), then the generic decoder on one kprobe_multi link with a cookie per function."""

from __future__ import annotations

import re

import pytest

from btfgen.btf.reader import open_btf

from . import build, cache, printed, project, scenario
from .conftest import btf_for, kernel_for, unavailable
from .guest import Guest

pytestmark = pytest.mark.live

# Kernels with kprobe_multi, on the arches whose libbpf -dev packages Debian's release of this
# machine has (riscv64 is not a release architecture of bookworm: no cross libbpf to link).
TARGETS = ("unstable-amd64", "unstable-arm64")
EMPTY_BUNDLE = b"BTFGBNDL" + bytes(16)  # the loader only makes the calls
TYPED = ("vfs_fallocate", "make_kuid", "shmem_file_llseek")


@pytest.mark.parametrize("name", TARGETS)
def test_project_in_guest(name, tmp_path):
    k = kernel_for(name)
    t = k.target
    btf_path = btf_for(k)
    try:
        trace = project.build_for(t, btf_path, tmp_path / "out")
    except project.debian.PackageError as e:
        unavailable(f"{name}: the target's libbpf -dev packages cannot be had: {e}")
    table = open_btf(str(btf_path))
    psize = table.pointer_size
    g = Guest()
    g.file("trace", trace.read_bytes(), 0o755)
    g.file("loader", build.loader(t).read_bytes(), 0o755)
    g.file("empty.bundle", EMPTY_BUNDLE)
    calls = " ".join(" ".join(a) for a in scenario.actions(psize))
    g.step("typed", f"/trace -- /loader /empty.bundle {calls} 2>&1")
    g.step("multi", f"/trace -m -- /loader /empty.bundle {calls} 2>&1")
    boot = g.run(k)
    problems = []
    for step in ("typed", "multi"):
        text, rc = boot.section(step)
        cache.write_atomic(cache.ROOT / "results" / f"project-{step}-{name}.txt", text.encode())
        if rc:
            problems.append(f"{step}: exit {rc}:\n{text[-2000:]}")
            continue
        problems += check(step, text, table, "big" if t.big_endian else "little")
    assert not problems, f"{name} ({k.release}):\n" + "\n".join(problems)


def check(step: str, text: str, table, order: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    pagesize, calls = printed.loader_said(lines)
    problems, checked = [], 0
    for exp in scenario.expectations(table.pointer_size, pagesize):
        f = exp.function
        if step == "typed" and f not in TYPED:
            continue
        funcs = table.find_funcs(f)
        if not funcs:
            problems.append(f"{step}: {f} is not in the kernel's BTF")
            continue
        params = {p.name for p in funcs[0].proto.params}
        want = {a: v for a, v in exp.args.items() if a in params or a not in exp.optional}
        entry = _entry(lines, f, want, order)
        if entry is None:
            seen = [line for line in lines if line.startswith(f + "(")]
            problems.append(f"{step}: {f}: no call with {want}; printed: {seen[:4]}")
            continue
        checked += len(want)
        ret = exp.returned(calls)
        if ret is None:
            continue
        # Typed lines carry the return on the same line; generic records on the next "f -> ".
        got = entry[1] if entry[1] is not None else next(
            (line.split(" -> ", 1)[1] for line in lines[entry[0] + 1:]
             if line.startswith(f + " -> ")), None)
        if got is None or not printed.same(ret, printed.value(got, order)):
            problems.append(f"{step}: {f}: return expected {ret:#x}, printed {got}")
        checked += 1
    if checked < (8 if step == "typed" else 15):
        problems.append(f"{step}: only {checked} values checked:\n{text[-1500:]}")
    return problems


def _entry(lines: list[str], fn: str, want: dict[str, int], order: str):
    """(line index, return text or None) of the first call of `fn` with the wanted arguments."""
    for i, line in enumerate(lines):
        m = re.match(rf"{re.escape(fn)}\((.*)\)(?: -> (.*))?$", line)
        if m:
            args = printed.fields(m.group(1))
            if all(a in args and printed.same(v, printed.value(args[a], order))
                   for a, v in want.items()):
                return i, m.group(2)
    return None
