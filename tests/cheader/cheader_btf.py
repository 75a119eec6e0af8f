"""BTF for a corpus on each arch, made the way the kernel build makes it: the arch's compiler
writes DWARF, then `pahole -J --btf_gen_floats` (scripts/Makefile.btf passes that flag to every
pahole ≥ 1.21; without it pahole 1.24 writes `double` as an 8-byte INT, and placement would put
it in integer registers)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import toolchains

# pahole 1.24's libdw cannot apply LoongArch relocations to the DWARF of a relocatable object
# (every name comes out as the producer string and no FUNC is emitted); in a linked executable
# there is nothing left to relocate.
_LINK_FIRST = {"loongarch64", "mips64el"}  # mips64el: the same, FUNCs lost and misnamed
PAHOLE = ("pahole", "-J", "--btf_gen_floats")


def btf_object(source: str, arch: str) -> Path:
    obj = toolchains.compile_c(source, arch, btf=False)
    if arch in _LINK_FIRST:
        obj = toolchains.link_exe(obj, arch)
    with_btf = obj.with_suffix(".kbtf" + obj.suffix)
    if not with_btf.exists():
        tmp = obj.with_suffix(f".kbtf.tmp{os.getpid()}")  # workers fill one cache at once
        shutil.copyfile(obj, tmp)
        proc = subprocess.run([*PAHOLE, str(tmp)], capture_output=True, text=True)
        if proc.returncode:
            raise toolchains.ToolchainError(f"{' '.join(PAHOLE)} {tmp}: {proc.stderr[-2000:]}")
        tmp.rename(with_btf)
    return with_btf
