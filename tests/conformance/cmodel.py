"""The C types and prototypes the conformance suite generates, and their C spelling.

This is the suite's own small model, independent of btfgen's: the compiler lays the types out and
pahole describes them in BTF; the suite never computes a layout of its own except a generous size
bound used to keep every generated value within the 64-byte pattern buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

PATTERN = 64  # bytes of distinctive pattern behind every argument and return value


@dataclass(frozen=True, slots=True)
class Scalar:
    c: str  # C spelling: "int", "unsigned long long", "_Bool", "double", "__int128", "void *"
    kind: str  # "int" | "bool" | "float" | "ptr"

    def spell(self) -> str:
        return self.c


@dataclass(frozen=True, slots=True)
class EnumT:
    tag: str
    values: tuple[tuple[str, int], ...]

    def spell(self) -> str:
        return f"enum {self.tag}"


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: CType
    count: int = 0  # > 0: an array of `count` elements
    bits: int = 0  # > 0: a bitfield of `bits` bits


@dataclass(frozen=True, slots=True)
class Record:
    tag: str
    fields: tuple[Field, ...]
    union: bool = False
    packed: bool = False

    def spell(self) -> str:
        return f"{'union' if self.union else 'struct'} {self.tag}"


CType = Scalar | EnumT | Record


@dataclass(frozen=True, slots=True)
class Proto:
    """One generated function. `tail` are the types the caller passes through the `...`."""

    name: str
    ret: CType | None
    params: tuple[CType, ...]
    tail: tuple[Scalar, ...] = ()
    variadic: bool = False
    label: str = ""  # what a regression case is about ("" for random prototypes)

    def decl(self) -> str:
        params = [f"{t.spell()} p{i}" for i, t in enumerate(self.params)]
        if self.variadic:
            params.append("...")
        ret = self.ret.spell() if self.ret is not None else "void"
        return f"{ret} {self.name}({', '.join(params) or 'void'})"

    def describe(self) -> str:
        """The prototype with the definitions of the types it uses, as C (for failure reports)."""
        lines = [definition(t) for t in dependencies(self)]
        if self.tail:
            lines.append(f"/* variadic tail passed: {', '.join(t.c for t in self.tail)} */")
        if self.label:
            lines.append(f"/* {self.label} */")
        lines.append(self.decl() + ";")
        return "\n".join(lines)


# -- scalars ----------------------------------------------------------------------------------
def _s(c: str, kind: str = "int") -> Scalar:
    return Scalar(c, kind)


BOOL = _s("_Bool", "bool")
SCHAR, UCHAR, CHAR = _s("signed char"), _s("unsigned char"), _s("char")
SHORT, USHORT = _s("short"), _s("unsigned short")
INT, UINT = _s("int"), _s("unsigned int")
LONG, ULONG = _s("long"), _s("unsigned long")
LLONG, ULLONG = _s("long long"), _s("unsigned long long")
INT128, UINT128 = _s("__int128"), _s("unsigned __int128")
FLOAT, DOUBLE = _s("float", "float"), _s("double", "float")
VOIDP, CHARP = _s("void *", "ptr"), _s("const char *", "ptr")

INTEGERS = (SCHAR, UCHAR, CHAR, SHORT, USHORT, INT, UINT, LONG, ULONG, LLONG, ULLONG)


def size_bound(t: CType, ptr: int) -> int:
    """An upper bound of sizeof(t) on any target with pointers of `ptr` bytes."""
    if isinstance(t, Scalar):
        if t.kind == "ptr" or "long" in t.c and "long long" not in t.c:
            return ptr
        return {"_Bool": 1, "char": 1, "short": 2, "int": 4, "float": 4}.get(
            t.c.split()[-1], 16 if "__int128" in t.c else 8
        )
    if isinstance(t, EnumT):
        return 8
    sizes = [size_bound(f.type, ptr) * max(f.count, 1) for f in t.fields]
    if t.union:
        return max(sizes) + 15
    # Every member may be preceded by alignment padding; the end by tail padding.
    return sum(s + 15 for s in sizes) + 15 if not t.packed else sum(sizes)


# -- C text -----------------------------------------------------------------------------------
def dependencies(p: Proto) -> list[CType]:
    """Enums and records used by `p`, each after the records it contains (definition order)."""
    out: list[CType] = []

    def visit(t: CType) -> None:
        if isinstance(t, Scalar) or t in out:
            return
        if isinstance(t, Record):
            for f in t.fields:
                visit(f.type)
        out.append(t)

    for t in (*p.params, *([p.ret] if p.ret is not None else [])):
        visit(t)
    return out


def definition(t: CType) -> str:
    if isinstance(t, EnumT):
        body = ", ".join(f"{n} = {v}" if v >= 0 else f"{n} = ({v})" for n, v in t.values)
        return f"enum {t.tag} {{ {body} }};"
    assert isinstance(t, Record)
    members = []
    for f in t.fields:
        decl = f"{f.type.spell()} {f.name}"
        if f.count:
            decl += f"[{f.count}]"
        if f.bits:
            decl += f" : {f.bits}"
        members.append(decl + ";")
    attr = " __attribute__((packed))" if t.packed else ""
    return f"{t.spell()} {{ {' '.join(members)} }}{attr};"
