"""Which ELF function symbols a DWARF definition is: tie its first instruction (DW_AT_low_pc) to
the symbols whose code starts there, the way the arch lays a function out.

Mostly the two are one address. Where they are not, the tie is made only where it is exact:
- GCC puts -fpatchable-function-entry's no-ops (the kernel's ftrace site: riscv, arm64, ppc64le,
  s390x) after the symbol and names the first instruction past them in DWARF. A symbol whose
  code begins with a run of the arch's no-ops (its description's `symbol_entry`) is tied to
  each instruction of the run and the one after it, inside the symbol, where no symbol of its
  own starts. Each, not only the first past the run: the body may begin with a no-op of its
  own (riscv's static-key and alternative sites), which the patch area's cannot be told from.
  The bytes are read, not guessed: no other function starts inside the run, and a DWARF
  definition is the symbol only where their names are one (compare.py), so no other function
  can be taken for it.
- On arm, bit 0 of a Thumb function's symbol is the Thumb bit, not part of the address.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

from btfgen.abi.convention import SymbolEntry
from btfgen.errors import DwarfError

# How far into a symbol no-ops are looked through: a patchable entry is a few instructions.
MAX_NOP_RUN = 64

_STT_FUNC = 2
_SHN_LORESERVE = 0xFF00


@dataclass(frozen=True, slots=True)
class FunctionSymbol:
    name: str
    address: int  # where its code starts (a Thumb symbol's bit 0 cleared)
    size: int
    section: int  # the section index its code is in
    thumb: bool


def read_symbols(elf, section, facts: SymbolEntry) -> list[FunctionSymbol]:
    """Every defined STT_FUNC symbol of `section` (.symtab or .dynsym). Unpacked with struct:
    pyelftools' per-symbol parsing costs 8 s on a vmlinux's 120,000 symbols."""
    order = "<" if elf.little_endian else ">"
    is32 = elf.elfclass == 32
    fmt = order + ("IIIBBH" if is32 else "IBBHQQ")
    size = struct.calcsize(fmt)
    data = section.data()
    strtab = elf.get_section(section["sh_link"]).data()
    out = []
    for entry in struct.iter_unpack(fmt, data[:len(data) - len(data) % size]):
        if is32:
            name_off, value, length, info, _, shndx = entry
        else:
            name_off, info, _, shndx, value, length = entry
        if info & 0xF != _STT_FUNC or shndx == 0:  # defined (not SHN_UNDEF)
            continue
        end = strtab.find(b"\0", name_off)
        if name_off >= len(strtab) or end < 0:
            raise DwarfError(f"symbol name offset {name_off:#x} outside the string table")
        thumb = bool(facts.thumb_nops) and value & 1 == 1
        out.append(FunctionSymbol(strtab[name_off:end].decode("utf-8", "replace"),
                                  value & ~1 if thumb else value, length, shndx, thumb))
    return out


class CodeReader(Protocol):
    def read(self, s: FunctionSymbol, n: int) -> bytes:
        """Up to `n` bytes of the code at `s` (fewer where its section ends, none without)."""


def by_entry(symbols: list[FunctionSymbol], facts: SymbolEntry,
             code: CodeReader) -> dict[int, list[str]]:
    """Symbol names by each address DWARF may give as their first instruction: the symbol's
    own, and each instruction of a no-op run at it and the one after (where no symbol starts)."""
    found: dict[int, list[str]] = {}
    for s in symbols:
        found.setdefault(s.address, []).append(s.name)
    if not (facts.nops or facts.thumb_nops):
        return found
    past: dict[int, list[str]] = {}
    for s in symbols:
        limit = min(s.size, MAX_NOP_RUN + 1)
        for step in _nop_steps(code.read(s, limit), facts.thumb_nops if s.thumb else facts.nops):
            if step < limit and s.address + step not in found:
                past.setdefault(s.address + step, []).append(s.name)
    for address, names in past.items():
        found[address] = names
    return found


def _nop_steps(code: bytes, nops: tuple[bytes, ...]) -> list[int]:
    """The offsets past each no-op of the run that starts `code`."""
    steps = []
    at = 0
    while True:
        nop = next((n for n in nops if code.startswith(n, at)), None)
        if nop is None:
            return steps
        at += len(nop)
        steps.append(at)


class ElfCode:
    """Bytes of the ELF's code sections, read where a symbol points (not whole sections)."""

    def __init__(self, elf) -> None:
        self.elf = elf
        self.sections: dict[int, tuple[int, int, int] | None] = {}

    def read(self, s: FunctionSymbol, n: int) -> bytes:
        where = self._section(s.section)
        if where is None or n <= 0:
            return b""
        addr, offset, size = where
        start = s.address - addr
        if not 0 <= start < size:
            return b""
        stream = self.elf.stream
        stream.seek(offset + start)
        return stream.read(min(n, size - start))

    def _section(self, index: int):
        if index not in self.sections:
            where = None
            if index < _SHN_LORESERVE and index < self.elf.num_sections():
                sec = self.elf.get_section(index)
                if sec["sh_type"] != "SHT_NOBITS":
                    where = (sec["sh_addr"], sec["sh_offset"], sec["sh_size"])
            self.sections[index] = where
        return self.sections[index]
