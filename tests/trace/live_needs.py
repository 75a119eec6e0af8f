"""What a live uprobe test needs of this machine, said once: why it cannot run here ("" where
it can), for the tests' `pytestmark` skips."""

from __future__ import annotations

import platform
import shutil

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
