"""--stack=user's register offsets (build.py's STACK_REGS and STACK_USER_MODE: where trace.bpf.c
reads the user registers in a uprobe's ctx, or in a kernel function's task's pt_regs) against
struct pt_regs as the kernels' own BTF lays it out: the running kernel's (x86_64), and the
arm64 7.2 kernel's where the live tests' cache has its BTF."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from btfgen.abi import ctx
from btfgen.abi.ctx import field_location
from btfgen.btf.reader import open_btf
from btfgen.trace import build

VMLINUX = "/sys/kernel/btf/vmlinux"
CACHE = Path(os.environ.get("BTFGEN_LIVE_CACHE", Path.home() / ".cache" / "btfgen-live")) / "btf"
# Each register the build names, as the arch's struct pt_regs names its member
MEMBERS = {"x86_64": {"IP": "ip", "SP": "sp", "FP": "bp", "MODE": "cs"},
           "arm64": {"IP": "pc", "SP": "sp", "FP": "regs[29]", "LR": "regs[30]",
                     "MODE": "pstate"}}


def _btf(arch: str) -> str | None:
    if arch == "x86_64" and platform.machine() == "x86_64" and os.path.exists(VMLINUX):
        return VMLINUX
    found = sorted(CACHE.glob("arm64-7.2*.btf")) if arch == "arm64" else []
    return str(found[0]) if found else None


@pytest.mark.parametrize("arch", sorted(MEMBERS))
def test_stack_registers_where_the_kernels_pt_regs_has_them(arch):
    path = _btf(arch)
    if path is None:
        pytest.skip(f"no {arch} kernel BTF here")
    regs = ctx._find_struct(open_btf(path), ("pt_regs",))
    mode, mask, user = build.STACK_USER_MODE[arch]
    offsets = {**build.STACK_REGS[arch], "MODE": mode}
    assert set(offsets) == set(MEMBERS[arch])
    for name, member in MEMBERS[arch].items():
        at, size = field_location(regs, member)
        assert offsets[name] == at, (name, member)
        # the build's words are read 8 bytes at a time: a smaller member (x86's cs) is its
        # word's low bytes (little-endian), the bits the mask keeps
        assert size == 8 or (name == "MODE" and mask < 1 << (8 * size)), (name, size)
    assert mask & user == user


def test_stack_flags_copy_the_words_they_read():
    flags = dict(f[2:].split("=") for f in build.stack_flags(("kernel", "user"), "x86_64")
                 if "=" in f)
    words = [int(v) for k, v in flags.items() if k.startswith("TRACE_REG_")]
    assert int(flags["TRACE_REGS_FROM"]) == min(words)
    assert int(flags["TRACE_REGS_TO"]) == max(words) + 8
