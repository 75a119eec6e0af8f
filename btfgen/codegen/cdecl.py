"""C declarations of BTF types for generated BPF code.

Two ways to name a type:
- "vmlinux": the names vmlinux.h (`bpftool btf dump ... format c`) gives them, used only where the
  BTF name is already a plain C identifier and names one type (bpftool renames duplicates
  `foo___2`, so an ambiguous name is not trusted); anything else falls back to bytes or `void`.
- "self": the header defines every struct/union it needs itself, under sanitised names, with the
  target's exact layout (packed, explicit padding, pointers as 32-bit integers on 32-bit
  targets), so no vmlinux.h is needed and cross-arch objects come out right.
- "kernel": for kernel C, which includes the kernel's own headers and must redefine none of their
  types: integers and enums as fixed-width types, pointers as native pointers (to `struct NAME`
  where one struct has that name, declared forward, else `void *`), and a struct or union by
  value as its bytes with its alignment. Which kernel header defines a struct is not in BTF, and
  a definition of our own would clash with the kernel's; the bytes keep the layout, and code
  that includes the right header casts them.
Every declaration has the target's size, which is what the decoders rely on: they copy value bytes
into fields by offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.btf.walk import TypeWalk
from btfgen.codegen.names import Namespace, c_ident, is_c_ident

# Base type names vmlinux.h may use verbatim: (size, signed) in BPF's LP64 data model. Any
# other INT name, or one whose size or sign disagrees, is spelled as a fixed-width type.
_BASE_NAMES = {
    "char": (1, True), "signed char": (1, True), "unsigned char": (1, False),
    "short": (2, True), "short int": (2, True), "short unsigned int": (2, False),
    "unsigned short": (2, False), "int": (4, True), "unsigned int": (4, False),
    "long": (8, True), "long int": (8, True), "long unsigned int": (8, False),
    "unsigned long": (8, False), "long long": (8, True), "long long int": (8, True),
    "long long unsigned int": (8, False), "unsigned long long": (8, False),
}


def fixed_int(size: int, signed: bool) -> str | None:
    if size in (1, 2, 4, 8):
        return f"__{'s' if signed else 'u'}{size * 8}"
    return None


def _wrap(decl: str) -> str:
    return f"({decl})" if decl.startswith("*") else decl


def bytes_decl(decl: str, size: int, align: int) -> str:
    attr = f" __attribute__((aligned({align})))" if align > 1 else ""
    return f"__u8 {_wrap(decl) if decl else ''}[{size}]{attr}"


@dataclass
class Definition:
    keyword: str  # "struct" | "union"
    name: str
    lines: list[str]
    size: int
    align: int


@dataclass
class CTypes:
    """Spells declarations for one header; in "self" mode collects the definitions it needs."""

    table: T.TypeSource
    pointer_size: int
    mode: str  # "vmlinux" | "self" | "kernel"
    max_align: int = 16
    definitions: list[Definition] = field(default_factory=list)
    forwards: dict[int, tuple[str, str]] = field(default_factory=dict)  # type id -> (kw, name)
    _tags: Namespace = field(default_factory=Namespace)
    _defined: dict[int, str | None] = field(default_factory=dict)
    _unique: dict[tuple[str, str], bool] = field(default_factory=dict)
    # Set by `declare` when the declaration names a vmlinux.h type (a typedef, struct, union or
    # enum), whose size the header can only assert, not know.
    external: bool = False
    _decls: dict[int, tuple[str, bool]] = field(default_factory=dict)  # type id -> spelling

    # ---- declarations -------------------------------------------------------------------
    def declare(self, t: T.Type, name: str) -> str:
        """`T name;` without the semicolon, of exactly the target size of `t`."""
        hit = self._decls.get(t.id)
        if hit is None:
            # Spelled once per type with NUL for the name (no spelling contains a NUL).
            self.external = False
            try:
                decl = _Declarator(self).visit(t, 0, "\0")
            except T.TypeWalkError:  # nested past the one depth limit: a cycle, bytes it is
                decl = None
            if decl is None:
                decl = bytes_decl("\0", measure.size_of(t), self.align(t))
            hit = self._decls[t.id] = (decl, self.external)
        self.external = hit[1]
        return hit[0].replace("\0", name)

    def align(self, t: T.Type) -> int:
        try:
            return measure.align_of(t, self.max_align)
        except T.TypeWalkError:
            return 1

    # ---- names --------------------------------------------------------------------------
    def _nameable(self, kind: str, name: str) -> bool:
        """vmlinux.h spells this type by its BTF name: a plain identifier only one type has."""
        if not is_c_ident(name):
            return False
        key = (kind, name)
        hit = self._unique.get(key)
        if hit is None:
            find = self.table.find_types
            if kind == "typedef":
                hit = len(find(name, T.Kind.TYPEDEF)) == 1
            else:
                tagged = [x for x in find(name) if x.kind in
                          (T.Kind.STRUCT, T.Kind.UNION, T.Kind.ENUM, T.Kind.ENUM64, T.Kind.FWD)]
                hit = len(tagged) == 1
            self._unique[key] = hit
        return hit

    def _forward(self, t: T.Type, kw: str) -> str:
        hit = self.forwards.get(t.id)
        if hit is None:
            base = f"{c_ident(t.name)}___btfgen" if t.name else f"anon_{t.id}___btfgen"
            hit = (kw, self._tags.take(base, str(t.id)))
            self.forwards[t.id] = hit
        return hit[1]

    def _tag(self, t: T.Composite, kw: str) -> str | None:
        if self.mode == "vmlinux":
            ok = t.name and _printable(t) and self._nameable(kw, t.name)
            return t.name if ok else None
        if t.id in self._defined:
            return self._defined[t.id]
        self._defined[t.id] = None  # a by-value cycle (hostile BTF) falls back to bytes
        tag = self._forward(t, kw)
        lines = self._members(t)
        if lines is None:
            lines = [bytes_decl("bytes", t.size, 1) + ";"] if t.size else []
        self.definitions.append(Definition(kw, tag, lines, t.size, self.align(t)))
        self._defined[t.id] = tag
        return tag

    def _kernel_pointee(self, s: T.Type, kw: str, decl: str) -> str | None:
        """`struct NAME *` in kernel C where one struct (union) has that name in the BTF, with a
        forward declaration (which completes nothing and clashes with no definition); None
        (`void *`) for an anonymous or ambiguous one, whose name could be another type's."""
        if not s.name or not self._nameable(kw, s.name):
            return None
        self.forwards.setdefault(s.id, (kw, s.name))
        return f"{kw} {s.name} {decl}"

    # ---- self-contained definitions ---------------------------------------------------------
    def _members(self, t: T.Composite) -> list[str] | None:
        """Member lines reproducing the target layout bit for bit, or None (then: bytes)."""
        names = Namespace()
        lines: list[str] = []
        pos = 0  # bits
        npad = 0
        is_union = isinstance(t, T.Union)
        for m in t.members:
            try:
                mt = walk.strip(m.type)
                width = m.bitfield_size or measure.size_of(mt) * 8
            except T.TypeWalkError:
                return None
            start = m.bit_offset
            if is_union:
                if start:
                    return None
            elif start < pos:
                return None  # overlapping members: not expressible, keep the bytes
            else:
                while start > pos:
                    gap = start - pos
                    if pos % 8:
                        k = min(8 - pos % 8, gap)
                        lines.append(f"__u8 :{k};")
                    elif gap >= 8:
                        k = gap - gap % 8
                        lines.append(f"__u8 {names.take(f'pad{npad}')}[{k // 8}];")
                        npad += 1
                    else:
                        k = gap
                        lines.append(f"__u8 :{k};")
                    pos += k
            mname = names.take(m.name or f"anon{len(lines)}")
            if m.bitfield_size:
                base = fixed_int(measure.size_of(mt), False) if isinstance(mt, (T.Int, T.Enum)) else None
                if base is None:
                    return None
                if isinstance(mt, T.Int) and mt.signed or isinstance(mt, T.Enum) and mt.signed:
                    base = "__s" + base[3:]
                lines.append(f"{base} {mname} : {m.bitfield_size};")
            else:
                if start % 8:
                    return None
                lines.append(self.declare(m.type, mname) + ";")
            if not is_union:
                pos = start + width
        if not is_union and pos > t.size * 8:
            return None
        if is_union:
            lines.append(f"__u8 {names.take('size')}[{t.size}];")
        elif pos < t.size * 8:
            while pos % 8:
                k = 8 - pos % 8
                lines.append(f"__u8 :{k};")
                pos += k
            if pos < t.size * 8:
                lines.append(f"__u8 {names.take(f'pad{npad}')}[{t.size - pos // 8}];")
        return lines


class _Declarator(TypeWalk):
    """The spelling of a type around `decl` for one header (`CTypes`), or None where C cannot
    say it in that header (then the caller declares bytes of the type's size)."""

    def __init__(self, types: CTypes):
        self.types = types

    def visit_modifier(self, t, depth: int, decl: str) -> str | None:
        return self.visit(t.type, depth, decl)  # qualifiers do not change the bytes

    def visit_typedef(self, t: T.Typedef, depth: int, decl: str) -> str | None:
        types = self.types
        if types.mode == "vmlinux" and types._nameable("typedef", t.name) and _printable(t):
            types.external = True
            return f"{t.name}{_sep(decl)}"
        return self.visit(t.type, depth, decl)

    def visit_void(self, t: T.Void, depth: int, decl: str) -> str | None:
        return f"void{_sep(decl)}"

    def visit_int(self, t: T.Int, depth: int, decl: str) -> str | None:
        if t.is_bool and t.size == 1:
            return f"_Bool{_sep(decl)}"
        # plain char's sign is the target's business: only its size must agree
        want = (t.size, t.signed) if t.name != "char" else (1, True)
        if self.types.mode == "vmlinux" and _BASE_NAMES.get(t.name) == want:
            return f"{t.name}{_sep(decl)}"
        base = fixed_int(t.size, t.signed)
        return f"{base}{_sep(decl)}" if base else None

    def visit_enum(self, t: T.Enum, depth: int, decl: str) -> str | None:
        types = self.types
        # bpftool prints no `packed` on a 1- or 2-byte enum: only int-sized ones keep names
        if types.mode == "vmlinux" and t.size == 4 and types._nameable("enum", t.name):
            types.external = True
            return f"enum {t.name}{_sep(decl)}"
        base = fixed_int(t.size, t.signed)
        return f"{base}{_sep(decl)}" if base else None

    def visit_ptr(self, t: T.Ptr, depth: int, decl: str) -> str | None:
        size = self.types.pointer_size
        if self.types.mode == "kernel":  # native pointers, whatever their size
            inner = self._pointee(t.type, f"*{decl}", depth)
            return inner if inner is not None else f"void *{decl}"
        if size != 8:
            return f"__u{size * 8}{_sep(decl)}"
        inner = self._pointee(t.type, f"*{decl}", depth)
        return inner if inner is not None else f"void *{decl}"

    def visit_array(self, t: T.Array, depth: int, decl: str) -> str | None:
        return self.visit(t.elem, depth, f"{_wrap(decl)}[{t.nelems}]")

    def visit_composite(self, t: T.Composite, depth: int, decl: str) -> str | None:
        types = self.types
        if types.mode == "kernel":
            return None  # its bytes: the kernel's headers define it, not this one
        kw = "struct" if isinstance(t, T.Struct) else "union"
        tag = types._tag(t, kw)
        types.external |= bool(tag) and types.mode == "vmlinux"
        return f"{kw} {tag}{_sep(decl)}" if tag else None

    def visit_other(self, t: T.Type, depth: int, decl: str) -> str | None:
        return None  # floats, functions, forward declarations by value: bytes

    def _pointee(self, t: T.Type, decl: str, depth: int) -> str | None:
        s = walk.strip_cv(t)
        if isinstance(s, (T.Composite, T.Fwd)):
            is_union = isinstance(s, T.Union) or (isinstance(s, T.Fwd) and s.is_union)
            kw = "union" if is_union else "struct"
            if self.types.mode == "vmlinux":
                return f"{kw} {s.name} {decl}" if is_c_ident(s.name) else None
            if self.types.mode == "kernel":
                return self.types._kernel_pointee(s, kw, decl)
            return f"{kw} {self.types._forward(s, kw)} {decl}"
        if isinstance(s, (T.FuncProto, T.Float)):
            return None
        return self.visit(s, depth, decl)


def _sep(decl: str) -> str:
    """`decl` as it follows a type name: after a space unless empty."""
    return f" {decl}" if decl else ""


def _printable(t: T.Type) -> bool:
    """bpftool prints this type with its true size: not a composite whose members BTF lost
    (pahole drops a transparent union's members, leaving its size: vmlinux.h then has an empty
    union)."""
    try:
        s = walk.strip(t)
    except T.TypeWalkError:
        return False
    return not isinstance(s, T.Composite) or bool(s.members) or s.size == 0
