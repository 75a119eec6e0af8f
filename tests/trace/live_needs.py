"""What a live uprobe test needs of this machine, said once: why it cannot run here ("" where
it can), for the tests' `pytestmark` skips."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

from btfgen.probe import features

MULTI = (6, 6)  # uprobe_multi links: the tests' default attach mode


def why_not(*, linux: tuple[int, int] | None = MULTI, tools: tuple[str, ...] = ("gcc",),
            machine: str | None = None, more=None) -> str:
    """The first thing missing: a kernel older than `linux` (uprobe_multi links' 6.6 by
    default), a tool of `tools`, clang, another `machine`, what `more()` says, or BPF itself."""
    if linux is not None:
        try:
            major, minor = (int(x) for x in platform.release().split(".")[:2])
        except ValueError:
            return f"cannot read the kernel version {platform.release()!r}"
        if (major, minor) < linux:
            return f"uprobe_multi links need Linux {linux[0]}.{linux[1]}"
    if machine is not None and platform.machine() != machine:
        return f"the expected values are {machine}'s"
    for tool in tools:
        if not shutil.which(tool):
            return f"no {tool}"
    if not (shutil.which("clang-19") or shutil.which("clang")):
        return "no clang"
    return (more() if more else "") or features.bpf_programs().why


def built(tmp_path_factory, name: str, source: str) -> Path:
    """A test program as the stack tests build theirs: -O2 with its symbols and no frame
    pointers (its stacks unwound from .eh_frame alone), threads linked in."""
    d = tmp_path_factory.mktemp(name)
    (d / "target.c").write_text(source)
    subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-pthread", str(d / "target.c"),
                    "-o", str(d / "target")], check=True, capture_output=True)
    return d / "target"
