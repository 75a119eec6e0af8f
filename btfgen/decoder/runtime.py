"""Turn trace-ctx bytes, stack bytes or a generic BPF record into typed Python values.

Standard library only: generated modules embed this file's source verbatim (after
spec_format.py's, whose record header it reads) so they import without btfgen installed.
Everything it needs about a function comes as descriptors (made by `btfgen.decoder.describe`):
the NamedTuples below, which are tuples, so a generated module spells them as plain literals
and a recording keeps them as JSON lists; `FunctionDesc.check` rebuilds them from either,
checking each part.

Descriptors
- type: IntType ("int", size, signed) | BoolType ("bool", size) | EnumType ("enum", size,
  signed, names) | PtrType ("ptr", size) | FloatType ("float", size) | CharsType ("chars", n)
  | ArrayType ("array", n, elem_size, elem) | CompositeType ("struct"|"union", size, members)
  | BytesType ("bytes", size); `names` maps value -> enumerator name; a Member is (name,
  bit_offset, bit_size, type) with bit_size 0 for an ordinary member.
- value: ValueDesc (name, type, size, pieces, by_ref, unavailable); a Piece is (where, src,
  size, dst): bytes [src, src + size) of the ctx (where 0) or of the stack from the entry SP
  (where 1) are value bytes [dst, dst + size). For a by_ref value the pieces make the pointer.
- function: FunctionDesc (name, btf_id, byte_order, pointer_size, args, ret, fast, record)
  where `ret` is a RetDesc (value, needs_entry) or None, `fast` a FastPath (format, perm): a
  struct format reading every argument straight from the ctx, with the argument order `perm`
  (or None), and `record` the RecordPlans telling where each value sits in a generic BPF record.
  A ninth field, `captures` (left out when empty), holds CaptureDesc (name, kind, type, size,
  bit_offset, bit_size, at_exit, head, root_mask, pointers): what a pointer pointed to, copied
  into the record after a status head at data offset `head` (kind "str": a string of at most
  `size` characters; "value": `size` bytes of `type`, or a bitfield of them); `pointers` name
  the pointers followed, for saying which one was NULL; head -1: not in the record.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

if "RECORD_HEAD" not in globals():  # a generated module holds spec_format's text above this
    from ..probe.spec_format import CAPTURE_HEAD, RECORD_HEAD, size_of, structs

__all__ = ["Enumerator", "Unavailable", "Unread", "DecodeError", "Function", "RECORD_HEADERS",
           "RECORD_HEADER_SIZE", "FunctionDesc", "ValueDesc", "RetDesc", "Piece", "Plan",
           "RecordPlans", "FastPath", "Member", "TYPES", "SCALAR_TAGS", "CaptureDesc",
           "CapturedString"]

# struct btfgen_record's header as the target wrote it: in the target's byte order, whatever
# the machine decoding it.
RECORD_HEADERS = structs(RECORD_HEAD)
RECORD_HEADER_SIZE = size_of(RECORD_HEAD)
# The failed-mask bit of an exit whose carried return pointer was not kept (generic.py's
# CARRY_MISSING_BIT; this module is copied into generated code, so it imports nothing of btfgen).
CARRY_MISSING = 1 << 63
CAPTURE_HEADS = structs(CAPTURE_HEAD)
CAPTURE_HEAD_SIZE = size_of(CAPTURE_HEAD)
CAPTURE_OK, CAPTURE_NULL, CAPTURE_FAULT = 1, 2, 3
SPACES = ("kernel", "user")


class DecodeError(ValueError):
    pass


# -- descriptors, each with its check ----------------------------------------------------------
# `check` takes a descriptor as a generated module spells it or as JSON gives it back (lists for
# tuples) and returns it rebuilt, or raises DecodeError saying what is wrong. `limit` bounds
# sizes and nesting: a recording is untrusted, and a crafted one must not make the decoder build
# a list of a billion elements or recurse without end.

class Limit(NamedTuple):
    size: int  # no value, type or offset larger
    depth: int  # type descriptors nest no deeper


TRUSTED = Limit(1 << 62, 256)


def _malformed(what: str):
    raise DecodeError(f"a decoder descriptor is malformed: {what}")


def _fields(obj, cls, what: str) -> tuple:
    if not isinstance(obj, (tuple, list)) or len(obj) != len(cls._fields):
        _malformed(f"{what}: not {len(cls._fields)} fields ({', '.join(cls._fields)})")
    return tuple(obj)


def _int(x, what: str, low: int = 0, high: int | None = None) -> int:
    if type(x) is not int or x < low or (high is not None and x > high):
        _malformed(f"{what}: {x!r} is not an integer in [{low}, {high}]")
    return x


def _flag(x, what: str) -> bool:
    if type(x) is not bool:
        _malformed(f"{what}: {x!r} is not true or false")
    return x


def _str(x, what: str) -> str:
    if type(x) is not str:
        _malformed(f"{what}: {x!r} is not a string")
    return x


def _tag(obj, tags: tuple, what: str) -> str:
    if obj[0] not in tags:
        _malformed(f"{what}: tag {obj[0]!r} is not {' or '.join(tags)}")
    return obj[0]


class _Sized(NamedTuple):
    """A scalar type of one size: ("ptr"|"float"|"chars"|"bytes"|"bool", size)."""

    tag: str
    size: int

    @classmethod
    def check(cls, obj, what: str, limit: Limit, depth: int):
        tag, size = _fields(obj, cls, what)
        return cls(_tag(obj, cls.TAGS, what), _int(size, f"{what}: size", 0, limit.size))


class BoolType(_Sized):
    __slots__ = ()
    TAGS = ("bool",)


class PtrType(_Sized):
    __slots__ = ()
    TAGS = ("ptr",)


class FloatType(_Sized):
    __slots__ = ()
    TAGS = ("float",)


class CharsType(_Sized):
    __slots__ = ()
    TAGS = ("chars",)


class BytesType(_Sized):
    __slots__ = ()
    TAGS = ("bytes",)


class IntType(NamedTuple):
    tag: str
    size: int
    signed: bool

    @classmethod
    def check(cls, obj, what: str, limit: Limit, depth: int) -> IntType:
        tag, size, signed = _fields(obj, cls, what)
        return cls(_tag(obj, ("int",), what), _int(size, f"{what}: size", 0, limit.size),
                   _flag(signed, f"{what}: signed"))


class EnumType(NamedTuple):
    tag: str
    size: int
    signed: bool
    names: dict

    @classmethod
    def check(cls, obj, what: str, limit: Limit, depth: int) -> EnumType:
        tag, size, signed, names = _fields(obj, cls, what)
        if not isinstance(names, dict) or not all(type(k) is int and type(v) is str
                                                  for k, v in names.items()):
            _malformed(f"{what}: enumerator names are not a map of integers to strings")
        return cls(_tag(obj, ("enum",), what), _int(size, f"{what}: size", 0, limit.size),
                   _flag(signed, f"{what}: signed"), names)


class ArrayType(NamedTuple):
    tag: str
    n: int
    elem_size: int
    elem: tuple

    @classmethod
    def check(cls, obj, what: str, limit: Limit, depth: int) -> ArrayType:
        tag, n, elem_size, elem = _fields(obj, cls, what)
        _int(n, f"{what}: length", 0, limit.size)
        _int(elem_size, f"{what}: element size", 0, limit.size)
        if n * max(elem_size, 1) > limit.size:
            _malformed(f"{what}: {n} elements of {elem_size} bytes")
        elem = check_type(elem, f"{what}: element", limit, depth + 1)
        if type_size(elem) > elem_size:
            _malformed(f"{what}: an element of {type_size(elem)} bytes in {elem_size}")
        return cls(_tag(obj, ("array",), what), n, elem_size, elem)


class Member(NamedTuple):
    name: str
    bit_offset: int
    bit_size: int  # 0: not a bitfield
    type: tuple

    @classmethod
    def check(cls, obj, what: str, size: int, limit: Limit, depth: int) -> Member:
        name, bit_offset, bit_size, t = _fields(obj, cls, what)
        what = f"{what} {name!r}"
        m = cls(_str(name, what), _int(bit_offset, f"{what}: bit offset", 0, 8 * size),
                _int(bit_size, f"{what}: bit size", 0, 128), check_type(t, what, limit, depth))
        if bit_size and m.type.tag not in ("int", "enum", "bool"):
            _malformed(f"{what}: a bitfield of {m.type.tag}")
        end = bit_offset + bit_size if bit_size else bit_offset // 8 * 8 + 8 * type_size(m.type)
        if end > 8 * size:
            _malformed(f"{what}: ends at bit {end} of {size} bytes")
        return m


class CompositeType(NamedTuple):
    tag: str
    size: int
    members: tuple

    @classmethod
    def check(cls, obj, what: str, limit: Limit, depth: int) -> CompositeType:
        tag, size, members = _fields(obj, cls, what)
        _int(size, f"{what}: size", 0, limit.size)
        if not isinstance(members, (tuple, list)) or len(members) > limit.size:
            _malformed(f"{what}: members are not a list")
        return cls(_tag(obj, ("struct", "union"), what), size,
                   tuple(Member.check(m, f"{what}: member", size, limit, depth + 1)
                         for m in members))


# The one list of type tags: what each is.
TYPES = {"int": IntType, "bool": BoolType, "enum": EnumType, "ptr": PtrType, "float": FloatType,
         "chars": CharsType, "array": ArrayType, "struct": CompositeType, "union": CompositeType,
         "bytes": BytesType}
SCALAR_TAGS = frozenset(tag for tag, cls in TYPES.items() if cls not in (ArrayType,
                                                                          CompositeType))


def check_type(obj, what: str = "type", limit: Limit = TRUSTED, depth: int = 0) -> tuple:
    if depth > limit.depth:
        _malformed(f"{what}: nested deeper than {limit.depth}")
    if not isinstance(obj, (tuple, list)) or not obj or type(obj[0]) is not str:
        _malformed(f"{what}: not a type descriptor")
    cls = TYPES.get(obj[0])
    if cls is None:
        _malformed(f"{what}: unknown type tag {obj[0]!r}")
    return cls.check(obj, what, limit, depth)


def type_size(t: tuple) -> int:
    """The bytes a value of type descriptor `t` takes."""
    if t.tag == "array":
        return t.n * t.elem_size
    return t.size


class Piece(NamedTuple):
    # Repr'd as the plain tuple a generated module spells: codegen prints these with !r, and a
    # whole kernel has a few hundred thousand of them.
    __repr__ = tuple.__repr__

    where: int  # 0: the ctx, 1: the stack from the entry SP
    src: int
    size: int
    dst: int

    @classmethod
    def check(cls, obj, what: str, size: int, limit: Limit) -> Piece:
        where, src, n, dst = _fields(obj, cls, what)
        p = cls(_int(where, f"{what}: source", 0, 1), _int(src, f"{what}: offset", 0, limit.size),
                _int(n, f"{what}: size", 0, limit.size), _int(dst, f"{what}: destination", 0,
                                                              limit.size))
        if dst + n > size:
            _malformed(f"{what}: bytes [{dst}, {dst + n}) of a {size}-byte value")
        return p


class ValueDesc(NamedTuple):
    name: str
    type: tuple
    size: int
    pieces: tuple
    by_ref: bool
    unavailable: str | None  # why the trace cannot hold it, or None

    @classmethod
    def check(cls, obj, what: str, pointer_size: int, limit: Limit) -> ValueDesc:
        name, t, size, pieces, by_ref, unavailable = _fields(obj, cls, what)
        what = f"{what} {name!r}"
        _str(name, what)
        _int(size, f"{what}: size", 0, limit.size)
        t = check_type(t, f"{what}: type", limit)
        if type_size(t) > size:
            _malformed(f"{what}: a {type_size(t)}-byte type in {size} bytes")
        _flag(by_ref, f"{what}: by_ref")
        if unavailable is not None:
            _str(unavailable, f"{what}: why unavailable")
        if not isinstance(pieces, (tuple, list)) or len(pieces) > limit.size:
            _malformed(f"{what}: pieces are not a list")
        held = pointer_size if by_ref else size
        return cls(name, t, size, tuple(Piece.check(p, f"{what}: piece", held, limit)
                                        for p in pieces), by_ref, unavailable)

    def __repr__(self) -> str:
        return f"ValueDesc({self.name!r}, {self.type!r}, size={self.size})"


class RetDesc(NamedTuple):
    value: ValueDesc
    needs_entry: bool  # returned through a pointer only the entry saw

    @classmethod
    def check(cls, obj, what: str, pointer_size: int, limit: Limit) -> RetDesc:
        value, needs_entry = _fields(obj, cls, what)
        return cls(ValueDesc.check(value, what, pointer_size, limit),
                   _flag(needs_entry, f"{what}: needs_entry"))


class Plan(NamedTuple):
    """Where a value sits in a generic record's data (generic.ValuePlan)."""

    # Repr'd as the plain tuple a generated module spells: codegen prints these with !r, and a
    # whole kernel has a few hundred thousand of them.
    __repr__ = tuple.__repr__

    data_off: int  # -1: only its pointer is in the record
    ptr_off: int  # by_ref: where the pointer is; else -1
    op_mask: int  # the ops (bit i = op i) that must succeed for the value to be good

    @classmethod
    def check(cls, obj, what: str, limit: Limit) -> Plan | None:
        if obj is None:
            return None
        data_off, ptr_off, op_mask = _fields(obj, cls, what)
        p = cls(_int(data_off, f"{what}: data offset", -1, limit.size),
                _int(ptr_off, f"{what}: pointer offset", -1, limit.size),
                _int(op_mask, f"{what}: op mask", 0, (1 << 64) - 1))
        if data_off < 0 and ptr_off < 0:
            _malformed(f"{what}: neither the value nor its pointer is in the record")
        return p


class RecordPlans(NamedTuple):
    # Repr'd as the plain tuple a generated module spells: codegen prints these with !r, and a
    # whole kernel has a few hundred thousand of them.
    __repr__ = tuple.__repr__

    entry: tuple  # a Plan (or None: not in the record) per argument
    exit: tuple  # the return value's, if any

    @classmethod
    def check(cls, obj, what: str, nargs: int, nret: int, limit: Limit) -> RecordPlans:
        entry, exit_ = _fields(obj, cls, what)
        for plans, n, kind in ((entry, nargs, "entry"), (exit_, nret, "exit")):
            if not isinstance(plans, (tuple, list)) or len(plans) != n:
                _malformed(f"{what}: not {n} {kind} plans")
        return cls(tuple(Plan.check(p, f"{what}: entry plan", limit) for p in entry),
                   tuple(Plan.check(p, f"{what}: exit plan", limit) for p in exit_))


class FastPath(NamedTuple):
    # Repr'd as the plain tuple a generated module spells: codegen prints these with !r, and a
    # whole kernel has a few hundred thousand of them.
    __repr__ = tuple.__repr__

    format: str  # a struct format reading every argument from the ctx
    perm: tuple | None  # argument i is the format's item perm[i]; None: in order

    @classmethod
    def check(cls, obj, what: str, nargs: int, limit: Limit) -> FastPath | None:
        if obj is None:
            return None
        fmt, perm = _fields(obj, cls, what)
        try:
            unpack = struct.Struct(_str(fmt, f"{what}: format"))
            if unpack.size > limit.size:
                _malformed(f"{what}: format {fmt!r} reads {unpack.size} bytes")
            items = len(unpack.unpack(bytes(unpack.size)))
        except struct.error as e:
            _malformed(f"{what}: format {fmt!r}: {e}")
        if items != nargs:
            _malformed(f"{what}: format {fmt!r} reads {items} values for {nargs} arguments")
        if perm is not None:
            if not isinstance(perm, (tuple, list)) or sorted(perm) != list(range(nargs)) \
                    or not all(type(i) is int for i in perm):
                _malformed(f"{what}: {perm!r} is not an order of {nargs} arguments")
            perm = tuple(perm)
        return cls(fmt, perm)


class CaptureDesc(NamedTuple):
    name: str  # the path as written
    kind: str  # "str" or "value"
    type: tuple  # a value's type descriptor; a string's is ("chars", size)
    size: int
    bit_offset: int
    bit_size: int  # 0: not a bitfield
    at_exit: bool  # in the exit record (a path from the return value)
    head: int  # its status head's data offset; -1: left out of the record
    root_mask: int  # the record's failed bits that spoil the pointer it starts from
    pointers: tuple  # the names of the pointers it follows, first to last

    @classmethod
    def check(cls, obj, what: str, limit: Limit) -> CaptureDesc:
        name, kind, t, size, bit_offset, bit_size, at_exit, head, mask, pointers = _fields(
            obj, cls, what)
        what = f"{what} {_str(name, what)!r}"
        if kind not in ("str", "value"):
            _malformed(f"{what}: kind {kind!r}")
        t = check_type(t, f"{what}: type", limit)
        _int(size, f"{what}: size", 0, limit.size)
        if kind == "value" and not bit_size and type_size(t) > size:
            _malformed(f"{what}: a {type_size(t)}-byte type in {size} bytes")
        if bit_size and (t.tag not in ("int", "enum", "bool") or bit_offset + bit_size > 8 * size):
            _malformed(f"{what}: bitfield [{bit_offset}, +{bit_size}) of {size} bytes")
        if not isinstance(pointers, (tuple, list)) or not pointers:
            _malformed(f"{what}: no pointers")
        return cls(name, kind, t, size, _int(bit_offset, f"{what}: bit offset", 0, 7),
                   _int(bit_size, f"{what}: bit size", 0, 64), _flag(at_exit, f"{what}: exit"),
                   _int(head, f"{what}: head", -1, limit.size),
                   _int(mask, f"{what}: root mask", 0, (1 << 64) - 1),
                   tuple(_str(p, f"{what}: pointer") for p in pointers))


class CapturedString(str):
    """A string read from the traced process or the kernel: `truncated` when it went on past
    the limit (the text is its first characters), `space` the memory it was read from."""

    def __new__(cls, text: str, truncated: bool, space: str):
        self = str.__new__(cls, text)
        self.truncated, self.space = truncated, space
        return self

    def __reduce__(self):
        return (CapturedString, (str(self), self.truncated, self.space))


class FunctionDesc(NamedTuple):
    name: str
    btf_id: int
    byte_order: str  # "little" or "big"
    pointer_size: int
    args: tuple  # ValueDesc per argument
    ret: RetDesc | None  # None: void
    fast: FastPath | None
    record: RecordPlans
    captures: tuple = ()  # CaptureDesc

    @classmethod
    def check(cls, obj, limit: Limit = TRUSTED) -> FunctionDesc:
        """The descriptor rebuilt from tuples or lists, or DecodeError saying what is wrong."""
        if isinstance(obj, cls):
            return obj
        if isinstance(obj, (tuple, list)) and len(obj) == len(cls._fields) - 1:
            obj = tuple(obj) + ((),)  # no captures
        name, btf_id, order, psize, args, ret, fast, record, caps = _fields(obj, cls, "function")
        what = f"function {_str(name, 'function name')!r}"
        _int(btf_id, f"{what}: BTF id", 0, (1 << 32) - 1)
        if order not in ("little", "big"):
            _malformed(f"{what}: byte order {order!r}")
        if psize not in (4, 8) or type(psize) is not int:
            _malformed(f"{what}: pointer size {psize!r}")
        if not isinstance(args, (tuple, list)) or len(args) > 1 << 16:
            _malformed(f"{what}: arguments are not a list")
        args = tuple(ValueDesc.check(a, f"{what}: argument", psize, limit) for a in args)
        if ret is not None:
            ret = RetDesc.check(ret, f"{what}: return value", psize, limit)
        return cls(name, btf_id, order, psize, args, ret,
                   FastPath.check(fast, f"{what}: fast path", len(args), limit),
                   RecordPlans.check(record, f"{what}: record", len(args), ret is not None,
                                     limit), _captures(caps, what, limit))

    def __repr__(self) -> str:
        return (f"FunctionDesc({self.name!r}, btf_id={self.btf_id}, {len(self.args)} args, "
                f"{'void' if self.ret is None else 'returns'})")


def _captures(caps, what: str, limit: Limit) -> tuple:
    if not isinstance(caps, (tuple, list)) or len(caps) > 256:
        _malformed(f"{what}: captures are not a list")
    return tuple(CaptureDesc.check(c, f"{what}: capture", limit) for c in caps)


# -- values --------------------------------------------------------------------------------------

class Enumerator(int):
    """An enum value: compares and computes as its number; `name` is its enumerator or None."""

    def __new__(cls, value: int, name: str | None):
        self = int.__new__(cls, value)
        self.name = name
        return self

    def __repr__(self) -> str:
        return f"{self.name}({int(self)})" if self.name else f"<enum {int(self)}>"

    def __reduce__(self):
        return (Enumerator, (int(self), self.name))


class Unavailable:
    """A value the trace ctx does not hold (e.g. a float in an FP register)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unavailable({self.reason!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Unavailable) and other.reason == self.reason

    __hash__ = None  # type: ignore[assignment]


class Unread:
    """A by-reference value whose memory was not read (no `read_memory` given)."""

    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def __repr__(self) -> str:
        return f"Unread(0x{self.address:x})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Unread) and other.address == self.address

    __hash__ = None  # type: ignore[assignment]


# -- readers: a type descriptor turned once into a function of (bytes, offset) ----------------

def reader(t: tuple, order: str, memo: dict | None = None, readers: dict | None = None):
    """A function (data, offset) -> the value of type `t` held in `data[offset:]`, target byte
    order `order`; the descriptor is read here, once, not per value. `readers`: the reader
    makers by tag (TEXT_READERS: char arrays as text), the same for a whole memo."""
    memo = {} if memo is None else memo
    hit = memo.get(id(t))
    if hit is None:
        makers = memo.setdefault("readers", readers or _READERS)
        hit = memo[id(t)] = (makers[t.tag](t, order, memo), t)  # t: keeps id(t) unique
    return hit[0]


def convert(t: tuple, data, offset: int, order: str):
    """The value of type `t` held in `data[offset:]` (target byte order `order`)."""
    return reader(check_type(t), order)(data, offset)


def _read_int(t, order, memo):
    size, signed = t.size, t.signed
    return lambda data, at, _f=int.from_bytes: _f(data[at:at + size], order, signed=signed)


def _read_ptr(t, order, memo):
    size = t.size
    return lambda data, at, _f=int.from_bytes: _f(data[at:at + size], order)


def _read_bool(t, order, memo):
    size = t.size
    return lambda data, at: any(data[at:at + size])


def _read_enum(t, order, memo):
    size, signed, names = t.size, t.signed, t.names

    def read(data, at):
        value = int.from_bytes(data[at:at + size], order, signed=signed)
        return Enumerator(value, names.get(value))

    return read


def _read_bytes(t, order, memo):
    size = t.size
    return lambda data, at: bytes(data[at:at + size])


def _read_float(t, order, memo):
    fmt = {2: "e", 4: "f", 8: "d"}.get(t.size)
    if fmt is None:  # long double: keep the bytes
        return _read_bytes(t, order, memo)
    unpack = struct.Struct(("<" if order == "little" else ">") + fmt).unpack_from
    return lambda data, at: unpack(data, at)[0]


def _read_array(t, order, memo):
    n, step, elem = t.n, t.elem_size, reader(t.elem, order, memo)
    return lambda data, at: [elem(data, at + i * step) for i in range(n)]


def _read_composite(t, order, memo):
    size, members = t.size, []
    for m in t.members:
        if not m.bit_size:
            members.append((m.name, reader(m.type, order, memo), m.bit_offset // 8))
            continue
        # BTF numbers bits from the lowest address: the least significant bit on a
        # little-endian target, the most significant on a big-endian one.
        shift = m.bit_offset if order == "little" else size * 8 - m.bit_offset - m.bit_size
        sign = 1 << (m.bit_size - 1) if m.type.tag != "bool" and m.type.signed else 0
        names = m.type.names if m.type.tag == "enum" else None
        members.append((m.name, None, (shift, (1 << m.bit_size) - 1, sign, names,
                                       m.type.tag == "bool")))

    def read(data, at):
        out = {}
        whole = None
        for name, read_member, where in members:
            if read_member is not None:
                out[name] = read_member(data, at + where)
                continue
            if whole is None:
                whole = int.from_bytes(data[at:at + size], order)
            shift, mask, sign, names, is_bool = where
            raw = (whole >> shift) & mask
            if raw & sign:
                raw -= sign << 1
            out[name] = bool(raw) if is_bool else raw if names is None else \
                Enumerator(raw, names.get(raw))
        return out

    return read


_READERS = {"int": _read_int, "ptr": _read_ptr, "bool": _read_bool, "enum": _read_enum,
            "chars": _read_bytes, "bytes": _read_bytes, "float": _read_float,
            "array": _read_array, "struct": _read_composite, "union": _read_composite}
assert set(_READERS) == set(TYPES)


def text_of(raw) -> str:
    """A C string's bytes (up to its NUL) as text; bytes that are not UTF-8 as \\x escapes."""
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", errors="backslashreplace")


def _read_chars_text(t, order, memo):
    size = t.size
    return lambda data, at: text_of(data[at:at + size])


# Captured pointees: a char array is a string there (a name, a path), as the user reads it.
TEXT_READERS = dict(_READERS, chars=_read_chars_text)


def gather(pieces: tuple, size: int, ctx, stack):
    """The value bytes the pieces describe, assembled from the ctx and stack images."""
    buf = bytearray(size)
    for where, src, n, dst in pieces:
        chunk = (stack if where else ctx)[src : src + n]
        if len(chunk) != n:
            what = "stack" if where else "ctx"
            raise DecodeError(f"{what} image too short: needs bytes [{src}, {src + n})")
        buf[dst : dst + n] = chunk
    return buf


class Function:
    """One function's decoders, built from its descriptor (a FunctionDesc, or the same as plain
    tuples: checked and rebuilt)."""

    __slots__ = ("desc", "name", "btf_id", "order", "pointer_size", "args", "ret", "names",
                 "entry", "captures", "_values", "_ret", "_plans", "_needs", "_captures",
                 "_record_fast", "_capture_reads")

    def __init__(self, desc: tuple):
        d = self.desc = FunctionDesc.check(desc)
        self.name, self.btf_id, self.order, self.pointer_size = (d.name, d.btf_id, d.byte_order,
                                                                 d.pointer_size)
        self.args, self.ret = d.args, d.ret
        self.names = tuple(a.name for a in d.args)
        # Hot paths unpack plain tuples made here: the descriptors are read once, by name.
        memo: dict = {}
        self._values = tuple(self._compiled(v, memo) for v in d.args)
        self._ret = None if d.ret is None else (self._compiled(d.ret.value, memo),
                                                 d.ret.needs_entry)
        rets = () if d.ret is None else (d.ret.value,)
        self._plans = (tuple(zip(self._values, d.record.entry)),
                       tuple(zip(self._ret[:1] if self._ret else (), d.record.exit)))
        # The record bytes each kind's plans read: a shorter record is refused, never misread.
        self.captures = d.captures
        text_memo: dict = {}
        self._captures = tuple(
            tuple((c, reader(c.type, self.order, text_memo, TEXT_READERS))
                  for c in d.captures if c.at_exit == bool(kind)) for kind in (0, 1))
        self._needs = tuple(max(_record_end(values, plans, d.pointer_size),
                                _captures_end(self._captures[kind]))
                            for kind, (values, plans) in enumerate(((d.args, d.record.entry),
                                                                    (rets, d.record.exit))))
        self.entry = self._fast_entry(d.fast) if d.fast is not None else self.decode_entry
        head = CAPTURE_HEADS[self.order]
        self._capture_reads = tuple(tuple((c.name, _capture_reader(c, read, head, self.order))
                                          for c, read in caps) for caps in self._captures)
        self._record_fast = tuple(_record_struct(values, plans, self.order)
                                  for values, plans in ((d.args, d.record.entry),
                                                        (rets, d.record.exit)))

    def _compiled(self, v: ValueDesc, memo: dict) -> tuple:
        return (v.name, reader(v.type, self.order, memo), v.size, v.pieces, v.by_ref,
                v.unavailable)

    def __repr__(self) -> str:
        ret = "void" if self.ret is None else "returns"
        return f"<Function {self.name} btf_id={self.btf_id} {len(self.args)} args, {ret}>"

    def _fast_entry(self, fast: FastPath):
        """Every argument a whole scalar in one register: one precompiled struct read."""
        unpack = struct.Struct(fast.format).unpack_from
        perm = fast.perm
        if perm is None:

            def entry(ctx, stack=b"", read_memory=None, _u=unpack):
                return _u(ctx)

        elif perm == tuple(range(len(perm) - 1, -1, -1)):
            # Argument registers at falling ctx offsets (x86_64 pt_regs): a reversal.

            def entry(ctx, stack=b"", read_memory=None, _u=unpack):
                return _u(ctx)[::-1]

        else:
            from operator import itemgetter

            pick = itemgetter(*perm)

            def entry(ctx, stack=b"", read_memory=None, _u=unpack, _p=pick):
                return _p(_u(ctx))

        return entry

    def entries(self, buffer, stride: int, offset: int = 0):
        """Entry values of many records laid end to end every `stride` bytes (a ring buffer's
        fixed-size ctx copies), as an iterator of tuples. Register-only scalar functions decode
        in one pass of `struct.iter_unpack`, without a Python call per record."""
        view = memoryview(buffer)[offset:]
        usable = len(view) - len(view) % stride
        fast = self.desc.fast
        if fast is not None:
            size = struct.calcsize(fast.format)
            if size <= stride:
                it = struct.Struct(f"{fast.format}{stride - size}x").iter_unpack(view[:usable])
                perm = fast.perm
                if perm is None:
                    return it
                from operator import itemgetter

                return map(itemgetter(slice(None, None, -1)) if perm == tuple(
                    range(len(perm) - 1, -1, -1)) else itemgetter(*perm), it)
        return (self.decode_entry(view[i : i + stride]) for i in range(0, usable, stride))

    def _value(self, value: tuple, ctx, stack, read_memory):
        name, read, size, pieces, by_ref, unavailable = value
        if unavailable is not None:
            return Unavailable(unavailable)
        if not by_ref:
            return read(gather(pieces, size, ctx, stack), 0)
        address = int.from_bytes(gather(pieces, self.pointer_size, ctx, stack), self.order)
        if read_memory is None:
            return Unread(address)
        return read(self._memory(read_memory, address, size, name), 0)

    def _memory(self, read_memory, address: int, size: int, name: str):
        data = read_memory(address, size)
        if len(data) < size:
            raise DecodeError(f"{self.name}: {name}: read_memory returned {len(data)} of "
                              f"{size} bytes")
        return data

    def decode_entry(self, ctx, stack=b"", read_memory=None) -> tuple:
        """Argument values, in order, from the ctx and stack images taken at function entry."""
        return tuple(self._value(a, ctx, stack, read_memory) for a in self._values)

    def decode_exit(self, ctx, stack=b"", read_memory=None, saved_entry=None):
        """The return value from the ctx at function exit (None for void). A struct returned
        through a hidden pointer is read through `saved_entry` (the ctx bytes at entry) when the
        ABI does not hand the pointer back."""
        if self._ret is None:
            return None
        value, needs_entry = self._ret
        if needs_entry:
            if saved_entry is None:
                return Unavailable("return pointer needs the ctx saved at entry")
            ctx, stack = saved_entry
        return self._value(value, ctx, stack, read_memory)

    def decode_record(self, record, read_memory=None):
        """Values from a generic BPF record (`btfgen_record`): a tuple of arguments for an entry
        record, the return value for an exit record."""
        btf_id, kind, failed = RECORD_HEADERS[self.order].unpack_from(record)
        if kind > 1:
            raise DecodeError(f"{self.name}: a record of kind {kind}")
        fast = self._record_fast[kind]
        if fast is not None and not failed & fast[1] and len(record) >= fast[2]:
            out = fast[0](record, RECORD_HEADER_SIZE)
            return out if kind == 0 else out[0]
        data = memoryview(record)[RECORD_HEADER_SIZE:]
        if len(data) < self._needs[kind]:
            raise DecodeError(f"{self.name}: a record of {len(data)} data bytes, its values "
                              f"need {self._needs[kind]}")
        out = [self._record_value(value, plan, data, failed, read_memory)
               for value, plan in self._plans[kind]]
        return tuple(out) if kind == 0 else (out[0] if out else None)

    def _record_value(self, value, plan, data, failed, read_memory):
        name, read, size, _pieces, by_ref, unavailable = value
        if unavailable is not None:
            return Unavailable(unavailable)
        if plan is None:
            return Unavailable("not in the generic record")
        data_off, ptr_off, op_mask = plan
        if failed & op_mask:
            if failed & op_mask & CARRY_MISSING:
                return Unavailable("the return pointer was not kept from the entry")
            return Unavailable("the BPF read failed")
        if by_ref and data_off < 0:
            address = int.from_bytes(data[ptr_off : ptr_off + self.pointer_size], self.order)
            if read_memory is None:
                return Unread(address)
            return read(self._memory(read_memory, address, size, name), 0)
        return read(data, data_off)

    def as_dict(self, values: tuple) -> dict:
        return dict(zip(self.names, values))

    def decode_captures(self, record) -> dict:
        """The captures a generic BPF record holds (an entry's or an exit's), by name: a
        CapturedString, a value, or Unavailable saying which pointer was NULL or faulted."""
        btf_id, kind, failed = RECORD_HEADERS[self.order].unpack_from(record)
        if kind > 1:
            raise DecodeError(f"{self.name}: a record of kind {kind}")
        caps = self._capture_reads[kind]
        if not caps:
            return {}
        data = memoryview(record)[RECORD_HEADER_SIZE:]
        if len(data) < self._needs[kind]:
            raise DecodeError(f"{self.name}: a record of {len(data)} data bytes, its values "
                              f"need {self._needs[kind]}")
        return {name: read(data, failed) for name, read in caps}


def _capture_reader(c: CaptureDesc, read, head, order: str):
    """A function (record data, failed bits) -> the capture's value: a whole string, the
    commonest capture, with its descriptor read here once; anything else by _captured."""
    if c.kind != "str" or c.head < 0:
        return lambda data, failed: _captured(c, read, data, failed, head, order)
    at, size, root_mask, unpack = c.head, c.size, c.root_mask, head.unpack_from
    first = at + CAPTURE_HEAD_SIZE

    def string(data, failed):
        status, _hop, space, _pad, n, _pad2, _ptr = unpack(data, at)
        if status != CAPTURE_OK or failed & root_mask:
            return _captured(c, read, data, failed, head, order)
        # n counts the NUL; one character past the limit was read to tell truncation apart.
        text = bytes(data[first:first + n - 1]) if n > 1 else b""
        truncated = len(text) > size
        if truncated:
            text = text[:size]
        if b"\0" in text:
            text = text.split(b"\0", 1)[0]
        return CapturedString(text.decode("utf-8", "backslashreplace"), truncated,
                              SPACES[space] if space < len(SPACES) else f"space {space}")

    return string


_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}


def _record_struct(values: tuple, plans: tuple, order: str):
    """(unpack_from, the ops' failed bits, the record bytes it needs) when every value of a
    record kind is a whole integer or pointer at its own place in the record: one precompiled
    read for all of them, as a register-only entry has. None: decoded value by value."""
    if not values or len(plans) != len(values):
        return None
    fmt, at, mask = ["<" if order == "little" else ">"], 0, 0
    for v, plan in zip(values, plans):
        t = v.type
        code = _INT_CODES.get(t.size) if t.tag in ("int", "ptr") else None
        if (code is None or plan is None or v.unavailable is not None or v.by_ref
                or plan.data_off < at):
            return None
        signed = t.tag == "int" and t.signed
        fmt.append(f"{plan.data_off - at}x{code if signed else code.upper()}")
        at = plan.data_off + t.size
        mask |= plan.op_mask
    unpack = struct.Struct("".join(fmt)).unpack_from
    return unpack, mask, RECORD_HEADER_SIZE + at


def _captured(c: CaptureDesc, read, data, failed: int, head, order: str):
    if c.head < 0:
        return Unavailable("no room in the record")
    if failed & c.root_mask:
        return Unavailable(f"{c.pointers[0]} could not be read")
    status, hop, space, _pad, n, _pad2, _ptr = head.unpack_from(data, c.head)
    at = c.head + CAPTURE_HEAD_SIZE
    where = SPACES[space] if space < len(SPACES) else f"space {space}"
    if status == CAPTURE_NULL:
        return Unavailable(f"{_pointer(c, hop)} is NULL")
    if status == CAPTURE_FAULT:
        return Unavailable(f"reading through {_pointer(c, hop)} faulted ({where} memory)")
    if status != CAPTURE_OK:
        return Unavailable(f"not captured (status {status})")
    # (A string read whole is _capture_reader's: it comes here only when it was not.)
    if not c.bit_size:
        return read(data, at)
    whole = int.from_bytes(data[at:at + c.size], order)
    shift = c.bit_offset if order == "little" else 8 * c.size - c.bit_offset - c.bit_size
    raw = (whole >> shift) & ((1 << c.bit_size) - 1)
    if c.type.tag == "bool":
        return bool(raw)
    if c.type.signed and raw >> (c.bit_size - 1):
        raw -= 1 << c.bit_size
    return Enumerator(raw, c.type.names.get(raw)) if c.type.tag == "enum" else raw


def _pointer(c: CaptureDesc, hop: int) -> str:
    return c.pointers[hop] if hop < len(c.pointers) else f"pointer {hop}"


def _captures_end(caps: tuple) -> int:
    """The furthest record data byte the captures read."""
    return max((c.head + CAPTURE_HEAD_SIZE + (c.size + 2 if c.kind == "str" else c.size)
                for c, _ in caps if c.head >= 0), default=0)


def _record_end(values: tuple, plans: tuple, pointer_size: int) -> int:
    """The furthest record data byte the plans of `values` read."""
    end = 0
    for v, plan in zip(values, plans):
        if plan is not None and v.unavailable is None:
            end = max(end, plan.data_off + v.size if plan.data_off >= 0 else
                      plan.ptr_off + pointer_size)
    return end
