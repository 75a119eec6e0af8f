"""Walking BTF types: the one per-kind dispatch, depth limit and cycle rule of every computation
over types (measuring in `measure`, C spelling in `cnames` and `codegen.cdecl`, ABI shapes in
`abi.classify`, record descriptors in `records.describe`, ctx fields in `abi.ctx`).

A computation is a `TypeWalk` subclass with one method per kind it handles, as LLVM's and
cilium/ebpf's type visitors are. The reader refuses loops of references when it decodes, but a
loop through members (`struct a { struct a x; }`) only shows as depth: a chain or a nesting
deeper than MAX_DEPTH is a cycle in hostile BTF, not a real kernel type, and every walk stops
there with a `TypeWalkError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from btfgen.btf import types as T

MAX_DEPTH = 64
MAX_CHAIN = MAX_DEPTH  # the modifier chains strip() follows


def descend(t: T.Type, depth: int) -> int:
    """The depth one step below `t` (into a type it refers to), or TypeWalkError past MAX_DEPTH."""
    if depth >= MAX_DEPTH:
        raise T.TypeWalkError(f"type {t.id}: nested deeper than {MAX_DEPTH} (a cycle?)")
    return depth + 1


_MODIFIERS = (T.Typedef, T.Volatile, T.Const, T.Restrict, T.TypeTag)
_CV = (T.Volatile, T.Const, T.Restrict, T.TypeTag)


def strip(t: T.Type) -> T.Type:
    """Follow typedef/const/volatile/restrict/type_tag to the type that gives the meaning."""
    return _follow(t, _MODIFIERS)


def strip_cv(t: T.Type) -> T.Type:
    """Follow const/volatile/restrict/type_tag but keep typedef names."""
    return _follow(t, _CV)


def _follow(t: T.Type, through: tuple[type, ...]) -> T.Type:
    for _ in range(MAX_CHAIN):
        if not isinstance(t, through):
            return t
        t = t.type
    raise T.TypeWalkError(f"type {t.id}: modifier chain longer than {MAX_CHAIN} (a cycle?)")


# The method each kind's class goes to, then the group a kind without its own method falls back
# to: struct and union are composites; const, volatile and restrict are C qualifiers; qualifiers,
# typedefs and type tags are modifiers, which by default the walk sees through.
_METHOD = {
    T.Void: "visit_void", T.Int: "visit_int", T.Ptr: "visit_ptr", T.Array: "visit_array",
    T.Struct: "visit_struct", T.Union: "visit_union", T.Enum: "visit_enum", T.Fwd: "visit_fwd",
    T.Typedef: "visit_typedef", T.Volatile: "visit_volatile", T.Const: "visit_const",
    T.Restrict: "visit_restrict", T.TypeTag: "visit_type_tag", T.Func: "visit_func",
    T.FuncProto: "visit_func_proto", T.Var: "visit_var", T.Datasec: "visit_datasec",
    T.Float: "visit_float", T.DeclTag: "visit_decl_tag", T.Unknown: "visit_unknown",
}
_GROUP = {
    "visit_struct": "visit_composite", "visit_union": "visit_composite",
    "visit_const": "visit_qualifier", "visit_volatile": "visit_qualifier",
    "visit_restrict": "visit_qualifier", "visit_qualifier": "visit_modifier",
    "visit_typedef": "visit_modifier", "visit_type_tag": "visit_modifier",
}


class TypeWalk:
    """A computation over types, one `visit_<kind>` method per kind it handles.

    `visit(t, depth, *args)` counts one level of the one depth limit, then calls the method for
    `t`'s kind with the depth to visit `t`'s children at. A kind without a method goes to its
    group (`visit_composite`, `visit_qualifier`, `visit_modifier`: see `_GROUP`), and a kind
    without either to `visit_other`, which says the type has no `what`.
    """

    what = "meaning here"  # what the walk computes, for `visit_other`'s error
    _table: dict[type, Any] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._table = {kind_class: cls._resolve(name) for kind_class, name in _METHOD.items()}

    @classmethod
    def _resolve(cls, name: str) -> Any:
        while not hasattr(cls, name):
            name = _GROUP.get(name, "visit_other")
        return getattr(cls, name)

    def visit(self, t: T.Type, depth: int = 0, *args: Any) -> Any:
        return self._table[type(t)](self, t, descend(t, depth), *args)

    def visit_modifier(self, t: T.Type, depth: int, *args: Any) -> Any:
        return self.visit(t.type, depth, *args)  # type: ignore[attr-defined]

    def visit_other(self, t: T.Type, depth: int, *args: Any) -> Any:
        raise T.TypeWalkError(f"type {t.id} ({t.name or t.kind.name}): has no {self.what}")

    def visit_unknown(self, t: T.Unknown, depth: int, *args: Any) -> Any:
        # Every walk, whatever it computes: a kind btfgen does not know has no size, spelling
        # or meaning it could stand behind, and its reason is what the user must read.
        raise T.TypeWalkError(f"{t.reason} (type {t.id})")


def named_members(t: T.Type, depth: int = 0) -> Iterator[tuple[T.Member, int]]:
    """The members C code names on `t`, each with its bit offset from the start of `t`: an
    anonymous struct/union member's own members lifted into their parent, as C lets you name
    them; unnamed bitfields (padding) left out."""
    s = strip(t)
    if not isinstance(s, T.Composite):
        return
    below = descend(s, depth)
    for m in s.members:
        if m.name:
            yield m, m.bit_offset
        elif not m.bitfield_size:
            for inner, offset in named_members(m.type, below):
                yield inner, m.bit_offset + offset
