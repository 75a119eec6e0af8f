"""A parsed filter checked against one function's BTF prototype: every path resolved
(typed/path.py), every comparison given the signedness it is made in, every mismatch refused
with the column it is at. The result is what the C emitter prints, with nothing left to decide.

A filter is split at its top-level `&&`s: the conjuncts that name `$retval` are evaluated at
exit, the others at entry (where the arguments are read). A conjunct that mixes both (under an
`||` or a `!`) cannot be evaluated at either point and is refused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from btfgen.btf import types as T
from btfgen.btf.walk import strip
from btfgen.typed import path as P
from btfgen.typed import filter_syntax as S
from btfgen.typed.filter_syntax import FilterError

S64_MIN, U64_MAX = -(1 << 63), (1 << 64) - 1


# ---- checked values: what one operand of a comparison is in the BPF program -----------------

@dataclass(frozen=True, slots=True)
class Load:
    """A scalar read along a path: an integer, enum, bool or pointer (`pointer`), widened to 64
    bits with its own signedness."""

    path: P.Path
    signed: bool
    pointer: bool
    spelled: str  # the path as written, for messages


@dataclass(frozen=True, slots=True)
class Const:
    value: int


@dataclass(frozen=True, slots=True)
class Masked:
    """`a & b`, computed unsigned."""

    left: Value
    right: Value


Value = Load | Const | Masked


# ---- checked conditions ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Truth:
    """A value used as a condition: non-zero (a bit test `x & 0x800`, a non-NULL pointer)."""

    value: Value


@dataclass(frozen=True, slots=True)
class Cmp:
    op: str
    left: Value
    right: Value
    signed: bool  # compared as __s64 (else __u64)


@dataclass(frozen=True, slots=True)
class StrTest:
    """A C string along `path` equal to (or starting with) `literal`. `array`: the path ends at
    a char array (the bytes are there) rather than at a `char *` (the bytes are behind it)."""

    path: P.Path
    literal: bytes
    prefix: bool
    array: int  # the array's length, 0 for a `char *`
    user: bool | None  # where the string's bytes are, as typed/path.Read.user says
    raw: bool = False  # a buffer (`void *`): its first bytes, NULs and all, not a C string


@dataclass(frozen=True, slots=True)
class Neg:
    operand: Cond


@dataclass(frozen=True, slots=True)
class Both:
    left: Cond
    right: Cond


@dataclass(frozen=True, slots=True)
class Either:
    left: Cond
    right: Cond


Cond = Truth | Cmp | StrTest | Neg | Both | Either


@dataclass(frozen=True, slots=True)
class Checked:
    """One function's filter: the condition at entry and the one at exit, None where the filter
    has no conjunct for that point."""

    func: str
    text: str
    entry: Cond | None
    exit: Cond | None


def check(flt: S.Filter, func: T.Func, unavailable: dict[int | None, str] | None = None,
          separate_spaces: str | None = None) -> Checked:
    """`unavailable`: the values the placement cannot read (parameter index, None for the
    return value) and why. `separate_spaces`: path.resolve's (the arch, where kernel and user
    addresses overlap and the reads are a kernel probe's)."""
    entry: list[Cond] = []
    exit_: list[Cond] = []
    for part in _conjuncts(flt.expr):
        at_exit = _mentions_retval(part, func)
        checker = _Checker(func, at_exit, unavailable or {}, separate_spaces)
        (exit_ if at_exit else entry).append(checker.cond(part))
    return Checked(func.name, flt.text, _all(entry), _all(exit_))


def _all(conds: list[Cond]) -> Cond | None:
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = Both(out, c)
    return out


def _conjuncts(node: S.Node) -> list[S.Node]:
    if isinstance(node, S.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _refs(node: S.Node) -> list[S.Ref]:
    if isinstance(node, S.Ref):
        return [node]
    if isinstance(node, S.Prefix):
        return [node.ref]
    out = []
    for name in ("left", "right", "operand"):
        child = getattr(node, name, None)
        if child is not None:
            out += _refs(child)
    return out


def _is_retval(ref: S.Ref) -> bool:
    return ref.syntax.root in (P.RETVAL, "retval")


def _mentions_retval(part: S.Node, func: T.Func) -> bool:
    refs = _refs(part)
    rets = [r for r in refs if _is_retval(r)]
    params = {p.name for p in func.proto.params}
    args = [r for r in refs if r.syntax.root in params]
    if rets and args:
        first = min(args + rets, key=lambda r: r.column)
        raise FilterError(
            "this condition mixes arguments (read at entry) with $retval (known at exit): "
            "join such conditions with a top-level && (entry ones filter the call's entry "
            "and exit, $retval ones its exit)", first.column)
    return bool(rets)


class _Checker:
    def __init__(self, func: T.Func, at_exit: bool, unavailable: dict[int | None, str],
                 separate_spaces: str | None = None):
        self.func, self.at_exit, self.unavailable = func, at_exit, unavailable
        self.separate = separate_spaces

    # conditions
    def cond(self, node: S.Node) -> Cond:
        if isinstance(node, S.And):
            return Both(self.cond(node.left), self.cond(node.right))
        if isinstance(node, S.Or):
            return Either(self.cond(node.left), self.cond(node.right))
        if isinstance(node, S.Not):
            return Neg(self.cond(node.operand))
        if isinstance(node, S.Prefix):
            return self._string(node.ref, node.literal, prefix=True)
        if isinstance(node, S.Compare):
            return self._compare(node)
        if isinstance(node, S.StrLit):
            raise FilterError("a string is not a condition: compare a string argument with "
                              "it (== or !=) or use prefix(PATH, \"...\")", node.column)
        if isinstance(node, S.IntLit):
            raise FilterError("a constant condition: compare a value with it", node.column)
        value = self.value(node)
        return Truth(value)

    def _compare(self, node: S.Compare) -> Cond:
        left, right = node.left, node.right
        if isinstance(right, S.StrLit) or isinstance(left, S.StrLit):
            ref, lit = (left, right) if isinstance(right, S.StrLit) else (right, left)
            if node.op not in ("==", "!="):
                raise FilterError(f"strings compare only with == and != (or prefix()), not "
                                  f"{node.op}", node.column)
            if not isinstance(ref, S.Ref):
                raise FilterError("a string compares only with a string argument or field",
                                  ref.column)
            test = self._string(ref, lit, prefix=False)
            return Neg(test) if node.op == "!=" else test
        a, b = self.value(left), self.value(right)
        ordering = node.op not in ("==", "!=")
        for v, n in ((a, left), (b, right)):
            if ordering and isinstance(v, Load) and v.pointer:
                raise FilterError(f"{v.spelled} is a pointer: pointers compare only with == "
                                  f"and != (ordering addresses means nothing here)", n.column)
        for v, other, n in ((a, b, left), (b, a, right)):
            if isinstance(v, Load) and v.pointer and not (
                    isinstance(other, Const) or (isinstance(other, Load) and other.pointer)):
                raise FilterError(f"{v.spelled} is a pointer: compare it with another pointer "
                                  f"or a number (0 for NULL)", n.column)
        signed = _signed(a) and _signed(b)
        for v, other, n in ((a, b, left), (b, a, right)):
            if isinstance(v, Const) and not _signed(other) and v.value < 0:
                raise FilterError(f"{_spell_value(other)} is unsigned: it is never equal to "
                                  f"or below {v.value}", n.column)
        for v, n in ((a, left), (b, right)):
            if signed and isinstance(v, Const) and v.value >= 1 << 63:
                raise FilterError(f"{v.value} is beyond every signed 64-bit value", n.column)
        if ordering and isinstance(a, Load) and isinstance(b, Load) and \
                _signed(a) != _signed(b):
            raise FilterError(f"{a.spelled} and {b.spelled} differ in signedness: ordering "
                              f"them would depend on C's conversions", node.column)
        return Cmp(node.op, a, b, signed)

    # values
    def value(self, node: S.Node) -> Value:
        if isinstance(node, S.IntLit):
            if not S64_MIN <= node.value <= U64_MAX:
                raise FilterError(f"{node.value} does not fit in 64 bits", node.column)
            return Const(node.value)
        if isinstance(node, S.BitAnd):
            left, right = self.value(node.left), self.value(node.right)
            for v, n in ((left, node.left), (right, node.right)):
                if isinstance(v, Load) and v.pointer:
                    raise FilterError(f"{v.spelled} is a pointer: & tests bits of integers",
                                      n.column)
                if isinstance(v, Const) and v.value < 0:
                    raise FilterError("& takes a non-negative mask", n.column)
            return Masked(left, right)
        if isinstance(node, S.Ref):
            return self._load(node)
        if isinstance(node, S.StrLit):
            raise FilterError("a string compares only with == or != against a string "
                              "argument or field", node.column)
        raise FilterError("a condition where a value is expected: parenthesise the "
                          "comparison", node.column)

    def _resolve(self, ref: S.Ref) -> P.Path:
        syntax = ref.syntax
        try:
            path = P.resolve(self.func, syntax, at_exit=self.at_exit,
                             separate_spaces=self.separate)
        except P.PathError as e:
            raise FilterError(str(e).split(": ", 1)[1], e.column) from None
        why = self.unavailable.get(path.param)
        if why is not None:
            raise FilterError(f"{syntax.root} is unavailable here: {why}", syntax.root_column)
        return path

    def _load(self, ref: S.Ref) -> Value:
        syntax = ref.syntax
        params = {p.name for p in self.func.proto.params}
        if not syntax.steps and not syntax.star and syntax.root not in params and \
                not _is_retval(ref):
            found = _enum_constant(self.func.table, syntax.root)
            if found is not None:
                return Const(found)
        if syntax.star:
            raise FilterError(f"{syntax.text} is a whole pointee: a filter compares scalars "
                              f"and strings (name a member)", ref.column)
        path = self._resolve(ref)
        t = strip(path.type)
        what = syntax.text
        if isinstance(t, T.Int):
            if path.size > 8 and not path.bit_size:
                raise FilterError(f"{what} is a {path.size}-byte integer: at most 8 bytes",
                                  ref.column)
            if path.bit_size and path.size > 8:
                raise FilterError(f"{what}: a bitfield spanning more than 8 bytes", ref.column)
            return Load(path, t.signed and not t.is_bool, False, what)
        if isinstance(t, T.Enum):
            return Load(path, t.signed, False, what)
        if isinstance(t, T.Ptr):
            return Load(path, False, True, what)
        if isinstance(t, T.Float):
            raise FilterError(f"{what} is floating point: not compared in BPF", ref.column)
        if isinstance(t, T.Array) and _is_char(t.elem):
            raise FilterError(f"{what} is a string (char array): compare it with a string "
                              f"literal", ref.column)
        raise FilterError(f"{what} is {_kind_name(t)}: a filter compares integers, enums, "
                          f"pointers and strings (name a member)", ref.column)

    def _string(self, ref: S.Node, lit: S.StrLit, prefix: bool) -> StrTest:
        if not isinstance(ref, S.Ref):
            raise FilterError("a string compares only with a string argument or field",
                              ref.column)
        path = self._resolve(ref)
        t = strip(path.type)
        if isinstance(t, T.Ptr) and _is_char(t.type):
            if path.pointee_user is None and self.separate:
                e = P.memory_unknown(ref.syntax, self.separate)
                raise FilterError(str(e).split(": ", 1)[1], e.column)
            return StrTest(path, lit.value, prefix, 0, path.pointee_user)
        if isinstance(t, T.Ptr) and isinstance(strip(t.type), T.Void):
            # A buffer (`SSL_write: buf`): no NUL says where it ends, so only its first bytes
            # are tested, as many as the literal has.
            if not prefix:
                raise FilterError(f"{ref.syntax.text} is a buffer ({_kind_name(t)}): test its "
                                  f"first bytes with prefix({ref.syntax.text}, \"...\")",
                                  ref.column)
            if path.pointee_user is None and self.separate:
                e = P.memory_unknown(ref.syntax, self.separate)
                raise FilterError(str(e).split(": ", 1)[1], e.column)
            return StrTest(path, lit.value, True, 0, path.pointee_user, raw=True)
        if isinstance(t, T.Array) and _is_char(t.elem):
            if not path.reads:
                raise FilterError(f"{ref.syntax.text}: a char array passed by value is not "
                                  f"compared (only strings in memory)", ref.column)
            n = t.nelems
            if len(lit.value) > n or (not prefix and len(lit.value) == n + 1):
                raise FilterError(f"\"{lit.value.decode(errors='replace')}\" is longer than "
                                  f"{ref.syntax.text} ({n} bytes)", lit.column)
            return StrTest(path, lit.value, prefix, n, path.reads[-1].user)
        raise FilterError(f"{ref.syntax.text} is {_kind_name(t)}, not a string (char * or "
                          f"char array) or a buffer (void *)", ref.column)


def _is_char(t: T.Type) -> bool:
    t = strip(t)
    return isinstance(t, T.Int) and t.size == 1 and not t.is_bool


def _signed(v: Value) -> bool:
    if isinstance(v, Const):
        return True  # a literal takes the other side's signedness (refused if it cannot)
    if isinstance(v, Masked):
        return False
    return v.signed


def _spell_value(v: Value) -> str:
    if isinstance(v, Load):
        return v.spelled
    return "the masked value" if isinstance(v, Masked) else str(v.value)


def _kind_name(t: T.Type) -> str:
    if isinstance(t, T.Struct):
        return f"a struct ({_spell(t)})"
    if isinstance(t, T.Union):
        return f"a union ({_spell(t)})"
    if isinstance(t, T.Array):
        return f"an array ({_spell(t)})"
    return _spell(t)


def _spell(t: T.Type) -> str:
    return P._spell(t)


def _enum_constant(table: T.TypeSource, name: str) -> int | None:
    return _enum_constants(table).get(name)


@functools.lru_cache(maxsize=4)
def _enum_constants(table: T.TypeSource) -> dict[str, int]:
    """Every enumerator in the BTF; a name two enums give different values is left out
    (ambiguous)."""
    found: dict[str, int] = {}
    clash: set[str] = set()
    for i in range(1, len(table)):
        t = table[i]
        if isinstance(t, T.Enum):
            for v in t.values:
                if v.name in found and found[v.name] != v.value:
                    clash.add(v.name)
                found.setdefault(v.name, v.value)
    return {k: v for k, v in found.items() if k not in clash}
