"""What a calling convention needs to know about a type, computed once per type id.

A `Shape` is the type seen by ABI rules: its class, size, alignment and signedness, plus the
classifications some ABIs define on aggregates: the System V x86-64 eightbyte classes and the
AArch64 homogeneous floating-point aggregate (HFA), GCC's machine-mode class (i386 passes and
returns by it) and the AAPCS bitfield alignment. Nothing here is arch-specific: the limits come
from the description (`max_align`, `hfa_max_members`, `sysv_max_size`, the word for the
eightbytes), and a classification an arch does not ask for (limit 0) is never computed.
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.btf.walk import TypeWalk

# Aggregates larger than this are never classified member by member (every ABI here passes them
# by reference or in memory whole), which also bounds the walk over hostile arrays.
MAX_FLATTEN = 64


@dataclass(frozen=True, slots=True)
class Shape:
    cls: str  # integer | bool | enum | pointer | float | aggregate | void | opaque
    size: int
    align: int
    signed: bool = False
    # System V x86-64: one class per eightbyte ("INTEGER" | "SSE"), or () for MEMORY.
    sysv: tuple[str, ...] = ()
    sysv_memory: bool = True
    hfa_members: int = 0  # AArch64: number of members of a homogeneous FP aggregate, else 0
    # GCC's machine mode for an aggregate: "int" (an integer mode of at most 8 bytes), "float"
    # (a struct one float field spans: SFmode/DFmode/XFmode) or "blk" (BLKmode).
    mode: str = "blk"
    # The largest natural alignment of the declared type of a direct bitfield member, else 0.
    bitfield_align: int = 0
    # (offset, size) of each direct member of a struct whose direct members are all floating
    # scalars (no arrays, no nesting, no unions), else ().
    float_fields: tuple[tuple[int, int], ...] = ()
    reason: str = ""  # why an `opaque` type cannot be passed (a FWD by value, a cycle, ...)

    @property
    def scalar(self) -> bool:
        return self.cls in ("integer", "bool", "enum", "pointer")

    def flag(self, name: str) -> bool:
        if name == "scalar":
            return self.scalar
        if name in ("integer", "bool", "enum", "pointer", "float", "aggregate"):
            return self.cls == name
        if name == "signed":
            return self.signed
        if name == "hfa":
            return self.hfa_members > 0
        if name == "sysv_memory":
            return self.sysv_memory
        if name == "sysv_sse":  # an eightbyte of class SSE: in an xmm register, not a GPR
            return "SSE" in (self.sysv or ())
        if name == "int_mode":
            return self.mode == "int" if self.cls == "aggregate" else self.scalar
        if name == "float_mode":
            return self.mode == "float" if self.cls == "aggregate" else self.cls == "float"
        raise KeyError(name)

    def number(self, name: str) -> int:
        if name == "size":
            return self.size
        if name == "align":
            return self.align
        if name == "hfa_members":
            return self.hfa_members
        if name == "bitfield_align":
            return self.bitfield_align
        if name == "float_fields":
            return len(self.float_fields)
        raise KeyError(name)


def pointer_shape(pointer_size: int) -> Shape:
    return Shape("pointer", pointer_size, pointer_size)


@dataclass(frozen=True, slots=True)
class _Leaf:
    offset: int  # bytes from the start of the aggregate
    size: int
    kind: str  # "int" | "float"
    misaligned: bool


class Classifier:
    """Shapes by type id for one type table; the cache is what keeps placing 56k functions fast."""

    def __init__(self, max_align: int, *, hfa_max_members: int = 0, sysv_max_size: int = 0,
                 word: int = 8):
        self.max_align = max_align
        self.hfa_max_members = hfa_max_members
        self.sysv_max_size = sysv_max_size  # also the eightbyte classes' limit
        self.word = word  # the width of one System V "eightbyte" (chunks(...) places by it)
        self._cache: dict[int, Shape] = {}

    @classmethod
    def for_convention(cls, conv) -> Classifier:
        return cls(conv.max_align, hfa_max_members=conv.hfa_max_members,
                   sysv_max_size=conv.sysv_max_size, word=conv.pointer_size)

    def shape(self, t: T.Type) -> Shape:
        hit = self._cache.get(t.id)
        if hit is None or t.id == 0:
            hit = self._compute(t)
            self._cache[t.id] = hit
        return hit

    def _compute(self, t: T.Type) -> Shape:
        try:
            return _SHAPE.visit(t, 0, self)
        except T.TypeWalkError as e:
            return Shape("opaque", 0, 1, reason=str(e))

    def _aggregate(self, s: T.Type, size: int, align: int) -> Shape:
        bf_align = _bitfield_align(s, self.max_align)
        if size > MAX_FLATTEN:
            return Shape("aggregate", size, align, bitfield_align=bf_align)
        sysv: tuple[str, ...] = ()
        if 0 < size <= self.sysv_max_size:
            leaves: list[_Leaf] = []
            _FLATTEN.visit(s, 0, 0, self.max_align, leaves)
            sysv = _sysv_classes(leaves, size, self.word)
        hfa = _HFA.visit(s) if self.hfa_max_members else None
        return Shape(
            "aggregate", size, align,
            sysv=sysv,
            sysv_memory=not sysv,
            hfa_members=hfa[1] if hfa and 1 <= hfa[1] <= self.hfa_max_members else 0,
            mode=_GCC_MODE.visit(s) if size <= 16 else "blk",
            bitfield_align=bf_align,
            float_fields=_float_fields(s),
        )


class _ShapeOf(TypeWalk):
    """The shape of a type, by kind; the classifier's limits come along as `c`."""

    what = "shape"

    def visit_void(self, t: T.Void, depth: int, c: Classifier) -> Shape:
        return Shape("void", 0, 1)

    def visit_int(self, t: T.Int, depth: int, c: Classifier) -> Shape:
        return Shape("bool" if t.is_bool else "integer", t.size, _align(t, c), t.signed)

    def visit_enum(self, t: T.Enum, depth: int, c: Classifier) -> Shape:
        return Shape("enum", t.size, _align(t, c), t.signed)

    def visit_ptr(self, t: T.Ptr, depth: int, c: Classifier) -> Shape:
        return Shape("pointer", measure.size_of(t), _align(t, c))

    def visit_float(self, t: T.Float, depth: int, c: Classifier) -> Shape:
        return Shape("float", t.size, _align(t, c), True)

    def visit_composite(self, t: T.Type, depth: int, c: Classifier) -> Shape:
        return c._aggregate(t, measure.size_of(t), _align(t, c))

    visit_array = visit_composite

    def visit_fwd(self, t: T.Type, depth: int, c: Classifier) -> Shape:
        return Shape("opaque", 0, 1, reason="a forward declaration cannot be passed by value")

    def visit_func_proto(self, t: T.Type, depth: int, c: Classifier) -> Shape:
        return Shape("opaque", 0, 1, reason="a function type cannot be passed by value")

    visit_func = visit_func_proto

    def visit_other(self, t: T.Type, depth: int, c: Classifier) -> Shape:
        return Shape("opaque", 0, 1, reason=f"a {t.kind.name} cannot be passed by value")


_SHAPE = _ShapeOf()


def _align(t: T.Type, c: Classifier) -> int:
    return measure.align_of(t, c.max_align)


def _float_fields(s: T.Type) -> tuple[tuple[int, int], ...]:
    if not isinstance(s, T.Struct):
        return ()
    out = []
    for m in s.members:
        if m.bitfield_size or not isinstance(walk.strip(m.type), T.Float):
            return ()
        out.append((m.offset, measure.size_of(m.type)))
    return tuple(out)


class _Flatten(TypeWalk):
    """An aggregate's scalar leaves at their offsets (`out`), for the System V classes."""

    what = "System V class"

    def visit_composite(self, t: T.Composite, depth: int, base: int, max_align: int,
                        out: list[_Leaf]) -> None:
        for m in t.members:
            if m.bitfield_size:
                # A bitfield is always INTEGER class; it covers the bytes its bits touch.
                first = m.bit_offset // 8
                last = (m.bit_offset + m.bitfield_size - 1) // 8
                out.append(_Leaf(base + first, last - first + 1, "int", False))
            else:
                self.visit(m.type, depth, base + m.bit_offset // 8, max_align, out)

    def visit_array(self, t: T.Array, depth: int, base: int, max_align: int,
                    out: list[_Leaf]) -> None:
        esize = measure.size_of(t.elem)
        for i in range(t.nelems if esize else 0):
            self.visit(t.elem, depth, base + i * esize, max_align, out)

    def visit_int(self, t: T.Type, depth: int, base: int, max_align: int,
                  out: list[_Leaf]) -> None:
        align = measure.align_of(t, max_align)
        kind = "float" if isinstance(t, T.Float) else "int"
        out.append(_Leaf(base, measure.size_of(t), kind, bool(base % align)))

    visit_enum = visit_ptr = visit_float = visit_int


_FLATTEN = _Flatten()


def _sysv_classes(leaves: list[_Leaf], size: int, word: int) -> tuple[str, ...]:
    """System V x86-64 psABI 3.2.3 for an aggregate of at most the description's limit: () means
    MEMORY. `word` is the eightbyte."""
    n = (size + word - 1) // word
    classes = ["NONE"] * n
    for leaf in leaves:
        if leaf.misaligned:
            return ()  # unaligned fields make the whole aggregate MEMORY
        if leaf.kind == "float" and leaf.size > word:
            return ()  # long double (X87) members: MEMORY
        if leaf.size == 0:
            continue
        for i in range(leaf.offset // word, (leaf.offset + leaf.size - 1) // word + 1):
            if leaf.kind == "int" or classes[i] == "INTEGER":
                classes[i] = "INTEGER"
            else:
                classes[i] = "SSE"
    # An eightbyte of padding only (struct { long x __aligned(16); }) still takes a general
    # register in gcc's output: count it as INTEGER.
    return tuple("INTEGER" if c == "NONE" else c for c in classes)


class _Hfa(TypeWalk):
    """AAPCS64 5.9.5 (gcc aapcs_vfp_sub_candidate): -> (member size, member count) when every
    Fundamental Data Type in a type is the same floating-point type and nothing pads it, else
    None. A struct adds its members' counts, a union takes the largest (union { double a[2];
    double b; } is a two-member HFA), an array multiplies."""

    def visit_float(self, t: T.Float, depth: int) -> tuple[int, int] | None:
        return t.size, 1

    def visit_array(self, t: T.Array, depth: int) -> tuple[int, int] | None:
        sub = self.visit(t.elem, depth)
        return (sub[0], sub[1] * t.nelems) if sub else None

    def visit_composite(self, t: T.Composite, depth: int) -> tuple[int, int] | None:
        width = count = 0
        union = isinstance(t, T.Union)
        for m in t.members:
            if m.bitfield_size:
                return None
            sub = self.visit(m.type, depth)
            if sub is None or (width and sub[0] != width):
                return None
            width = sub[0]
            count = max(count, sub[1]) if union else count + sub[1]
        if not width or width * count != t.size:
            return None
        return width, count

    def visit_other(self, t: T.Type, depth: int) -> None:
        return None


_HFA = _Hfa()


_INT_MODE_SIZES = (1, 2, 4, 8)


class _GccMode(TypeWalk):
    """GCC's machine-mode class of a type (stor-layout.cc compute_record_mode, mode_for_array),
    as i386 -freg-struct-return and regparm see it: "int", "float" or "blk"; "none" for size 0.
    An aggregate holding a BLKmode member (char[3], say) is BLKmode whatever its size; a struct
    takes the mode of a field spanning it (struct { double d; } is DFmode: an x87 value), a
    union never does. BTF cannot tell `char c[0]` (ignored by gcc) from a flexible array member
    (which makes the struct BLKmode); the kernel uses only the latter."""

    def visit_float(self, t: T.Float, depth: int) -> str:
        return "float"

    def visit_other(self, t: T.Type, depth: int) -> str:
        return "int"

    def visit_array(self, t: T.Array, depth: int) -> str:
        if t.nelems == 0:
            return "blk"
        elem = self.visit(t.elem, depth)
        if t.nelems == 1 or elem == "none":
            return elem  # a one-element array has its element's mode
        if elem == "blk":
            return "blk"
        return "int" if measure.size_of(t) in _INT_MODE_SIZES else "blk"

    def visit_composite(self, t: T.Composite, depth: int) -> str:
        size = t.size
        spanning = ""
        for m in t.members:
            if m.bitfield_size:
                continue  # a bitfield's type has an integer mode
            mtype = walk.strip(m.type)
            if isinstance(mtype, T.Array) and mtype.nelems == 0:
                return "blk"  # a flexible array member
            msize = measure.size_of(mtype)
            if msize == 0:
                continue
            mode = self.visit(mtype, depth)
            if mode == "blk":
                return "blk"
            if msize == size and not spanning:
                spanning = mode
        if size == 0:
            return "none"
        if isinstance(t, T.Struct) and spanning:
            return spanning
        return "int" if size in _INT_MODE_SIZES else "blk"


_GCC_MODE = _GccMode()


def _bitfield_align(s: T.Type, max_align: int) -> int:
    """AAPCS (gcc >= 9, PR 88469): a direct bitfield member counts its declared type's
    alignment for argument passing even in a packed struct."""
    if not isinstance(s, T.Composite):
        return 0
    best = 0
    for m in s.members:
        if m.bitfield_size:
            best = max(best, measure.align_of(m.type, max_align))
    return best
