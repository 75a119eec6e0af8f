"""The few facts the harness reads from a linked executable: segments, symbols, entry points."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile


@dataclass(frozen=True, slots=True)
class Segment:
    vaddr: int
    data: bytes  # file bytes, zero-filled to the memory size
    writable: bool


@dataclass(frozen=True, slots=True)
class Executable:
    path: Path
    entry: int
    segments: tuple[Segment, ...]
    symbols: dict[str, int]  # name -> address (a function's: where calls from this object land)

    def read(self, addr: int, size: int) -> bytes:
        for seg in self.segments:
            if seg.vaddr <= addr and addr + size <= seg.vaddr + len(seg.data):
                return seg.data[addr - seg.vaddr:addr - seg.vaddr + size]
        raise LookupError(f"{self.path}: {size} bytes at {addr:#x} are in no segment")


def _local_entry_offset(local: int) -> int:
    # ppc64 ELFv2: calls within one TOC enter past the global entry's TOC setup; st_other's
    # three STO_PPC64_LOCAL bits encode that distance (psABI 3.4.1).
    return 0 if local < 2 else (1 << local) >> 2 << 2


def load(path: Path) -> Executable:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        segments = []
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_LOAD":
                continue
            data = seg.data().ljust(seg["p_memsz"], b"\0")
            segments.append(Segment(seg["p_vaddr"], data, bool(seg["p_flags"] & P_FLAGS.PF_W)))
        ppc = elf["e_machine"] == "EM_PPC64"
        symbols = {}
        for sym in elf.get_section_by_name(".symtab").iter_symbols():
            if not sym.name or sym["st_info"]["type"] == "STT_FILE":
                continue
            addr = sym["st_value"]
            if ppc and sym["st_info"]["type"] == "STT_FUNC":
                addr += _local_entry_offset(sym["st_other"]["local"])
            symbols[sym.name] = addr
        return Executable(path, elf["e_entry"], tuple(segments), symbols)
