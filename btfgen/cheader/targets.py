"""The nine targets as libclang sees them: a triple, and what the type model needs besides.

Parsing for the target, not the host, is what makes `long`, pointers, `long long` alignment on
i386 (4) and arm EABI (8), `char` signedness and `__int128` follow the arch.
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.errors import ArchError


@dataclass(frozen=True, slots=True)
class Target:
    arch: str  # btfgen's canonical name
    triple: str
    byte_order: str  # "little" | "big"
    pointer_size: int
    # Where a libc's headers for the target may be: /usr/include/<multiarch> when the host runs
    # the target (or has its :arch packages), else a Debian cross libc in /usr/<cross>/include.
    multiarch: str = ""
    cross: tuple[str, ...] = ()


TARGETS: dict[str, Target] = {
    t.arch: t
    for t in (
        Target("x86_64", "x86_64-linux-gnu", "little", 8, "x86_64-linux-gnu",
               ("x86_64-linux-gnu",)),
        Target("i386", "i686-linux-gnu", "little", 4, "i386-linux-gnu", ("i686-linux-gnu",)),
        Target("arm64", "aarch64-linux-gnu", "little", 8, "aarch64-linux-gnu",
               ("aarch64-linux-gnu",)),
        Target("riscv64", "riscv64-linux-gnu", "little", 8, "riscv64-linux-gnu",
               ("riscv64-linux-gnu",)),
        Target("riscv32", "riscv32-linux-gnu", "little", 4, "riscv32-linux-gnu",
               ("riscv32-linux-gnu",)),
        Target("loongarch64", "loongarch64-linux-gnu", "little", 8, "loongarch64-linux-gnu",
               ("loongarch64-linux-gnu",)),
        Target("s390x", "s390x-linux-gnu", "big", 8, "s390x-linux-gnu", ("s390x-linux-gnu",)),
        Target("ppc64le", "powerpc64le-linux-gnu", "little", 8, "powerpc64le-linux-gnu",
               ("powerpc64le-linux-gnu",)),
        # The kernel is soft-float, Debian's arm libc hard-float; no type's layout differs, and
        # the hard-float triple makes that libc's headers parse (gnu/stubs.h picks by it).
        Target("arm", "arm-linux-gnueabihf", "little", 4, "arm-linux-gnueabihf",
               ("arm-linux-gnueabihf", "arm-linux-gnueabi")),
    )
}


def target_for(arch: str) -> Target:
    """The target for a canonical arch name, or for any alias the ABI descriptions answer to."""
    target = TARGETS.get(arch)
    if target is not None:
        return target
    canonical = _canonical_from_abi(arch)
    if canonical in TARGETS:
        return TARGETS[canonical]
    raise ArchError(f"--arch {arch}: unknown architecture (known: {', '.join(TARGETS)})")


def _canonical_from_abi(arch: str) -> str | None:
    # The ABI descriptions own the alias table (kernel, uname and libbpf names); ask them rather
    # than keep a second table that could disagree. A family name ("riscv") needs a pointer
    # size that headers cannot supply, so it stays unknown here.
    try:
        from btfgen.abi.arches import load_arch
    except ImportError:
        return None
    try:
        return load_arch(arch).name
    except (ArchError, Exception):  # a description that does not parse is not ours to report
        return None
