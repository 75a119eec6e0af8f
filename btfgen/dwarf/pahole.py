"""BTF made from an ELF file's DWARF by `pahole -J`, as the kernel build and the trace example
make it: the one type model (btfgen.btf) serves BTF files, C headers and `-g` binaries alike."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from btfgen.btf.reader import Btf
from btfgen.errors import DwarfError

# As the kernel build passes them: floats as FLOAT (not INT), no Rust units.
PAHOLE_ARGS = ("--btf_gen_floats", "--lang_exclude=rust")


def btf_from_dwarf(path: str | Path) -> Btf:
    """The BTF of `path`'s DWARF (pahole writes it detached into a temporary file)."""
    pahole = shutil.which("pahole")
    if pahole is None:
        raise DwarfError(f"{path}: has DWARF and no .BTF; making BTF from it needs pahole "
                         f"(apt-get install pahole), or pass --btf FILE")
    with tempfile.TemporaryDirectory(prefix="btfgen-pahole-") as tmp:
        out = Path(tmp) / "btf"
        proc = subprocess.run([pahole, *PAHOLE_ARGS, f"--btf_encode_detached={out}", str(path)],
                              capture_output=True, text=True)
        if proc.returncode or not out.exists() or out.stat().st_size == 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            why = lines[-1] if lines else f"exit status {proc.returncode}"
            raise DwarfError(f"{path}: pahole could not make BTF from its DWARF: {why}")
        data = out.read_bytes()
    machine, pointer_size = _elf_machine(path)
    return Btf(str(path), data, elf_machine=machine, elf_pointer_size=pointer_size)


def _elf_machine(path: str | Path) -> tuple[str, int]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        return str(elf["e_machine"]), elf.elfclass // 8


def open_input(path: str, base: str | None = None):
    """BTF from `path` as `open_btf` reads it; an ELF file with DWARF and no .BTF (a program
    built with -g) gets its BTF from pahole, the same type model as every other input."""
    from btfgen.btf.reader import open_btf
    from btfgen.errors import BtfError, NoBtfSection

    try:
        return open_btf(path, base=base)
    except NoBtfSection:
        if base is not None:
            raise  # a module's split BTF must come with the module, not be remade from DWARF
        from .reader import has_dwarf

        if not has_dwarf(path):
            raise BtfError(f"{path}: ELF file has neither .BTF nor DWARF (.debug_info): build it "
                           f"with -g, or give its prototypes with --header") from None
    return btf_from_dwarf(path)
