"""The C spelling of a type: "const char *", "struct foo *", "int (*)(int, long)", "char [16]".

Names are copied verbatim; callers that emit code sanitise them. Built inside-out the way C
declarators read: a pointer wraps the declarator in "*", an array appends "[n]", a function
appends its parameter list, and a pointer to an array or function needs parentheses.
"""

from __future__ import annotations

from btfgen.btf import types as T
from btfgen.btf.walk import TypeWalk

_QUALIFIER_WORDS = {T.Const: "const", T.Volatile: "volatile", T.Restrict: "restrict"}


def c_spelling(t: T.Type) -> str:
    """How C spells `t` as an abstract declarator (no identifier)."""
    return _SPELLING.visit(t, 0, "")


def c_declaration(t: T.Type, name: str) -> str:
    """`t` declaring `name`: "char *argv[]" style."""
    return _SPELLING.visit(t, 0, name)


def _join(base: str, declarator: str) -> str:
    return f"{base} {declarator}" if declarator else base


def _tag_name(keyword: str, name: str) -> str:
    return f"{keyword} {name or '(anon)'}"


def _untagged(t: T.Type) -> T.Type:
    """`t` without type tags (__user, __rcu): annotations with no C meaning."""
    while isinstance(t, T.TypeTag):
        t = t.type
    return t


class _CSpelling(TypeWalk):
    """Each method spells its type around `declarator`, the part of the declaration already
    built outside it."""

    what = "C spelling"

    def visit_void(self, t: T.Void, depth: int, declarator: str) -> str:
        return _join("void", declarator)

    def visit_int(self, t: T.Type, depth: int, declarator: str) -> str:
        return _join(t.name, declarator)

    visit_float = visit_typedef = visit_datasec = visit_int

    def visit_composite(self, t: T.Composite, depth: int, declarator: str) -> str:
        keyword = "struct" if isinstance(t, T.Struct) else "union"
        return _join(_tag_name(keyword, t.name), declarator)

    def visit_enum(self, t: T.Enum, depth: int, declarator: str) -> str:
        return _join(_tag_name("enum", t.name), declarator)

    def visit_fwd(self, t: T.Fwd, depth: int, declarator: str) -> str:
        return _join(_tag_name("union" if t.is_union else "struct", t.name), declarator)

    def visit_qualifier(self, t: T.Type, depth: int, declarator: str) -> str:
        word = _QUALIFIER_WORDS[type(t)]
        target = _untagged(t.type)  # type: ignore[attr-defined]
        if isinstance(target, T.Ptr):  # qualifies the pointer itself: "char *const"
            return self.visit(target, depth, _join(word, declarator))
        return f"{word} {self.visit(target, depth, declarator)}"

    def visit_ptr(self, t: T.Ptr, depth: int, declarator: str) -> str:
        target = _untagged(t.type)
        inner = "*" + declarator
        if isinstance(target, (T.Array, T.FuncProto)):
            inner = f"({inner})"
        return self.visit(target, depth, inner)

    def visit_array(self, t: T.Array, depth: int, declarator: str) -> str:
        return self.visit(t.elem, depth, f"{declarator}[{t.nelems}]")

    def visit_func_proto(self, t: T.FuncProto, depth: int, declarator: str) -> str:
        params = [self.visit(p.type, depth, "") for p in t.params]
        if t.variadic:
            params.append("...")
        return self.visit(t.ret, depth, f"{declarator}({', '.join(params) or 'void'})")

    def visit_func(self, t: T.Func, depth: int, declarator: str) -> str:
        return self.visit(t.proto, depth, declarator or t.name)

    def visit_var(self, t: T.Type, depth: int, declarator: str) -> str:
        return self.visit(t.type, depth, declarator)  # type: ignore[attr-defined]

    visit_decl_tag = visit_var


_SPELLING = _CSpelling()
