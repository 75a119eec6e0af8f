"""Compile tests/abi/protos.c for an arch and open its BTF, made as the kernel build makes it.

pahole runs with --btf_gen_floats, as scripts/pahole-flags.sh does for the kernel: without it
float and double become INT records and the FP rules could not be tested. pahole 1.24 finds no
functions in a relocatable LoongArch object (it cannot apply the DWARF relocations), so for an
object without FUNCs the source is linked into a shared object first, relocations resolved.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from toolchains import CACHE, TOOLCHAINS

PROTOS = Path(__file__).with_name("protos.c")


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")


def protos_btf(arch: str):
    return source_btf(arch, PROTOS.read_text())


@cache
def source_btf(arch: str, source: str):
    from btfgen.btf.reader import open_btf

    tc = TOOLCHAINS[arch]
    base = [*tc.cc, *tc.abi_flags, "-O0", "-g", "-ffreestanding", "-fno-stack-protector"]
    key = hashlib.sha256("\0".join([source, *base, "abi-corpus-1"]).encode()).hexdigest()[:24]
    out = CACHE / f"{key}.abi.o"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        # This process's own names until the rename: test workers fill one cache at once.
        src = CACHE / f"{key}.{os.getpid()}.abi.c"
        src.write_text(source)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        try:
            _run([*base, "-c", str(src), "-o", str(tmp)])
            _run(["pahole", "-J", "--btf_gen_floats", str(tmp)])
            if tc.btf_after_link and "-fno-pic" in tc.abi_flags:
                # mips64el: pahole finds only some FUNCs, under wrong names; code built without
                # PIC makes no shared object, so a static link (libgcc for the soft-float calls).
                _run([*base, "-nostdlib", "-static", *tc.ld_flags, "-Wl,-e,0", str(src), "-lgcc",
                      "-o", str(tmp)])
                _run(["pahole", "-J", "--btf_gen_floats", str(tmp)])
            elif not any(True for _ in open_btf(str(tmp)).funcs()):
                _run([*base, "-fPIC", "-nostdlib", "-shared", *tc.ld_flags, str(src), "-o",
                      str(tmp)])
                _run(["pahole", "-J", "--btf_gen_floats", str(tmp)])
            tmp.rename(out)
        finally:
            src.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)
    return open_btf(str(out))


def available(arch: str) -> bool:
    return TOOLCHAINS[arch].available() and shutil.which("pahole") is not None
