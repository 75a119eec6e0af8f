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

from btfgen.btf import types as T

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
            s = T.strip(t)
            if isinstance(s, T.Void):
                return Shape("void", 0, 1)
            if isinstance(s, (T.Fwd, T.FuncProto, T.Func)):
                what = "a forward declaration" if isinstance(s, T.Fwd) else "a function type"
                return Shape("opaque", 0, 1, reason=f"{what} cannot be passed by value")
            size = T.size_of(s)
            align = T.align_of(s, self.max_align)
            if isinstance(s, T.Int):
                return Shape("bool" if s.is_bool else "integer", size, align, s.signed)
            if isinstance(s, T.Enum):
                return Shape("enum", size, align, s.signed)
            if isinstance(s, T.Ptr):
                return Shape("pointer", size, align)
            if isinstance(s, T.Float):
                return Shape("float", size, align, True)
            if isinstance(s, (T.Composite, T.Array)):
                return self._aggregate(s, size, align)
            return Shape("opaque", 0, 1, reason=f"a {s.kind.name} cannot be passed by value")
        except T.TypeError_ as e:
            return Shape("opaque", 0, 1, reason=str(e))

    def _aggregate(self, s: T.Type, size: int, align: int) -> Shape:
        bf_align = _bitfield_align(s, self.max_align)
        if size > MAX_FLATTEN:
            return Shape("aggregate", size, align, bitfield_align=bf_align)
        sysv: tuple[str, ...] = ()
        if 0 < size <= self.sysv_max_size:
            leaves: list[_Leaf] = []
            _flatten(s, 0, self.max_align, leaves, 0)
            sysv = _sysv_classes(leaves, size, self.word)
        hfa = _hfa(s, 0) if self.hfa_max_members else None
        return Shape(
            "aggregate", size, align,
            sysv=sysv,
            sysv_memory=not sysv,
            hfa_members=hfa[1] if hfa and 1 <= hfa[1] <= self.hfa_max_members else 0,
            mode=_gcc_mode(s, 0) if size <= 16 else "blk",
            bitfield_align=bf_align,
            float_fields=_float_fields(s),
        )


def _float_fields(s: T.Type) -> tuple[tuple[int, int], ...]:
    if not isinstance(s, T.Struct):
        return ()
    out = []
    for m in s.members:
        if m.bitfield_size or not isinstance(T.strip(m.type), T.Float):
            return ()
        out.append((m.offset, T.size_of(m.type)))
    return tuple(out)


def _flatten(t: T.Type, base: int, max_align: int, out: list[_Leaf], depth: int) -> None:
    below = T.descend(t, depth)
    s = T.strip(t)
    if isinstance(s, T.Composite):
        for m in s.members:
            if m.bitfield_size:
                # A bitfield is always INTEGER class; it covers the bytes its bits touch.
                first = m.bit_offset // 8
                last = (m.bit_offset + m.bitfield_size - 1) // 8
                out.append(_Leaf(base + first, last - first + 1, "int", False))
            else:
                _flatten(m.type, base + m.bit_offset // 8, max_align, out, below)
        return
    if isinstance(s, T.Array):
        elem = s.elem
        esize = T.size_of(elem)
        for i in range(s.nelems if esize else 0):
            _flatten(elem, base + i * esize, max_align, out, below)
        return
    size = T.size_of(s)
    align = T.align_of(s, max_align)
    kind = "float" if isinstance(s, T.Float) else "int"
    out.append(_Leaf(base, size, kind, bool(base % align)))


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


def _hfa(t: T.Type, depth: int) -> tuple[int, int] | None:
    """AAPCS64 5.9.5 (gcc aapcs_vfp_sub_candidate): -> (member size, member count) when every
    Fundamental Data Type in `t` is the same floating-point type and nothing pads it, else None.
    A struct adds its members' counts, a union takes the largest (union { double a[2]; double
    b; } is a two-member HFA), an array multiplies."""
    below = T.descend(t, depth)
    s = T.strip(t)
    if isinstance(s, T.Float):
        return s.size, 1
    if isinstance(s, T.Array):
        sub = _hfa(s.elem, below)
        return (sub[0], sub[1] * s.nelems) if sub else None
    if not isinstance(s, T.Composite):
        return None
    width = count = 0
    union = isinstance(s, T.Union)
    for m in s.members:
        if m.bitfield_size:
            return None
        sub = _hfa(m.type, below)
        if sub is None or (width and sub[0] != width):
            return None
        width = sub[0]
        count = max(count, sub[1]) if union else count + sub[1]
    if not width or width * count != s.size:
        return None
    return width, count


_INT_MODE_SIZES = (1, 2, 4, 8)


def _gcc_mode(t: T.Type, depth: int) -> str:
    """GCC's machine-mode class of `t` (stor-layout.cc compute_record_mode, mode_for_array), as
    i386 -freg-struct-return and regparm see it: "int", "float" or "blk"; "none" for size 0.
    An aggregate holding a BLKmode member (char[3], say) is BLKmode whatever its size; a struct
    takes the mode of a field spanning it (struct { double d; } is DFmode: an x87 value), a
    union never does. BTF cannot tell `char c[0]` (ignored by gcc) from a flexible array member
    (which makes the struct BLKmode); the kernel uses only the latter."""
    below = T.descend(t, depth)
    s = T.strip(t)
    if isinstance(s, T.Float):
        return "float"
    if not isinstance(s, (T.Composite, T.Array)):
        return "int"
    size = T.size_of(s)
    if isinstance(s, T.Array):
        if s.nelems == 0:
            return "blk"
        elem = _gcc_mode(s.elem, below)
        if s.nelems == 1 or elem == "none":
            return elem  # a one-element array has its element's mode
        if elem == "blk":
            return "blk"
        return "int" if size in _INT_MODE_SIZES else "blk"
    spanning = ""
    for m in s.members:
        if m.bitfield_size:
            continue  # a bitfield's type has an integer mode
        mtype = T.strip(m.type)
        if isinstance(mtype, T.Array) and mtype.nelems == 0:
            return "blk"  # a flexible array member
        msize = T.size_of(mtype)
        if msize == 0:
            continue
        mode = _gcc_mode(mtype, below)
        if mode == "blk":
            return "blk"
        if msize == size and not spanning:
            spanning = mode
    if size == 0:
        return "none"
    if isinstance(s, T.Struct) and spanning:
        return spanning
    return "int" if size in _INT_MODE_SIZES else "blk"


def _bitfield_align(s: T.Type, max_align: int) -> int:
    """AAPCS (gcc >= 9, PR 88469): a direct bitfield member counts its declared type's
    alignment for argument passing even in a packed struct."""
    if not isinstance(s, T.Composite):
        return 0
    best = 0
    for m in s.members:
        if m.bitfield_size:
            best = max(best, T.align_of(m.type, max_align))
    return best
