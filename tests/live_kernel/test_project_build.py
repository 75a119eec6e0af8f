"""examples/project's Makefile as a build step: it builds from a kernel BTF with btfgen, a second
`make` does nothing, and an input that changes rebuilds only what its change reaches (btfgen and
the vmlinux.h dump rewrite a file only when its text changes)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from . import project

HOST_BTF = Path("/sys/kernel/btf/vmlinux")
COMPILERS = ("clang", "gcc")


def _ran(proc) -> set[str]:
    """Which tools a make run started (its echoed command lines)."""
    tools = set()
    for line in proc.stdout.splitlines():
        if " gen skeleton " in line:
            tools.add("skeleton")
            continue
        word = line.split()[0] if line.split() else ""
        for tool in ("bpftool", "btfgen", *COMPILERS):
            if os.path.basename(word).startswith(tool) or f"-m {tool}" in line[:200]:
                tools.add(tool)
    return tools


@pytest.mark.skipif(not HOST_BTF.exists(), reason="this kernel has no BTF")
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_rebuilds_only_what_changed(tmp_path):
    btf = tmp_path / "vmlinux"
    shutil.copyfile(HOST_BTF, btf)
    funcs = tmp_path / "functions.txt"
    shutil.copyfile(project.PROJECT / "functions.txt", funcs)
    out = tmp_path / "out"
    arch = {"x86_64": "x86_64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)

    def make():
        return project.make(arch, btf, out, f"FUNCTIONS={funcs}")

    first = make()
    assert {"bpftool", "btfgen", "clang", "gcc", "skeleton"} <= _ran(first), first.stdout
    assert (out / arch / "trace").exists()
    assert "Nothing to be done" in make().stdout

    # The same BTF with a new date: both generators run, nothing is compiled.
    os.utime(btf)  # now: newer than every file the first build made
    again = make()
    assert _ran(again) == {"bpftool", "btfgen"}, again.stdout

    # Another function: btfgen's headers change (the BPF object, skeleton and loader follow),
    # vmlinux.h is not dumped again.
    funcs.write_text(funcs.read_text() + "vfs_read\n")
    more = make()
    assert _ran(more) == {"btfgen", "clang", "gcc", "skeleton"}, more.stdout
    assert "Nothing to be done" in make().stdout


def test_make_says_which_arches_it_builds(tmp_path):
    proc = project.make("i386", HOST_BTF, tmp_path, check=False)
    assert proc.returncode != 0
    assert "ARCH=i386: this example builds for x86_64, arm64" in proc.stderr
