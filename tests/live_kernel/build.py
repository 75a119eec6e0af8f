"""Compile what the guest runs: the static loader (cross gcc) and BPF objects (clang-19).

Outputs are cached by a hash of sources and command line, so a rerun compiles nothing.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from . import cache
from .targets import Target

GUEST = Path(__file__).parent / "guest"
CLANG = "clang-19"


class BuildError(RuntimeError):
    pass


def _compile(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise BuildError(f"{what}: {' '.join(cmd)}\n{proc.stderr[-4000:]}")


def loader(target: Target) -> Path:
    src = (GUEST / "loader.c").read_bytes()
    cmd = [target.cc, "-O2", "-static", "-Wall", "-Werror", "-s"]
    dest = cache.ROOT / "loader" / f"{target.deb_arch}-{cache.digest(src, *cmd)}"
    if not dest.exists():
        with tempfile.TemporaryDirectory(prefix="btfgen-loader-") as tmp:
            out = Path(tmp) / "loader"
            _compile([*cmd, "-o", str(out), str(GUEST / "loader.c")], "loader")
            cache.write_atomic(dest, out.read_bytes())
    return dest


def vmlinux_h(btf: Path) -> Path:
    """bpftool's C dump of the kernel's BTF, in a directory of its own for -I."""
    dest = cache.ROOT / "vmlinux-h" / btf.stem / "vmlinux.h"
    if not dest.exists():
        proc = subprocess.run(
            ["bpftool", "btf", "dump", "file", str(btf), "format", "c"],
            capture_output=True,
        )
        if proc.returncode:
            raise BuildError(f"bpftool btf dump {btf}: {proc.stderr.decode()[-500:]}")
        cache.write_atomic(dest, proc.stdout)
    return dest


def bpf_object(
    target: Target, source: Path, include: list[Path], defines: tuple[str, ...] = (),
    debug: bool = False,
) -> bytes:
    """Compile BPF C for the guest: its byte order, its __TARGET_ARCH, its vmlinux.h. `debug`
    adds the object's own BTF (BTF-defined maps need it; the host reads record layouts in it)."""
    cmd = [
        CLANG, "-O2", "-Wall", "-Werror", *(["-g"] if debug else []),
        # Kernels >= 6.19 embed tagged structs anonymously (-fms-extensions); bpftool's dump
        # of their BTF writes such members as "struct foo;".
        "-fms-extensions", "-Wno-microsoft-anon-tag",
        "-target", "bpfeb" if target.big_endian else "bpfel",
        f"-D__TARGET_ARCH_{target.bpf_arch}",
        *(f"-D{d}" for d in defines),
        *(f"-I{d}" for d in include),
    ]
    inputs = [source.read_bytes(), *cmd]
    for d in include:
        for h in sorted(d.glob("*.h")):
            inputs += [h.name, str(h.stat().st_mtime_ns), str(h.stat().st_size)]
    dest = cache.ROOT / "bpf" / f"{source.stem}-{cache.digest(*inputs)}.o"
    if not dest.exists():
        with tempfile.TemporaryDirectory(prefix="btfgen-bpf-") as tmp:
            out = Path(tmp) / "prog.o"
            _compile([*cmd, "-c", str(source), "-o", str(out)], f"BPF {source.name}")
            cache.write_atomic(dest, out.read_bytes())
    return dest.read_bytes()
