"""The BTF type model: one frozen class per kind.

Types refer to each other by id and resolve through the table that made them (a `TypeSource`), so a
table can decode lazily and cycles (`struct list_head { struct list_head *next; }`) need no
placeholders. The BTF reader and the C-header front end both produce these classes; walking
them is `walk`, measuring them `measure`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from collections.abc import Iterable
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


class TypeWalkError(Exception):
    """Raised when a type cannot be measured (a cycle, a FWD used by value, ...)."""


class TypeSource(Protocol):
    """What every source of types offers (the BTF reader's `Btf`, the C-header front end's
    `HeaderTypes`, `btfgen.btf.made.MadeTypes` for tables built in code); callers rely on all of
    it and probe for none of it."""

    path: str  # where the types came from, for messages
    byte_order: str | None  # "little" | "big": the target's; None: made in code, either
    elf_machine: str | None  # the ELF e_machine the types came with ("EM_AARCH64"), or None

    @property
    def pointer_size(self) -> int:
        """Bytes in a pointer; raises when the types do not say and none was assumed."""

    @property
    def declared_pointer_size(self) -> int | None:
        """The pointer size the types themselves say (a `long`, the ELF class), else None."""

    def assume_pointer_size(self, size: int) -> None:
        """Use `size` where the types say nothing (the arch chosen for them knows it)."""

    def __getitem__(self, type_id: int) -> Type: ...

    def __len__(self) -> int: ...

    def funcs(self) -> Iterable[Func]: ...

    def find_funcs(self, name: str) -> list[Func]: ...

    def find_types(self, name: str, kind: Kind | str | None = None) -> list[Type]: ...


# Int encoding bits, as in BTF_INT_ENCODING.
INT_SIGNED = 1
INT_CHAR = 2
INT_BOOL = 4


@dataclass(frozen=True, slots=True)
class Type:
    id: int
    name: str
    table: TypeSource = field(repr=False, compare=False)

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
    table: TypeSource = field(repr=False, compare=False)

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
            raise TypeWalkError(f"type {self.id} ({self.name}): FUNC does not point to a FUNC_PROTO")
        return proto


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type_id: int
    table: TypeSource = field(repr=False, compare=False)

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


@dataclass(frozen=True, slots=True)
class Unknown(Type):
    """A type of a kind btfgen does not know (BTF from a newer encoder), stepped over by the
    blob's layout section: nothing of it can be measured, spelled or decoded, so every walk
    refuses it (`walk.TypeWalk.visit_unknown`) and what has it as its type is unavailable."""

    code: int  # the kind's number
    kind = Kind.UNKN

    @property
    def reason(self) -> str:
        return f"BTF kind {self.code} unknown to btfgen"
