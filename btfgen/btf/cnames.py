"""The C spelling of a type: "const char *", "struct foo *", "int (*)(int, long)", "char [16]".

Names are copied verbatim; callers that emit code sanitise them. Built inside-out the way C
declarators read: a pointer wraps the declarator in "*", an array appends "[n]", a function
appends its parameter list, and a pointer to an array or function needs parentheses.
"""

from __future__ import annotations

from btfgen.btf.types import (
    Array,
    Composite,
    Const,
    Datasec,
    DeclTag,
    Enum,
    Float,
    Func,
    FuncProto,
    Fwd,
    Int,
    Ptr,
    Restrict,
    Struct,
    Type,
    Typedef,
    TypeTag,
    Var,
    Void,
    Volatile,
    descend,
)

_QUALIFIER_WORDS = ((Const, "const"), (Volatile, "volatile"), (Restrict, "restrict"))


def c_spelling(t: Type) -> str:
    """How C spells `t` as an abstract declarator (no identifier)."""
    return _spell(t, "", 0)


def c_declaration(t: Type, name: str) -> str:
    """`t` declaring `name`: "char *argv[]" style."""
    return _spell(t, name, 0)


def _join(base: str, declarator: str) -> str:
    return f"{base} {declarator}" if declarator else base


def _tag_name(keyword: str, name: str) -> str:
    return f"{keyword} {name or '(anon)'}"


def _qualifier(t: Type) -> str | None:
    for cls, word in _QUALIFIER_WORDS:
        if isinstance(t, cls):
            return word
    return None


def _spell(t: Type, declarator: str, depth: int) -> str:
    depth = descend(t, depth)
    if isinstance(t, Void):
        return _join("void", declarator)
    if isinstance(t, (Int, Float, Typedef)):
        return _join(t.name, declarator)
    if isinstance(t, Composite):
        return _join(_tag_name("struct" if isinstance(t, Struct) else "union", t.name),
                     declarator)
    if isinstance(t, Enum):
        return _join(_tag_name("enum", t.name), declarator)
    if isinstance(t, Fwd):
        return _join(_tag_name("union" if t.is_union else "struct", t.name), declarator)
    if isinstance(t, TypeTag):  # an annotation (__user, __rcu): no C meaning
        return _spell(t.type, declarator, depth)
    word = _qualifier(t)
    if word is not None:
        target = t.type  # type: ignore[attr-defined]
        while isinstance(target, TypeTag):
            target = target.type
        if isinstance(target, Ptr):  # qualifies the pointer itself: "char *const"
            return _spell(target, _join(word, declarator), depth)
        return f"{word} {_spell(target, declarator, depth)}"
    if isinstance(t, Ptr):
        target = t.type
        while isinstance(target, TypeTag):
            target = target.type
        inner = "*" + declarator
        if isinstance(target, (Array, FuncProto)):
            inner = f"({inner})"
        return _spell(target, inner, depth)
    if isinstance(t, Array):
        return _spell(t.elem, f"{declarator}[{t.nelems}]", depth)
    if isinstance(t, FuncProto):
        params = [_spell(p.type, "", depth) for p in t.params]
        if t.variadic:
            params.append("...")
        return _spell(t.ret, f"{declarator}({', '.join(params) or 'void'})", depth)
    if isinstance(t, Func):
        return _spell(t.proto, declarator or t.name, depth)
    if isinstance(t, (Var, DeclTag)):
        return _spell(t.type, declarator, depth)
    if isinstance(t, Datasec):
        return _join(t.name, declarator)
    raise TypeError_(f"type {t.id}: no C spelling for kind {t.kind.name}")
