"""The .BTF section of an ELF file (a vmlinux, a kernel module, a program built with -g and
pahole), read with pyelftools: only the section is read, so a vmlinux with DWARF costs no more
memory than its BTF."""

from __future__ import annotations

import io
from typing import BinaryIO

from btfgen.errors import BtfError, NoBtfSection

SECTION = ".BTF"
MAGIC = b"\x7fELF"


def read_btf_section(path: str, stream: BinaryIO) -> tuple[bytes, str, int]:
    """(the .BTF bytes, e_machine, the pointer size the ELF class says); `path` names the file
    in errors."""
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(stream)
        section = elf.get_section_by_name(SECTION)
        if section is None:
            raise NoBtfSection(f"{path}: ELF file has no {SECTION} section")
        if section["sh_type"] == "SHT_NOBITS":
            raise BtfError(f"{path}: {SECTION} section has no contents (SHT_NOBITS)")
        if section.compressed:
            raise BtfError(f"{path}: compressed {SECTION} section is not supported")
        offset, size = section["sh_offset"], section["sh_size"]
        file_size = stream.seek(0, io.SEEK_END)
        if offset + size > file_size:
            raise BtfError(f"{path}: {SECTION} section [{offset:#x}, {offset + size:#x}) runs "
                           f"past the end of the file ({file_size:#x})")
        stream.seek(offset)
        data = stream.read(size)
        machine = elf["e_machine"]
        pointer_size = elf.elfclass // 8
    except BtfError:
        raise
    except Exception as e:  # noqa: BLE001 - pyelftools raises many kinds on a damaged ELF
        raise BtfError(f"{path}: unreadable ELF file: {e}".splitlines()[0]) from None
    return data, str(machine), pointer_size
