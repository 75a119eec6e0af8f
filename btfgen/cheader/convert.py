"""libclang cursors and types → the BTF type model (`btfgen.btf.types`).

The output imitates what pahole makes from the DWARF of the same declarations, so that placement,
decoders and layouts cannot tell the two front ends apart: gcc's spellings of the base types
("long unsigned int"), no INT_CHAR bit (pahole never sets it), `__ARRAY_SIZE_TYPE__` as the array
index type, ENUM64 for 8-byte enums, struct kind_flag only when a member is a bitfield, unnamed
bitfields dropped, anonymous struct/union members kept with an empty name.

Ids are handed out in the order types are first reached, so the same headers always give the same
ids. A record gets its id before its members are converted, which is what lets
`struct node { struct node *next; }` refer to itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from btfgen.btf import walk
from btfgen.btf import types as T

from . import clang as C

try:
    from clang.cindex import CursorKind, StorageClass
except ImportError:  # pragma: no cover - reported by clang._require()
    CursorKind = StorageClass = None


class Unsupported(Exception):
    """A type BTF has no way to say (vectors, _Complex, ...); the message names it."""


# gcc's DWARF names for the base types, which pahole copies into BTF.
_INT_NAMES = {
    "BOOL": "_Bool",
    "CHAR_S": "char",
    "CHAR_U": "char",
    "SCHAR": "signed char",
    "UCHAR": "unsigned char",
    "SHORT": "short int",
    "USHORT": "short unsigned int",
    "INT": "int",
    "UINT": "unsigned int",
    "LONG": "long int",
    "ULONG": "long unsigned int",
    "LONGLONG": "long long int",
    "ULONGLONG": "long long unsigned int",
    "INT128": "__int128",
    "UINT128": "__int128 unsigned",
    "CHAR16": "char16_t",
    "CHAR32": "char32_t",
    "WCHAR": "wchar_t",
}
_SIGNED = {"CHAR_S", "SCHAR", "SHORT", "INT", "LONG", "LONGLONG", "INT128", "WCHAR"}
_FLOAT_NAMES = {
    "HALF": "_Float16",
    "FLOAT16": "_Float16",
    "FLOAT": "float",
    "DOUBLE": "double",
    "LONGDOUBLE": "long double",
    "FLOAT128": "_Float128",
}
ARRAY_INDEX_NAME = "__ARRAY_SIZE_TYPE__"


@dataclass(frozen=True, slots=True)
class FuncDecl:
    """A function declaration the table offers, or the reason it cannot."""

    name: str
    where: str  # file:line:col
    func_id: int = 0
    error: str = ""


class Builder:
    """Accumulates types; `mark()`/`rollback()` undo a declaration that turned out unsupported."""

    def __init__(self, table: T.TypeSource) -> None:
        self.table = table
        self.types: list[T.Type | None] = [T.Void(0, "", table)]
        self._ids: dict[tuple, int] = {}
        self._key_order: list[tuple] = []

    # -- id bookkeeping ----------------------------------------------------------------------
    def mark(self) -> tuple[int, int]:
        return len(self.types), len(self._key_order)

    def rollback(self, mark: tuple[int, int]) -> None:
        ntypes, nkeys = mark
        del self.types[ntypes:]
        for key in self._key_order[nkeys:]:
            del self._ids[key]
        del self._key_order[nkeys:]

    def _reserve(self, key: tuple) -> int:
        type_id = len(self.types)
        self.types.append(None)
        self._ids[key] = type_id
        self._key_order.append(key)
        return type_id

    def _intern(self, key: tuple, make) -> int:
        """The id of the type `key` names, making it with `make(id)` the first time."""
        type_id = self._ids.get(key)
        if type_id is None:
            type_id = self._reserve(key)
            self.types[type_id] = make(type_id)
        return type_id

    # -- declarations ------------------------------------------------------------------------
    def function(self, cursor) -> int:
        key = ("func", cursor.get_usr() or cursor.spelling)
        if key in self._ids:
            return self._ids[key]
        ftype = _plain(cursor.type)
        if C.kind_of(ftype) not in ("FUNCTIONPROTO", "FUNCTIONNOPROTO"):
            ftype = ftype.get_canonical()  # declared through a typedef of a function type
        if C.kind_of(ftype) == "FUNCTIONPROTO":
            args = list(cursor.get_arguments())
            if len(args) == len(list(ftype.argument_types())):
                names = [a.spelling for a in args]
                params = [self.param_type(a.type) for a in args]
            else:  # declared through a typedef of a function type: no names to be had
                params = [self.param_type(a) for a in ftype.argument_types()]
                names = [""] * len(params)
            variadic = ftype.is_function_variadic()
        else:  # `int f()`: unprototyped, gcc and pahole give it no parameters
            names, params, variadic = [], [], False
        ret = self.type(ftype.get_result())
        proto_id = self._reserve(("proto-of", key))
        self.types[proto_id] = T.FuncProto(
            proto_id, "", self.table, ret,
            tuple(T.Param(n, p, self.table) for n, p in zip(names, params)), variadic)
        linkage = T.Linkage.STATIC if cursor.storage_class == StorageClass.STATIC \
            else T.Linkage.GLOBAL
        return self._intern(key, lambda i: T.Func(i, cursor.spelling, self.table, proto_id,
                                                  linkage))

    def param_type(self, t) -> int:
        # C adjusts array and function parameters to pointers; libclang shows them as written.
        # A typedef of an array or function type adjusts too.
        canon = t.get_canonical()
        kind = C.kind_of(canon)
        if kind in ("CONSTANTARRAY", "INCOMPLETEARRAY", "VARIABLEARRAY"):
            return self._pointer(self.type(canon.element_type))
        if kind in ("FUNCTIONPROTO", "FUNCTIONNOPROTO"):
            return self._pointer(self.type(_plain(t)))
        return self.type(t)

    def declaration(self, cursor) -> int | None:
        """A top-level struct/union/enum/typedef, so `find_types` knows it even if unused."""
        if cursor.kind == CursorKind.TYPEDEF_DECL:
            return self.type(cursor.type)
        if cursor.kind in (CursorKind.STRUCT_DECL, CursorKind.UNION_DECL, CursorKind.ENUM_DECL):
            if cursor.spelling and not C.is_anonymous_member(cursor):
                return self.type(cursor.type)
        return None

    # -- types -------------------------------------------------------------------------------
    def type(self, t) -> int:
        quals = set()
        for _ in range(walk.MAX_CHAIN):
            # Qualifiers sit on the outermost spelling (`const struct s` is an elaborated type
            # that is const), so collect them before each layer is seen through.
            if t.is_const_qualified() or t.is_volatile_qualified() or t.is_restrict_qualified():
                quals |= {q for q, on in (("const", t.is_const_qualified()),
                                          ("volatile", t.is_volatile_qualified()),
                                          ("restrict", t.is_restrict_qualified())) if on}
                t = C.unqualified(t)
            inner = _see_through(t)
            if inner is None:
                break
            t = inner
        return self._qualify(self._unqualified_type(t), quals)

    def _unqualified_type(self, t) -> int:
        kind = C.kind_of(t)
        if kind == "VOID":
            return 0
        if kind in _INT_NAMES:
            return self._int(kind, t.get_size())
        if kind in _FLOAT_NAMES:
            name, size = _FLOAT_NAMES[kind], t.get_size()
            return self._intern(("float", name, size), lambda i: T.Float(i, name, self.table, size))
        if kind == "POINTER":
            return self._pointer(self.type(t.get_pointee()))
        if kind == "TYPEDEF":
            return self._typedef(t)
        if kind == "RECORD":
            return self._record(t)
        if kind == "ENUM":
            return self._enum(t)
        if kind in ("CONSTANTARRAY", "INCOMPLETEARRAY"):
            return self._array(t)
        if kind in ("FUNCTIONPROTO", "FUNCTIONNOPROTO"):
            return self._proto(t)
        raise Unsupported(f"type '{t.spelling}' ({kind.lower()}) has no BTF equivalent")

    def _qualify(self, inner: int, quals: set[str]) -> int:
        # gcc's DWARF, and so pahole's BTF, puts volatile outside const: volatile → const → T.
        for qual, cls in (("restrict", T.Restrict), ("const", T.Const), ("volatile", T.Volatile)):
            if qual in quals:
                base = inner
                inner = self._intern(
                    (qual, base), lambda i, cls=cls, base=base: cls(i, "", self.table, base))
        return inner

    def _int(self, kind_name: str, size: int) -> int:
        name = _INT_NAMES[kind_name]
        if kind_name == "BOOL":
            encoding = T.INT_BOOL
        else:
            encoding = T.INT_SIGNED if kind_name in _SIGNED else 0
        return self._intern(("int", name, size, encoding),
                            lambda i: T.Int(i, name, self.table, size, encoding, 0, 8 * size))

    def _pointer(self, target: int) -> int:
        return self._intern(("ptr", target), lambda i: T.Ptr(i, "", self.table, target))

    def _array(self, t) -> int:
        # pahole flattens `int m[2][3]` (one DWARF array type with two subranges) into a single
        # array of 6; a typedef'd row type in between keeps the nesting, as in DWARF.
        nelems = t.element_count if C.kind_of(t) == "CONSTANTARRAY" else 0
        elem = t.element_type
        while C.kind_of(_plain(elem)) == "CONSTANTARRAY":
            elem = _plain(elem)
            nelems *= elem.element_count
            elem = elem.element_type
        elem_id = self.type(elem)
        return self._array_of(elem_id, nelems)

    def _array_of(self, elem: int, nelems: int) -> int:
        index = self._intern(("int", ARRAY_INDEX_NAME, 4, 0),
                             lambda i: T.Int(i, ARRAY_INDEX_NAME, self.table, 4, 0, 0, 32))
        return self._intern(("array", elem, nelems),
                            lambda i: T.Array(i, "", self.table, elem, index, nelems))

    def _proto(self, t) -> int:
        ret = self.type(t.get_result())
        if C.kind_of(t) == "FUNCTIONPROTO":
            params = tuple(self.param_type(a) for a in t.argument_types())
            variadic = t.is_function_variadic()
        else:
            params, variadic = (), False
        return self._intern(
            ("proto", ret, params, variadic),
            lambda i: T.FuncProto(i, "", self.table, ret,
                                  tuple(T.Param("", p, self.table) for p in params), variadic))

    def _typedef(self, t) -> int:
        decl = t.get_declaration()
        key = ("typedef", _decl_key(decl))
        if key in self._ids:
            return self._ids[key]
        target = self.type(decl.underlying_typedef_type)
        return self._intern(key, lambda i: T.Typedef(i, decl.spelling, self.table, target))

    def _record(self, t) -> int:
        decl = t.get_declaration()
        definition = decl.get_definition()
        is_union = decl.kind == CursorKind.UNION_DECL
        name = _tag_name(decl)
        if definition is None:
            return self._intern(("fwd", _decl_key(decl)),
                                lambda i: T.Fwd(i, name, self.table, is_union))
        key = ("record", _decl_key(definition))
        if key in self._ids:
            return self._ids[key]
        type_id = self._reserve(key)
        members = []
        for field in t.get_fields():
            width = field.get_bitfield_width() if field.is_bitfield() else 0
            anonymous = C.is_anonymous_member(field.type.get_declaration()) \
                if C.kind_of(_plain(field.type)) == "RECORD" else False
            if not anonymous and (not field.spelling or (field.is_bitfield() and width == 0)):
                continue  # unnamed bitfields are padding: gcc emits no DWARF member for them
            member_type = self.type(field.type)
            members.append(T.Member("" if anonymous else field.spelling, member_type,
                                     field.get_field_offsetof(), width, self.table))
        cls = T.Union if is_union else T.Struct
        self.types[type_id] = cls(type_id, name, self.table, t.get_size(), tuple(members),
                                  any(m.bitfield_size for m in members))
        return type_id

    def _enum(self, t) -> int:
        decl = t.get_declaration()
        definition = decl.get_definition() or decl
        key = ("enum", _decl_key(definition))
        if key in self._ids:
            return self._ids[key]
        size = t.get_size()
        if size <= 0:  # `enum e;` never defined: BTF spells it as an empty 4-byte enum
            size = 4
        signed = C.kind_of(definition.enum_type.get_canonical()) in _SIGNED
        values = tuple(T.EnumValue(c.spelling, c.enum_value) for c in definition.get_children()
                       if c.kind == CursorKind.ENUM_CONSTANT_DECL)
        name = _tag_name(decl)
        return self._intern(key, lambda i: T.Enum(i, name, self.table, size, signed, values,
                                                  size > 4))


def _see_through(t):
    """The type under one layer that C spelling adds but the type model does not keep: `struct`
    elaboration, attributes, _Atomic; None when there is no such layer."""
    kind = C.kind_of(t)
    if kind == "ELABORATED":
        return t.get_named_type()
    if kind in ("ATTRIBUTED", "BTFTAGATTRIBUTED"):
        return C.modified(t)
    if kind == "ATOMIC":
        return C.atomic_value(t)
    if kind == "UNEXPOSED":
        canon = t.get_canonical()
        return None if C.kind_of(canon) == "UNEXPOSED" else canon
    return None


def _plain(t):
    """`t` seen through every such layer (its qualifiers dropped on the way)."""
    for _ in range(walk.MAX_CHAIN):
        inner = _see_through(t)
        if inner is None:
            return t
        t = inner
    return t


def _tag_name(decl) -> str:
    """A struct/union/enum tag as BTF has it: empty for `struct { ... } x` and also for
    `typedef struct { ... } name_t`, which libclang spells with the typedef's name (its USR
    says "SA"/"UA"/"EA": anonymous, named through a typedef)."""
    if decl.is_anonymous() or _ANON_TYPEDEF_USR.search(decl.get_usr() or ""):
        return ""
    return decl.spelling


_ANON_TYPEDEF_USR = re.compile(r"@(SA|UA|EA)@[^@]*$")


def _decl_key(cursor) -> tuple:
    """A declaration's identity: its USR, or its place for the unnamed ones (whose USR is a
    place too, but not always unique across macro expansions)."""
    loc = cursor.location
    return (cursor.get_usr(), loc.file.name if loc.file else "", loc.offset)
