"""The running kernel's BTF, placed once per test session (when there is one)."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

VMLINUX = Path("/sys/kernel/btf/vmlinux")


def missing() -> str | None:
    if not VMLINUX.exists():
        return "no /sys/kernel/btf/vmlinux"
    for tool in ("clang-19", "bpftool"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    return None


@cache
def btf():
    from btfgen.btf.reader import open_btf

    return open_btf(str(VMLINUX))


@cache
def placed_all():
    from btfgen.target import Target, open

    b = btf()
    return Target(b, open(str(VMLINUX), dwarf=None).convention).place()


def placed(names: tuple[str, ...]):
    from btfgen.target import Target, open

    b = btf()
    return Target(b, open(str(VMLINUX), dwarf=None).convention).place(
        [f for n in names for f in b.find_funcs(n)])


def vmlinux_h(directory: Path) -> Path:
    path = directory / "vmlinux.h"
    if not path.exists():
        text = subprocess.run(["bpftool", "btf", "dump", "file", str(VMLINUX), "format", "c"],
                              capture_output=True, text=True, check=True).stdout
        path.write_text(text)
    return path


def clang_bpf(src: Path, obj: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror",
                           "-D__TARGET_ARCH_x86", *extra, "-c", str(src), "-o", str(obj)],
                          capture_output=True, text=True)
