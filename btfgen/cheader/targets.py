"""The targets as libclang sees them, from the ABI descriptions (`clang` and `libc` statements):
a triple, and what the type model needs besides.

Parsing for the target, not the host, is what makes `long`, pointers, `long long` alignment on
i386 (4) and arm EABI (8), `char` signedness and `__int128` follow the arch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from btfgen.errors import ArchError


@dataclass(frozen=True, slots=True)
class ClangTarget:
    arch: str  # btfgen's canonical name
    triple: str
    byte_order: str  # "little" | "big"
    pointer_size: int
    # Where a libc's headers for the target may be: /usr/include/<multiarch> when the host runs
    # the target (or has its :arch packages), else a Debian cross libc in /usr/<cross>/include.
    multiarch: str = ""
    cross: tuple[str, ...] = ()


def _target(conv) -> ClangTarget:
    multiarch, *cross = conv.libc_dirs or ("",)
    return ClangTarget(conv.name, conv.clang_triple, conv.byte_order, conv.pointer_size, multiarch,
                  tuple(cross) or ((multiarch,) if multiarch else ()))


@functools.lru_cache(maxsize=1)
def targets() -> dict[str, ClangTarget]:
    """Canonical arch name -> ClangTarget, for every description that names a clang triple."""
    from btfgen.abi.arches import conventions

    return {c.name: _target(c) for c in conventions() if c.clang_triple}


def target_for(arch: str) -> ClangTarget:
    """The target for a canonical arch name, or for any alias the ABI descriptions answer to.
    A family name ("riscv") needs a pointer size that headers cannot supply: unknown here."""
    from btfgen.abi.arches import load_arch

    known = targets()
    if arch in known:
        return known[arch]
    try:
        conv = load_arch(arch)
    except ArchError:
        conv = None
    if conv is not None and conv.name in known:
        return known[conv.name]
    raise ArchError(f"--arch {arch}: unknown architecture (known: {', '.join(known)})")
