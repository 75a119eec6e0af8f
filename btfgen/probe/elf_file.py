"""What --stack needs of an ELF object, with the standard library only (the run side has no
pyelftools): its loadable segments (a file offset as the address the object's tables use), its
function symbols (.symtab, else .dynsym: a stripped object names only what it exports), its
GNU build id, and its .eh_frame (eh_frame.py reads it). Identified before anything is read
(magic, class, byte order); a file that is not ELF is an ElfError of one line."""

from __future__ import annotations

import bisect
import struct
from typing import NamedTuple

MAGIC = b"\x7fELF"
SHT_SYMTAB, SHT_DYNSYM, SHT_NOTE, SHT_NOBITS = 2, 11, 7, 8
PT_LOAD = 1
STT_FUNC, STT_GNU_IFUNC = 2, 10
NT_GNU_BUILD_ID = 3


class ElfError(ValueError):
    """Not an ELF object this reader can read: one line, where then what."""


class Segment(NamedTuple):
    offset: int
    vaddr: int
    filesz: int


class Section(NamedTuple):
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


class ElfFile:
    """One object's tables, read once from its bytes."""

    def __init__(self, data: bytes, where: str) -> None:
        if data[:4] != MAGIC or len(data) < 64:
            raise ElfError(f"{where}: not an ELF file")
        if data[4] not in (1, 2) or data[5] not in (1, 2):
            raise ElfError(f"{where}: ELF class {data[4]}, data {data[5]}: not known")
        self.where, self.data = where, data
        self.wide = data[4] == 2
        self.order = "little" if data[5] == 1 else "big"
        self._e = "<" if self.order == "little" else ">"
        try:
            self._read_heads()
        except struct.error:
            raise ElfError(f"{where}: its headers run past its end") from None
        self._symbols: tuple | None = None

    def _read_heads(self) -> None:
        e, data = self._e, self.data
        if self.wide:
            phoff, shoff = struct.unpack_from(e + "QQ", data, 32)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "HHHHH",
                                                                              data, 54)
            ph, sh = e + "IIQQQQQQ", e + "IIQQQQIIQQ"
        else:
            phoff, shoff = struct.unpack_from(e + "II", data, 28)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "HHHHH",
                                                                              data, 42)
            ph, sh = e + "IIIIIIII", e + "IIIIIIIIII"
        self.segments = []
        for i in range(phnum):
            f = struct.unpack_from(ph, data, phoff + i * phentsize)
            if self.wide:
                p_type, _flags, off, vaddr, _pa, filesz = f[:6]
            else:
                p_type, off, vaddr, _pa, filesz = f[:5]
            if p_type == PT_LOAD:
                self.segments.append(Segment(off, vaddr, filesz))
        raw = [struct.unpack_from(sh, data, shoff + i * shentsize) for i in range(shnum)]
        names = raw[shstrndx][4] if shstrndx < len(raw) else 0
        self.sections = []
        for name, typ, _flags, addr, off, size, link, _info, _align, entsize in raw:
            self.sections.append(Section(self._string(names, name), typ, addr, off, size, link,
                                         entsize))

    def _string(self, at: int, offset: int) -> str:
        start = at + offset
        end = self.data.find(b"\0", start)
        return self.data[start:end if end >= 0 else len(self.data)].decode(errors="replace")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def section_bytes(self, s: Section) -> bytes:
        return b"" if s.type == SHT_NOBITS else self.data[s.offset:s.offset + s.size]

    def vaddr_of(self, file_offset: int) -> int | None:
        """The address the object's tables give the byte at `file_offset`, None where no
        loadable segment holds it."""
        for seg in self.segments:
            if seg.offset <= file_offset < seg.offset + seg.filesz:
                return file_offset - seg.offset + seg.vaddr
        return None

    @property
    def build_id(self) -> str | None:
        """The GNU build id, in hex."""
        e = self._e
        for s in self.sections:
            if s.type != SHT_NOTE:
                continue
            note, at = self.section_bytes(s), 0
            while at + 12 <= len(note):
                namesz, descsz, typ = struct.unpack_from(e + "III", note, at)
                name_end = at + 12 + (namesz + 3 & ~3)
                if typ == NT_GNU_BUILD_ID and note[at + 12:at + 12 + namesz] == b"GNU\0":
                    return note[name_end:name_end + descsz].hex()
                at = name_end + (descsz + 3 & ~3)
        return None

    @property
    def has_symtab(self) -> bool:
        return any(s.type == SHT_SYMTAB for s in self.sections)

    def symbols(self) -> tuple:
        """(starts, ends, names) of the function symbols, by address: .symtab's where the
        object has one, else .dynsym's."""
        if self._symbols is None:
            table = [s for s in self.sections if s.type == SHT_SYMTAB] or \
                [s for s in self.sections if s.type == SHT_DYNSYM]
            rows = set()
            for s in table:
                rows.update(self._read_symbols(s))
            rows = sorted(rows)
            self._symbols = ([r[0] for r in rows], [r[0] + r[1] for r in rows],
                             [r[2] for r in rows])
        return self._symbols

    def _read_symbols(self, s: Section):
        e, data = self._e, self.data
        strtab = self.sections[s.link].offset if s.link < len(self.sections) else 0
        fmt = e + ("IBBHQQ" if self.wide else "IIIBBH")
        size = struct.calcsize(fmt)
        for at in range(s.offset, s.offset + s.size - size + 1, s.entsize or size):
            f = struct.unpack_from(fmt, data, at)
            if self.wide:
                name, info, _other, shndx, value, length = f
            else:
                name, value, length, info, _other, shndx = f
            if info & 0xf in (STT_FUNC, STT_GNU_IFUNC) and shndx and value:
                yield value, length, self._string(strtab, name)

    def symbol_at(self, vaddr: int) -> tuple[str, int] | None:
        """(name, offset) of the function symbol whose bytes hold `vaddr` (a symbol of size 0:
        only its own address), None where none does: never the nearest symbol below, which in
        a stripped object is some other function."""
        starts, ends, names = self.symbols()
        i = bisect.bisect_right(starts, vaddr) - 1
        # aliases and symbols inside others sort before: a few back are looked at
        for j in range(i, max(i - 16, -1), -1):
            if vaddr < ends[j] or vaddr == starts[j]:
                return names[j], vaddr - starts[j]
        return None
