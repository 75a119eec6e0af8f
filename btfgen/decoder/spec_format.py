"""The generic decoder's wire structs, defined once.

`struct btfgen_op`, the head of `struct btfgen_spec` (its `ops` array follows) and the head of
`struct btfgen_record` (its `data` follows): the BPF header prints the C structs from these
fields (templates/bpf_common.h.j2), the Python side packs and unpacks with the `struct` formats
derived from them (the generated module's `spec()`, the runtime's record header). Byte order is
the target's, so the formats carry none.
"""

from __future__ import annotations

from dataclasses import dataclass

_CODES = {"__u8": "B", "__u16": "H", "__u32": "I", "__u64": "Q"}


@dataclass(frozen=True, slots=True)
class Field:
    ctype: str  # one of _CODES
    name: str
    comment: str = ""

    @property
    def code(self) -> str:
        """The `struct` module's letter for the field (standard sizes, no padding)."""
        return _CODES[self.ctype]


OP = (Field("__u16", "src"), Field("__u16", "dst"), Field("__u16", "size"),
      Field("__u8", "from"), Field("__u8", "pad"))
SPEC_HEAD = (
    Field("__u32", "btf_id"),
    Field("__u8", "nentry", "ops[0, nentry) run at entry"),
    Field("__u8", "nexit", "ops[nentry, nentry + nexit) run at exit"),
    Field("__u8", "ptr_size"),
    Field("__u8", "carry", "0, or 1 + entry data offset / 8 of the return pointer the exit needs"),
)
RECORD_HEAD = (
    Field("__u32", "btf_id"),
    Field("__u32", "kind", "0: entry, 1: exit"),
    Field("__u64", "failed", "bit i: operation i failed (its bytes are zero)"),
)


def struct_format(fields: tuple[Field, ...]) -> str:
    """The fields' `struct` format without a byte-order prefix (so no padding either: the C
    structs are laid out without any)."""
    return "".join(f.code for f in fields)
