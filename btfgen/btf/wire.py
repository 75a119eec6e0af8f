"""The BTF wire format: header, byte order, record layouts. Fields and offsets, no meaning.

A BTF blob is a header, a type section (variable-length records, ids counted from 1 in file order)
and a string section (NUL-terminated names addressed by byte offset). Every field is in the byte
order the magic reveals: 0xEB9F read in that order.

Record = `struct btf_type` (name_off, info, size_or_type: three u32) followed by a kind-dependent
tail: a fixed part and `vlen` equal items (include/uapi/linux/btf.h). `info` holds vlen in bits
0-23, the kind in bits 24-30 and kind_flag in bit 31. Every record field is a 32-bit word, so the
type section is read once as an array of native words (`type_words`) and records are indexed by
word, whatever the file's byte order.

Since 2026 the header may be 32 bytes, adding an optional layout section (between the types and
the strings): one `struct btf_layout` (u8 info_sz, u8 elem_sz, u16 flags) per kind number, as the
encoder knew them, so that a reader can step over the records of a kind it does not know.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass

from btfgen.btf.types import Kind

MAGIC = 0xEB9F
VERSION = 1
HEADER_SIZE = 24  # struct btf_header as of version 1: the shortest there is
LAYOUT_HEADER_SIZE = 32  # the header with layout_off and layout_len
TYPE_SIZE = 12  # struct btf_type
LAYOUT_ENTRY_SIZE = 4  # struct btf_layout
KIND_CODES = 128  # the kind field is 7 bits
VLEN_MASK = 0xFFFFFF  # vlen is 24 bits
KIND_SHIFT, KIND_MASK = 24, 0x7F

# Per kind: (fixed tail bytes, bytes per vlen item). Kinds absent here are unknown.
TAIL: dict[Kind, tuple[int, int]] = {
    Kind.INT: (4, 0),
    Kind.PTR: (0, 0),
    Kind.ARRAY: (12, 0),
    Kind.STRUCT: (0, 12),
    Kind.UNION: (0, 12),
    Kind.ENUM: (0, 8),
    Kind.FWD: (0, 0),
    Kind.TYPEDEF: (0, 0),
    Kind.VOLATILE: (0, 0),
    Kind.CONST: (0, 0),
    Kind.RESTRICT: (0, 0),
    Kind.FUNC: (0, 0),  # vlen is the linkage, not an item count
    Kind.FUNC_PROTO: (0, 8),
    Kind.VAR: (4, 0),
    Kind.DATASEC: (0, 12),
    Kind.FLOAT: (0, 0),
    Kind.DECL_TAG: (4, 0),
    Kind.TYPE_TAG: (0, 0),
    Kind.ENUM64: (0, 12),
}
# Indexed by the 7-bit kind field: (fixed, per item), or None for a kind btfgen does not know.
TAIL_BY_CODE: tuple[tuple[int, int] | None, ...] = tuple(
    TAIL.get(Kind(code)) if code in Kind._value2member_map_ else None
    for code in range(KIND_CODES)
)
KNOWN_CODES = bytes(code for code, t in enumerate(TAIL_BY_CODE) if t is not None)

# The same in 32-bit words: every tail is whole words.
TAIL_WORDS_BY_CODE: tuple[tuple[int, int] | None, ...] = tuple(
    (t[0] // 4, t[1] // 4) if t else None for t in TAIL_BY_CODE
)

# For the scan: words of a whole record without its items (0 for an unknown kind), and words per
# item. `record_words` adds what a layout section says of the kinds btfgen does not know.
_FIXED_WORDS_BY_CODE = tuple(3 + t[0] if t else 0 for t in TAIL_WORDS_BY_CODE)
_ITEM_WORDS_BY_CODE = tuple(t[1] if t else 0 for t in TAIL_WORDS_BY_CODE)


def info_vlen(info: int) -> int:
    return info & VLEN_MASK


def info_kind(info: int) -> int:
    return (info >> KIND_SHIFT) & KIND_MASK


# INT's tail word (BTF_INT_ENCODING / BTF_INT_OFFSET / BTF_INT_BITS).
def int_encoding(word: int) -> int:
    return (word >> 24) & 0x0F


def int_offset(word: int) -> int:
    return (word >> 16) & 0xFF


def int_bits(word: int) -> int:
    return word & 0xFF


# A member's offset word when the composite's kind_flag is set (BTF_MEMBER_BIT_OFFSET/SIZE).
def member_bit_offset(word: int) -> int:
    return word & 0xFFFFFF


def member_bitfield_size(word: int) -> int:
    return word >> 24


class Layout:
    """The header layout for one byte order (records are read as native words: `type_words`)."""

    __slots__ = ("byte_order", "header", "layout_fields", "layout_entry", "magic")

    def __init__(self, byte_order: str):
        p = "<" if byte_order == "little" else ">"
        self.byte_order = byte_order
        self.magic = struct.Struct(p + "H")
        # magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
        self.header = struct.Struct(p + "HBBIIIII")
        # layout_off, layout_len: at HEADER_SIZE in a header of LAYOUT_HEADER_SIZE or more
        self.layout_fields = struct.Struct(p + "II")
        # struct btf_layout: info_sz, elem_sz, flags
        self.layout_entry = struct.Struct(p + "BBH")


LAYOUTS = {"little": Layout("little"), "big": Layout("big")}


class WireError(Exception):
    """A structural defect; the reader adds the file name. `offset` is relative to the blob."""

    def __init__(self, offset: int, what: str):
        super().__init__(what)
        self.offset = offset
        self.what = what


@dataclass(frozen=True, slots=True)
class Header:
    byte_order: str
    version: int
    flags: int
    hdr_len: int
    type_off: int
    type_len: int
    str_off: int
    str_len: int
    layout_off: int = 0  # both 0 in a header shorter than LAYOUT_HEADER_SIZE
    layout_len: int = 0  # 0: no layout section

    @property
    def layout_start(self) -> int:
        return self.hdr_len + self.layout_off

    @property
    def layout_end(self) -> int:
        return self.hdr_len + self.layout_off + self.layout_len

    @property
    def types_start(self) -> int:
        return self.hdr_len + self.type_off

    @property
    def types_end(self) -> int:
        return self.hdr_len + self.type_off + self.type_len

    @property
    def strings_start(self) -> int:
        return self.hdr_len + self.str_off

    @property
    def strings_end(self) -> int:
        return self.hdr_len + self.str_off + self.str_len


def byte_order_of(data: bytes | memoryview) -> str | None:
    """The byte order the magic is written in, or None when this is not BTF."""
    if len(data) < 2:
        return None
    if LAYOUTS["little"].magic.unpack_from(data, 0)[0] == MAGIC:
        return "little"
    if LAYOUTS["big"].magic.unpack_from(data, 0)[0] == MAGIC:
        return "big"
    return None


def parse_header(data: bytes | memoryview) -> Header:
    order = byte_order_of(data)
    if order is None:
        raise WireError(0, "not BTF (no 0xeb9f magic)")
    if len(data) < HEADER_SIZE:
        raise WireError(len(data), f"truncated header ({len(data)} of {HEADER_SIZE} bytes)")
    _, version, flags, hdr_len, type_off, type_len, str_off, str_len = (
        LAYOUTS[order].header.unpack_from(data, 0)
    )
    if version != VERSION:
        raise WireError(2, f"unsupported BTF version {version}")
    if hdr_len < HEADER_SIZE:
        raise WireError(4, f"header length {hdr_len} is shorter than {HEADER_SIZE}")
    if hdr_len > len(data):
        raise WireError(4, f"header length {hdr_len} runs past the end ({len(data)} bytes)")
    layout_off = layout_len = 0
    if hdr_len >= LAYOUT_HEADER_SIZE:  # a shorter header has no layout fields (libbpf alike)
        layout_off, layout_len = LAYOUTS[order].layout_fields.unpack_from(data, HEADER_SIZE)
    h = Header(order, version, flags, hdr_len, type_off, type_len, str_off, str_len,
               layout_off, layout_len)
    if type_off % 4:
        raise WireError(8, f"type section offset {type_off} is not 4-byte aligned")
    if h.types_end > len(data):
        raise WireError(12, f"type section [{h.types_start:#x}, {h.types_end:#x}) runs past "
                            f"the end ({len(data):#x})")
    if h.strings_end > len(data):
        raise WireError(20, f"string section [{h.strings_start:#x}, {h.strings_end:#x}) runs "
                            f"past the end ({len(data):#x})")
    if h.types_start < h.strings_end and h.strings_start < h.types_end:
        raise WireError(8, "type and string sections overlap")
    if layout_len:
        _check_layout_section(h, len(data))
    return h


def _check_layout_section(h: Header, size: int) -> None:
    """Where libbpf requires the layout section to be: 4-aligned, whole entries, after the type
    section and before the string section, inside the blob."""
    where = f"layout section [{h.layout_start:#x}, {h.layout_end:#x})"
    if h.layout_end > size:
        raise WireError(28, f"{where} runs past the end ({size:#x})")
    if h.layout_off % 4:
        raise WireError(24, f"layout section offset {h.layout_off} is not 4-byte aligned")
    if h.layout_len % LAYOUT_ENTRY_SIZE:
        raise WireError(28, f"layout section length {h.layout_len} is not a whole number of "
                            f"{LAYOUT_ENTRY_SIZE}-byte entries")
    if h.layout_off < h.type_off + h.type_len:
        raise WireError(24, f"{where} starts before the end of the type section "
                            f"({h.types_end:#x})")
    if h.layout_off + h.layout_len > h.str_off:
        raise WireError(28, f"{where} runs into the string section ({h.strings_start:#x})")


LayoutEntry = tuple[int, int]  # (info_sz, elem_sz): bytes of the fixed tail, bytes per item


def parse_layout(data: bytes | memoryview, header: Header) -> tuple[LayoutEntry, ...] | None:
    """The layout section, one (info_sz, elem_sz) per kind code from 0, or None without one.
    Every entry must be whole words (libbpf's rule), and a kind btfgen knows must be laid out as
    btfgen reads it: a record stepped over by one size and read by another would be misread."""
    if not header.layout_len:
        return None
    entry = LAYOUTS[header.byte_order].layout_entry
    entries = []
    # Entries past the 128th describe kind numbers the 7-bit field cannot hold: never read.
    end = min(header.layout_end, header.layout_start + KIND_CODES * LAYOUT_ENTRY_SIZE)
    for code, at in enumerate(range(header.layout_start, end, LAYOUT_ENTRY_SIZE)):
        info_sz, elem_sz, _flags = entry.unpack_from(data, at)  # flags: none defined yet
        if info_sz % 4:
            raise WireError(at, f"layout entry for kind {code}: info_sz {info_sz} is not a "
                                f"multiple of 4")
        if elem_sz % 4:
            raise WireError(at + 1, f"layout entry for kind {code}: elem_sz {elem_sz} is not a "
                                    f"multiple of 4")
        known = TAIL_BY_CODE[code]
        if known is not None and known != (info_sz, elem_sz):
            raise WireError(at, f"layout entry for kind {code} ({Kind(code).name}): "
                                f"info_sz {info_sz}, elem_sz {elem_sz}, where the format has "
                                f"{known[0]}, {known[1]}")
        entries.append((info_sz, elem_sz))
    return tuple(entries)


def record_words(layout: tuple[LayoutEntry, ...] | None) -> tuple[tuple[int, ...],
                                                                  tuple[int, ...]]:
    """(words of a record without its items, words per item) by kind code, for `scan_types`:
    the kinds btfgen knows as it reads them, the others as `layout` says (0 words: no layout
    entry, the kind cannot be stepped over)."""
    if layout is None:
        return _FIXED_WORDS_BY_CODE, _ITEM_WORDS_BY_CODE
    fixed = list(_FIXED_WORDS_BY_CODE)
    items = list(_ITEM_WORDS_BY_CODE)
    for code, (info_sz, elem_sz) in enumerate(layout):
        if TAIL_BY_CODE[code] is None:
            fixed[code] = 3 + info_sz // 4
            items[code] = elem_sz // 4
    return tuple(fixed), tuple(items)


def type_words(data: bytes | memoryview, header: Header) -> array:
    """The type section as native u32 words (records are whole words), for fast scanning."""
    words = array("I", bytes(data[header.types_start:header.types_end - header.type_len % 4]))
    if header.byte_order != sys.byteorder:
        words.byteswap()
    return words


def scan_types(words: array, header: Header, first_id: int = 1,
               tables: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
               has_layout: bool = False) -> array:
    """Word index of every type record in the type section, in id order (the first has id
    `first_id`), found in one pass over the info words. `tables`: `record_words` of the layout
    section in force (default: none, every kind btfgen does not know is an error)."""
    fixed_words, item_words = tables if tables is not None else record_words(None)
    # The loop runs once per type (~10^5 in a vmlinux), so a record's length is looked up by
    # its whole info word (a few hundred distinct values in a kernel), and the rare defects
    # (truncation, unknown kind) are told apart after the loop.
    lengths: dict[int, int] = {}
    offsets = array("I")
    append = offsets.append
    pos = 0
    end = len(words)
    try:
        while pos < end:
            info = words[pos + 1]
            length = lengths.get(info)
            if length is None:
                code = (info >> 24) & 0x7F
                if not fixed_words[code]:
                    break
                length = fixed_words[code] + item_words[code] * (info & 0xFFFFFF)
                lengths[info] = length
            append(pos)
            pos += length
    except IndexError:  # a record cut off after its first word
        pass
    if (pos < end and pos + 3 > end) or (pos > end and offsets[-1] + 3 > end):
        start = pos if pos < end else offsets.pop()
        raise WireError(header.types_start + 4 * start,
                        f"type {first_id + len(offsets)}: truncated record "
                        f"({header.type_len - 4 * start} of {TYPE_SIZE} bytes)")
    if pos < end:
        code = info_kind(words[pos + 1])
        why = ("the layout section has no entry for it" if has_layout
               else "no layout section says how long its records are")
        raise WireError(header.types_start + 4 * pos + 4,
                        f"type {first_id + len(offsets)}: unknown kind {code} ({why})")
    if pos == end and header.type_len % 4:
        raise WireError(header.types_end - header.type_len % 4,
                        f"type section ends in {header.type_len % 4} stray bytes")
    if pos != end:
        start = offsets[-1]
        vlen = info_vlen(words[start + 1])
        raise WireError(header.types_start + 4 * start,
                        f"type {first_id + len(offsets) - 1}: record of {4 * (pos - start)} "
                        f"bytes (vlen {vlen}) runs past the end of the type section "
                        f"({header.type_len - 4 * start} bytes left)")
    return offsets
