"""BTF records into model objects (btfgen.btf.types): one builder per kind code, each given
(table, id, name, info word, size_or_type word, tail as in `reader.Record.tail`), the record's
ids already checked in range by the table."""

from __future__ import annotations

from itertools import repeat
from typing import Protocol

from btfgen.btf import wire
from btfgen.btf.types import (
    Array,
    Const,
    Datasec,
    DeclTag,
    Enum,
    EnumValue,
    Float,
    Func,
    FuncProto,
    Fwd,
    Int,
    Kind,
    Linkage,
    Member,
    Param,
    Ptr,
    Restrict,
    Struct,
    Type,
    TypeSource,
    Typedef,
    TypeTag,
    Union,
    Unknown,
    Var,
    VarSecinfo,
    Volatile,
)


class Btf(TypeSource, Protocol):
    """What a builder asks of the table it builds for (reader.Btf): names by string offset, and
    errors that name the record's offset. A protocol, so this module sits below the reader."""

    def strings_at(self, offsets, type_id: int) -> list[str]: ...
    def offset_of(self, type_id: int) -> int | None: ...
    def error(self, offset: int | None, what: str) -> Exception: ...


_STRUCT = int(Kind.STRUCT)
_LINKAGES = tuple(Linkage)


def _simple_ref(cls):
    def build(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
        return cls(type_id, name, btf, st)
    return build


def _build_int(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    return Int(type_id, name, btf, st, wire.int_encoding(tail), wire.int_offset(tail),
               wire.int_bits(tail))


def _build_array(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    elem, index, nelems = tail
    return Array(type_id, name, btf, elem, index, nelems)


def _build_composite(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    name_offs, types, words = tail
    names = btf.strings_at(name_offs, type_id)
    kflag = bool(info >> 31)
    if kflag:
        members = tuple(Member(n, t, wire.member_bit_offset(w), wire.member_bitfield_size(w), btf)
                        for n, t, w in zip(names, types, words))
    else:
        members = tuple(map(Member, names, types, words, repeat(0), repeat(btf)))
    cls = Struct if wire.info_kind(info) == _STRUCT else Union
    return cls(type_id, name, btf, st, members, kflag)


def _build_enum(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    values = tuple(map(EnumValue, btf.strings_at(tail[0], type_id), tail[1]))
    return Enum(type_id, name, btf, st, bool(info >> 31), values, False)


def _build_enum64(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    kflag = bool(info >> 31)
    values = []
    for v_name, lo, hi in zip(btf.strings_at(tail[0], type_id), tail[1], tail[2]):
        v = hi << 32 | lo
        if kflag and v >> 63:
            v -= 1 << 64
        values.append(EnumValue(v_name, v))
    return Enum(type_id, name, btf, st, kflag, tuple(values), True)


def _build_fwd(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    return Fwd(type_id, name, btf, bool(info >> 31))


def _build_func(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    vlen = wire.info_vlen(info)
    if vlen > Linkage.EXTERN:
        raise btf.error(btf.offset_of(type_id), f"type {type_id} (FUNC '{name}'): unknown "
                                                f"linkage {vlen}")
    return Func(type_id, name, btf, st, _LINKAGES[vlen])


def _build_func_proto(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    n_offs, types = tail
    params = list(map(Param, btf.strings_at(n_offs, type_id), types, repeat(btf)))
    variadic = bool(params) and params[-1].type_id == 0
    if variadic:
        params.pop()
    if 0 in types[:len(params)]:
        i = list(types).index(0)
        raise btf.error(btf.offset_of(type_id), f"type {type_id} (FUNC_PROTO): parameter {i} "
                                                f"is void")
    return FuncProto(type_id, name, btf, st, tuple(params), variadic)


def _build_var(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    return Var(type_id, name, btf, st, tail)


def _build_datasec(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    return Datasec(type_id, name, btf, st, tuple(map(VarSecinfo, *tail)))


def _build_float(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    return Float(type_id, name, btf, st)


def _build_unknown(code: int):
    def build(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
        return Unknown(type_id, name, btf, code)
    return build


def _build_decl_tag(btf: Btf, type_id: int, name: str, info: int, st: int, tail) -> Type:
    return DeclTag(type_id, name, btf, st, tail)


# Indexed by kind code.
BUILDERS = tuple({
    Kind.INT: _build_int, Kind.PTR: _simple_ref(Ptr), Kind.ARRAY: _build_array,
    Kind.STRUCT: _build_composite, Kind.UNION: _build_composite, Kind.ENUM: _build_enum,
    Kind.FWD: _build_fwd, Kind.TYPEDEF: _simple_ref(Typedef), Kind.VOLATILE: _simple_ref(Volatile),
    Kind.CONST: _simple_ref(Const), Kind.RESTRICT: _simple_ref(Restrict), Kind.FUNC: _build_func,
    Kind.FUNC_PROTO: _build_func_proto, Kind.VAR: _build_var, Kind.DATASEC: _build_datasec,
    Kind.FLOAT: _build_float, Kind.DECL_TAG: _build_decl_tag, Kind.TYPE_TAG: _simple_ref(TypeTag),
    Kind.ENUM64: _build_enum64,
}.get(code) or _build_unknown(code) for code in range(wire.KIND_CODES))
