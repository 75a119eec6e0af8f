"""Cross toolchains for the ten arches, with the kernel's ABI-changing code-generation flags.

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
    # pahole 1.24 finds no functions in clang's loongarch64 relocatable objects (their DWARF
    # addresses are relocations it does not apply) and writes BTF without FUNCs; it does fine on
    # a linked image, whose .BTF is then copied into the object.
    btf_after_link: bool = False

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
            btf_after_link=True,
        ),
        Toolchain("s390x", ("s390x-linux-gnu-gcc",), ("-msoft-float",)),
        Toolchain("ppc64le", ("powerpc64le-linux-gnu-gcc",), ("-msoft-float",)),
        Toolchain(
            "arm",
            ("arm-linux-gnueabihf-gcc",),
            ("-marm", "-mfloat-abi=soft", "-mabi=aapcs-linux"),
        ),
        # arch/mips/Makefile: n64, soft-float, no PIC calls, no small-data section.
        Toolchain(
            "mips64el",
            ("mips64el-linux-gnuabi64-gcc",),
            ("-mabi=64", "-msoft-float", "-mno-abicalls", "-fno-pic", "-G", "0"),
            # unicorn 2.1's MIPS64 fetches nothing above 4 GiB, where ld puts n64 executables
            # (0x120000000) by default.
            ("-Wl,-Ttext-segment=0x10000000",),
            btf_after_link=True,  # pahole leaves out the FUNCs of its relocatable objects too
        ),
    )
}

ARCHES = tuple(TOOLCHAINS)

# Freestanding code: nothing from a libc, no frame tricks that hide arguments from the emulator.
_COMMON = ("-O2", "-g", "-ffreestanding", "-fno-stack-protector", "-fno-pic", "-fno-builtin")


# As the kernel build passes them: without --btf_gen_floats pahole writes `double` as an INT.
PAHOLE_FLAGS = ("--btf_gen_floats",)


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
    key = [source, arch, *cmd, f"btf={btf}", *PAHOLE_FLAGS]
    path, hit = _cached(key + ["btf-after-link"] if tc.btf_after_link else key, ".o")
    if hit:
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    # Names of this process's own until the rename: test workers fill one cache at once.
    src = path.with_suffix(f".{os.getpid()}.c")
    src.write_text(source)
    tmp = path.with_suffix(f".o.tmp{os.getpid()}")
    try:
        _run([*cmd, str(src), "-o", str(tmp)], f"compiling for {arch}")
        if btf and tc.btf_after_link:
            _btf_via_link(tmp, tc)
        elif btf:
            pahole_encode(tmp)
        tmp.rename(path)
    finally:
        src.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return path


def _btf_via_link(obj: Path, tc: Toolchain) -> None:
    linked = obj.with_name(obj.name + ".btflink.elf")  # beside `obj`, as private as its name
    section = obj.with_name(obj.name + ".btf")
    try:
        # Only addresses matter to pahole: undefined symbols and a missing entry are fine.
        _run([*tc.cc, *tc.abi_flags, "-nostdlib", "-static", *tc.ld_flags,
              "-Wl,--unresolved-symbols=ignore-all", "-Wl,-e,0", str(obj), "-o", str(linked)],
             f"linking {obj} for pahole")
        pahole_encode(linked)
        _run(["llvm-objcopy-19", f"--dump-section=.BTF={section}", str(linked)], "objcopy")
        _run(["llvm-objcopy-19", f"--add-section=.BTF={section}", str(obj)], "objcopy")
    finally:
        linked.unlink(missing_ok=True)
        section.unlink(missing_ok=True)


def link_exe(obj: Path, arch: str) -> Path:
    """Link an object into a static freestanding executable whose entry point is `_start`."""
    tc = TOOLCHAINS[arch]
    cmd = [*tc.cc, *tc.abi_flags, "-nostdlib", "-static", "-Wl,-e,_start",
           "-Wl,--build-id=none", *tc.ld_flags]
    path = obj.with_suffix(".elf")
    if path.exists():
        return path
    tmp = obj.with_suffix(f".elf.tmp{os.getpid()}")
    _run([*cmd, str(obj), "-o", str(tmp)], f"linking for {arch}")
    tmp.rename(path)
    return path


def pahole_encode(obj: Path, base: Path | None = None) -> None:
    """Add a .BTF section to `obj` from its DWARF, as the kernel build does (split on `base`)."""
    cmd = ["pahole", "-J", *PAHOLE_FLAGS]
    if base is not None:
        cmd += ["--btf_base", str(base)]
    _run([*cmd, str(obj)], f"pahole -J {obj}")


def have(*tools: str) -> bool:
    return all(shutil.which(t) for t in tools)
