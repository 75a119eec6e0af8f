"""The BTF type model: one frozen class per kind.

Types refer to each other by id and resolve through the table that made them (`TypeTable`), so a
table can decode lazily and cycles (`struct list_head { struct list_head *next; }`) need no
placeholders. The BTF reader and the C-header front end both produce these classes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol


class Kind(enum.IntEnum):
    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


class Linkage(enum.IntEnum):
    STATIC = 0
    GLOBAL = 1
    EXTERN = 2


class TypeError_(Exception):
    """Raised when a type cannot be measured (a cycle, a FWD used by value, ...)."""


class TypeTable(Protocol):
    pointer_size: int

    def __getitem__(self, type_id: int) -> Type: ...


# Int encoding bits, as in BTF_INT_ENCODING.
INT_SIGNED = 1
INT_CHAR = 2
INT_BOOL = 4


@dataclass(frozen=True, slots=True)
class Type:
    id: int
    name: str
    table: TypeTable = field(repr=False, compare=False)

    kind = Kind.UNKN


@dataclass(frozen=True, slots=True)
class Void(Type):
    kind = Kind.UNKN


@dataclass(frozen=True, slots=True)
class Int(Type):
    size: int
    encoding: int  # INT_SIGNED | INT_CHAR | INT_BOOL
    bit_offset: int
    bits: int
    kind = Kind.INT

    @property
    def signed(self) -> bool:
        return bool(self.encoding & INT_SIGNED)

    @property
    def is_bool(self) -> bool:
        return bool(self.encoding & INT_BOOL)


@dataclass(frozen=True, slots=True)
class _Ref(Type):
    """A kind whose meaning is one other type."""

    type_id: int

    @property
    def type(self) -> Type:
        return self.table[self.type_id]


@dataclass(frozen=True, slots=True)
class Ptr(_Ref):
    kind = Kind.PTR


@dataclass(frozen=True, slots=True)
class Typedef(_Ref):
    kind = Kind.TYPEDEF


@dataclass(frozen=True, slots=True)
class Volatile(_Ref):
    kind = Kind.VOLATILE


@dataclass(frozen=True, slots=True)
class Const(_Ref):
    kind = Kind.CONST


@dataclass(frozen=True, slots=True)
class Restrict(_Ref):
    kind = Kind.RESTRICT


@dataclass(frozen=True, slots=True)
class TypeTag(_Ref):
    kind = Kind.TYPE_TAG


@dataclass(frozen=True, slots=True)
class Array(Type):
    elem_id: int
    index_id: int
    nelems: int
    kind = Kind.ARRAY

    @property
    def elem(self) -> Type:
        return self.table[self.elem_id]


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    type_id: int
    bit_offset: int
    bitfield_size: int  # 0: not a bitfield
    table: TypeTable = field(repr=False, compare=False)

    @property
    def type(self) -> Type:
        return self.table[self.type_id]

    @property
    def offset(self) -> int:
        """Byte offset of a non-bitfield member."""
        return self.bit_offset // 8


@dataclass(frozen=True, slots=True)
class Composite(Type):
    size: int
    members: tuple[Member, ...]
    kind_flag: bool  # members carry bitfield sizes in their offset word


@dataclass(frozen=True, slots=True)
class Struct(Composite):
    kind = Kind.STRUCT


@dataclass(frozen=True, slots=True)
class Union(Composite):
    kind = Kind.UNION


@dataclass(frozen=True, slots=True)
class EnumValue:
    name: str
    value: int


@dataclass(frozen=True, slots=True)
class Enum(Type):
    """ENUM and ENUM64: the same meaning, two encodings (`kind` tells which)."""

    size: int
    signed: bool
    values: tuple[EnumValue, ...]
    is64: bool = False

    @property
    def kind(self) -> Kind:  # type: ignore[override]
        return Kind.ENUM64 if self.is64 else Kind.ENUM


@dataclass(frozen=True, slots=True)
class Fwd(Type):
    is_union: bool
    kind = Kind.FWD


@dataclass(frozen=True, slots=True)
class Func(_Ref):
    """`type` is the FUNC_PROTO."""

    linkage: Linkage
    kind = Kind.FUNC

    @property
    def proto(self) -> FuncProto:
        proto = self.type
        if not isinstance(proto, FuncProto):
            raise TypeError_(f"type {self.id} ({self.name}): FUNC does not point to a FUNC_PROTO")
        return proto


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type_id: int
    table: TypeTable = field(repr=False, compare=False)

    @property
    def type(self) -> Type:
        return self.table[self.type_id]


@dataclass(frozen=True, slots=True)
class FuncProto(Type):
    ret_id: int
    params: tuple[Param, ...]  # without the variadic marker
    variadic: bool
    kind = Kind.FUNC_PROTO

    @property
    def ret(self) -> Type:
        return self.table[self.ret_id]


@dataclass(frozen=True, slots=True)
class Var(_Ref):
    linkage: int
    kind = Kind.VAR


@dataclass(frozen=True, slots=True)
class VarSecinfo:
    type_id: int
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Datasec(Type):
    size: int
    vars: tuple[VarSecinfo, ...]
    kind = Kind.DATASEC


@dataclass(frozen=True, slots=True)
class Float(Type):
    size: int
    kind = Kind.FLOAT


@dataclass(frozen=True, slots=True)
class DeclTag(_Ref):
    component_idx: int  # -1: the tag applies to the type itself
    kind = Kind.DECL_TAG


# ---------------------------------------------------------------------------------------------
# Walking and measuring types. The one depth limit and cycle rule of every walk over types
# (measuring here; spelling in cnames and codegen.cdecl, classifying in abi.classify, describing
# in records.describe, ctx fields in abi.ctx): a chain or a nesting
# deeper than this is a cycle in hostile BTF, not a real kernel type. The reader refuses loops
# of references when it decodes; a loop through members (struct a { struct a x; }) only shows
# as depth.
MAX_DEPTH = 64
MAX_CHAIN = MAX_DEPTH  # the modifier chains strip() follows


def descend(t: Type, depth: int) -> int:
    """The depth one step below `t` (into a type it refers to), or TypeError_ past MAX_DEPTH."""
    if depth >= MAX_DEPTH:
        raise TypeError_(f"type {t.id}: nested deeper than {MAX_DEPTH} (a cycle?)")
    return depth + 1


_QUALIFIERS = (Typedef, Volatile, Const, Restrict, TypeTag)


def strip(t: Type) -> Type:
    """Follow typedef/const/volatile/restrict/type_tag to the type that gives the meaning."""
    for _ in range(MAX_CHAIN):
        if not isinstance(t, _QUALIFIERS):
            return t
        t = t.type
    raise TypeError_(f"type {t.id}: modifier chain longer than {MAX_CHAIN} (a cycle?)")


def strip_cv(t: Type) -> Type:
    """Follow const/volatile/restrict/type_tag but keep typedef names."""
    for _ in range(MAX_CHAIN):
        if not isinstance(t, (Volatile, Const, Restrict, TypeTag)):
            return t
        t = t.type
    raise TypeError_(f"type {t.id}: modifier chain longer than {MAX_CHAIN} (a cycle?)")


def size_of(t: Type, _depth: int = 0) -> int:
    t = strip(t)
    if isinstance(t, (Int, Composite, Enum, Float, Datasec)):
        return t.size
    if isinstance(t, Ptr):
        return t.table.pointer_size
    if isinstance(t, Array):
        return t.nelems * size_of(t.elem, descend(t, _depth))
    raise TypeError_(f"type {t.id} ({t.name or t.kind.name}): has no size")


def align_of(t: Type, max_scalar_align: int, _depth: int = 0) -> int:
    """Alignment as the target lays the type out in memory.

    BTF records no alignment, so it is derived: scalars align to their size up to the arch's
    `max_scalar_align` (i386: 4, arm EABI: 8, 64-bit arches: 16); a composite to its most aligned
    member, unless its layout shows it was packed (a member off its alignment, or a size that is
    not a multiple of it), in which case 1. Padding that natural alignment cannot explain shows
    an `__aligned(n)`: a member placed past the next naturally aligned offset, or tail padding
    past the naturally rounded size, raises the alignment to the smallest power of two that
    explains it.
    """
    t = strip(t)
    if isinstance(t, (Int, Enum, Float)):
        return min(t.size, max_scalar_align) or 1
    if isinstance(t, Ptr):
        return min(t.table.pointer_size, max_scalar_align)
    if isinstance(t, Array):
        return align_of(t.elem, max_scalar_align, descend(t, _depth))
    if isinstance(t, Composite):
        align = 1
        end = 0  # bytes the members seen so far occupy
        for m in t.members:
            # A bitfield contributes its base type's alignment (gcc), but cannot prove packing.
            a = align_of(m.type, max_scalar_align, descend(t, _depth))
            if m.bitfield_size:
                end = max(end, -(-(m.bit_offset + m.bitfield_size) // 8))
            else:
                if m.bit_offset % (8 * a):
                    return 1
                offset = m.offset
                if isinstance(t, Struct) and offset > _round_up(end, a):
                    a = _alignment_explaining(end, offset, a)
                end = max(end, offset + size_of(m.type, descend(t, _depth)))
            align = max(align, a)
        if t.size > _round_up(end, align):
            align = _alignment_explaining(end, t.size, align)
        if t.size % align:
            return 1
        return align
    raise TypeError_(f"type {t.id} ({t.name or t.kind.name}): has no alignment")


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def _alignment_explaining(start: int, at: int, align: int) -> int:
    """The smallest power of two >= `align` that rounds `start` up to `at`; `align` when none
    does (the gap has another cause, such as an unnamed bitfield BTF does not record)."""
    a = align
    while a <= at:
        if _round_up(start, a) == at:
            return a
        a *= 2
    return align


def is_signed(t: Type) -> bool:
    t = strip(t)
    if isinstance(t, Int):
        return t.signed
    if isinstance(t, Enum):
        return t.signed
    return False
