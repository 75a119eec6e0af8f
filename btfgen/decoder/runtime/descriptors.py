"""What the runtime knows of a function: descriptors, each with its check.

Everything the runtime needs about a function comes as descriptors (made by
`btfgen.decoder.describe`): the NamedTuples below, which are tuples, so a generated module
spells them as plain literals and a recording keeps them as JSON lists; `FunctionDesc.check`
rebuilds them from either, checking each part.

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
  (or None), and `record` the RecordPlans telling where each value sits in a generic BPF record
  (and how many data bytes of each kind's record the BPF side sends).
  A ninth field, `captures` (left out when empty), holds CaptureDesc (name, kind, type, size,
  bit_offset, bit_size, at_exit, head, root_mask, pointers): what a pointer pointed to, copied
  into the record after a status head at data offset `head` (kind "str": a string of at most
  `size` characters; "value": `size` bytes of `type`, or a bitfield of them); `pointers` name
  the pointers followed, for saying which one was NULL; head -1: not in the record. An
  eleventh, `length` (left out when empty), makes kind "buf" a buffer of at most `size` bytes
  (`PATH[LEN]`): (data offset, bytes, signed, name, head, mask) of the integer saying how many
  at the call, `head` the status head of the capture that read it (-1: a value of the record),
  `mask` the failed bits that spoil it; a constant's offset is -1 and its bytes the constant.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .records import DecodeError

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
    # (entry, exit): the record data bytes the BPF side sends of each kind (SPEC_HEAD's
    # entry_size, exit_size; spec_format.event_size); None in a descriptor made before them.
    sizes: tuple | None = None

    @classmethod
    def check(cls, obj, what: str, nargs: int, nret: int, limit: Limit) -> RecordPlans:
        if isinstance(obj, (tuple, list)) and len(obj) == len(cls._fields) - 1:
            obj = tuple(obj) + (None,)  # no sizes
        entry, exit_, sizes = _fields(obj, cls, what)
        for plans, n, kind in ((entry, nargs, "entry"), (exit_, nret, "exit")):
            if not isinstance(plans, (tuple, list)) or len(plans) != n:
                _malformed(f"{what}: not {n} {kind} plans")
        if sizes is not None:
            if not isinstance(sizes, (tuple, list)) or len(sizes) != 2:
                _malformed(f"{what}: sizes are not (entry, exit)")
            sizes = tuple(_int(n, f"{what}: {kind} size", 0, limit.size)
                          for n, kind in zip(sizes, ("entry", "exit")))
            if any(n % 8 for n in sizes):
                _malformed(f"{what}: sizes {sizes} are not multiples of 8")
        return cls(tuple(Plan.check(p, f"{what}: entry plan", limit) for p in entry),
                   tuple(Plan.check(p, f"{what}: exit plan", limit) for p in exit_), sizes)


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
    length: tuple = ()  # a buffer's: where its length is (the module's docstring)
    why: str = ""  # left out of the record (head -1): why; "" where it is in the record

    @classmethod
    def check(cls, obj, what: str, limit: Limit) -> CaptureDesc:
        if isinstance(obj, (tuple, list)) and len(obj) == len(cls._fields) - 2:
            obj = tuple(obj) + ((), "")  # not a buffer, in the record or said nothing of why
        elif isinstance(obj, (tuple, list)) and len(obj) == len(cls._fields) - 1:
            obj = tuple(obj) + ("",)
        name, kind, t, size, bit_offset, bit_size, at_exit, head, mask, pointers, length, why = \
            _fields(obj, cls, what)
        what = f"{what} {_str(name, what)!r}"
        if kind not in ("str", "value", "buf"):
            _malformed(f"{what}: kind {kind!r}")
        if (kind == "buf") != bool(length):
            _malformed(f"{what}: a length {length!r} for kind {kind!r}")
        if length:
            length = _length(length, f"{what}: length", limit)
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
                   tuple(_str(p, f"{what}: pointer") for p in pointers), length,
                   _str(why, f"{what}: why"))


def _length(obj, what: str, limit: Limit) -> tuple:
    at, size, signed, name, head, mask = _fields(obj, _LengthFields, what)
    _int(at, f"{what}: offset", -1, limit.size)
    if at >= 0 and size not in (1, 2, 4, 8):
        _malformed(f"{what}: an integer of {size!r} bytes")
    return (at, _int(size, f"{what}: bytes", 1, limit.size), _flag(signed, f"{what}: signed"),
            _str(name, f"{what}: name"), _int(head, f"{what}: head", -1, limit.size),
            _int(mask, f"{what}: mask", 0, (1 << 64) - 1))


class _LengthFields(NamedTuple):
    at: int
    size: int
    signed: bool
    name: str
    head: int
    mask: int



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
