"""Cross toolchains for the nine arches, with the kernel's ABI-changing code-generation flags.

One table shared by every test that compiles C for a target: BTF tests, the conformance suite, the
header front end. Objects are cached by a hash of source, arch and command line so reruns are fast.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("BTFGEN_TEST_CACHE", Path.home() / ".cache" / "btfgen-tests"))


@dataclass(frozen=True)
class Toolchain:
    arch: str  # btfgen's canonical arch name
    cc: tuple[str, ...]  # compiler and target selection
    abi_flags: tuple[str, ...]  # the kernel's flags that change the calling convention
    ld_flags: tuple[str, ...] = ()

    @property
    def compiler(self) -> str:
        return self.cc[0]

    def available(self) -> bool:
        return shutil.which(self.compiler) is not None


_CLANG = "clang-19"
_LLD = ("-fuse-ld=lld-19",)

TOOLCHAINS: dict[str, Toolchain] = {
    t.arch: t
    for t in (
        Toolchain("x86_64", ("gcc",), ()),
        Toolchain("i386", ("i686-linux-gnu-gcc",), ("-mregparm=3", "-freg-struct-return")),
        Toolchain("arm64", ("aarch64-linux-gnu-gcc",), ()),
        Toolchain(
            "riscv64", ("riscv64-linux-gnu-gcc",), ("-march=rv64imac_zicsr", "-mabi=lp64")
        ),
        Toolchain(
            "riscv32",
            (_CLANG, "--target=riscv32-unknown-linux-gnu"),
            ("-march=rv32imac", "-mabi=ilp32"),
            _LLD,
        ),
        Toolchain(
            "loongarch64",
            (_CLANG, "--target=loongarch64-unknown-linux-gnu"),
            ("-mabi=lp64s", "-msoft-float"),
            _LLD,
        ),
        Toolchain("s390x", ("s390x-linux-gnu-gcc",), ("-msoft-float",)),
        Toolchain("ppc64le", ("powerpc64le-linux-gnu-gcc",), ("-msoft-float",)),
        Toolchain(
            "arm",
            ("arm-linux-gnueabihf-gcc",),
            ("-marm", "-mfloat-abi=soft", "-mabi=aapcs-linux"),
        ),
    )
}

ARCHES = tuple(TOOLCHAINS)

# Freestanding code: nothing from a libc, no frame tricks that hide arguments from the emulator.
_COMMON = ("-O2", "-g", "-ffreestanding", "-fno-stack-protector", "-fno-pic", "-fno-builtin")


class ToolchainError(RuntimeError):
    pass


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise ToolchainError(f"{what} failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")


def _cached(key_parts: list[str], suffix: str) -> tuple[Path, bool]:
    digest = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:24]
    path = CACHE / f"{digest}{suffix}"
    return path, path.exists()


def compile_c(source: str, arch: str, *, extra: tuple[str, ...] = (), btf: bool = True) -> Path:
    """Compile C for `arch` into an object, with .BTF made from its DWARF by pahole -J (as the
    kernel build does) when `btf`."""
    tc = TOOLCHAINS[arch]
    cmd = [*tc.cc, *_COMMON, *tc.abi_flags, *extra, "-c"]
    path, hit = _cached([source, arch, *cmd, f"btf={btf}"], ".o")
    if hit:
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    src = path.with_suffix(".c")
    src.write_text(source)
    tmp = path.with_suffix(".o.tmp")
    _run([*cmd, str(src), "-o", str(tmp)], f"compiling for {arch}")
    if btf:
        pahole_encode(tmp)
    tmp.rename(path)
    return path


def link_exe(obj: Path, arch: str) -> Path:
    """Link an object into a static freestanding executable whose entry point is `_start`."""
    tc = TOOLCHAINS[arch]
    cmd = [*tc.cc, *tc.abi_flags, "-nostdlib", "-static", "-Wl,-e,_start",
           "-Wl,--build-id=none", *tc.ld_flags]
    path = obj.with_suffix(".elf")
    if path.exists():
        return path
    tmp = obj.with_suffix(".elf.tmp")
    _run([*cmd, str(obj), "-o", str(tmp)], f"linking for {arch}")
    tmp.rename(path)
    return path


def pahole_encode(obj: Path, base: Path | None = None) -> None:
    """Add a .BTF section to `obj` from its DWARF, as the kernel build does (split on `base`)."""
    cmd = ["pahole", "-J"]
    if base is not None:
        cmd += ["--btf_base", str(base)]
    _run([*cmd, str(obj)], f"pahole -J {obj}")


def have(*tools: str) -> bool:
    return all(shutil.which(t) for t in tools)
