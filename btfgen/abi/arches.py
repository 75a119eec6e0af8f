"""Architecture names → ABI descriptions (btfgen/abi/arches/*.abi; one file per arch).

A description declares the names it answers to: `names` (its canonical name, `uname -m`
spellings), `family` (kernel ARCH / libbpf `__TARGET_ARCH_*` names shared by a 32- and a 64-bit
arch, resolved by the BTF's pointer size) and `elf` (the e_machine pyelftools reports). Adding an
arch is adding a file, for `btfgen trace` too: its run side takes the `uname -m` spellings and
the bpf() syscall number from the manifest the build writes (`run_side_facts`).
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

from btfgen.abi.convention import Convention
from btfgen.abi.dsl import parse_file
from btfgen.errors import ArchError
from btfgen.resources import arches_dir


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> Convention:
    # Named relative to the package so messages and layouts do not depend on where it is installed.
    return parse_file(path, f"btfgen/abi/arches/{path.name}")


@functools.lru_cache(maxsize=1)
def _all() -> tuple[Convention, ...]:
    return tuple(_parsed(p) for p in sorted(arches_dir().glob("*.abi")))


def _by_file_name(key: str) -> Convention | None:
    """The description in `key`.abi when it answers to `key`: a run for one arch parses one
    file, not all eleven (0.08 s). Never another answer than `_all`'s search, since no two
    descriptions answer to one name (tests/abi holds it)."""
    path = arches_dir() / f"{key}.abi"
    if "/" in key or not path.is_file():
        return None
    c = _parsed(path)
    return c if key == c.name or key in c.names else None


def conventions() -> tuple[Convention, ...]:
    return _all()


def arch_names() -> list[str]:
    """Every name `load_arch` accepts, sorted."""
    names = set()
    for c in _all():
        names.add(c.name)
        names.update(c.names)
        names.update(c.families)
    return sorted(names)


def canonical_names() -> list[str]:
    return sorted(c.name for c in _all())


def load_arch(name: str, pointer_size: int | None = None) -> Convention:
    """The description `name` means; a family name picks by `pointer_size` (8 when unknown)."""
    key = name.strip().lower()
    found = _by_file_name(key)
    if found is not None:
        return found
    for c in _all():
        if key == c.name or key in c.names:
            return c
    members = [c for c in _all() if key in c.families]
    if members:
        want = pointer_size or 8
        for c in members:
            if c.pointer_size == want:
                return c
        sizes = ", ".join(f"{c.name} ({c.pointer_size * 8}-bit)" for c in members)
        raise ArchError(f"arch {name!r}: no {want * 8}-bit member of this family (has {sizes})")
    raise ArchError(f"unknown arch {name!r}; valid names: {', '.join(arch_names())}")


def arch_for_elf_machine(machine: str, pointer_size: int | None = None) -> Convention | None:
    """The description for a pyelftools e_machine ("EM_AARCH64"), or None if none matches."""
    # EM_RISCV is both riscv32 and riscv64: prefer the pointer size given, else 64-bit.
    matches = sorted((c for c in _all() if c.elf_machine == machine), key=lambda c: -c.pointer_size)
    if pointer_size is not None:
        matches = [c for c in matches if c.pointer_size == pointer_size] or matches
    return matches[0] if matches else None


def bpf_syscall(conv: Convention) -> int:
    """The bpf() syscall's number on `conv`'s arch."""
    if conv.bpf_syscall is None:
        raise ArchError(f"{conv.path}: no `bpf_syscall` (the bpf() syscall's number, which "
                        "tracing needs)")
    return conv.bpf_syscall


def host_bpf_syscall() -> int:
    """The bpf() syscall's number on this machine, from the description of its `uname -m`."""
    return bpf_syscall(load_arch(platform.machine()))


def run_side_facts(conv: Convention) -> dict:
    """What a trace directory's run side, which has no descriptions, needs to know of the arch
    it was built for: the `uname -m` spellings it may run on, its byte order (MIPS spells both
    `mips64`) and the bpf() syscall's number."""
    return {"uname": list(conv.names), "byte_order": conv.byte_order,
            "bpf_syscall": bpf_syscall(conv)}
