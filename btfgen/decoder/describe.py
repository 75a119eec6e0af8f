"""Descriptors (runtime's NamedTuples) from the type model and a function's layout.

The same descriptors drive the library decoder and are printed as literals into generated Python
modules, so both decode identically.
"""

from __future__ import annotations

from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.btf.walk import TypeWalk
from btfgen.decoder.generic import GenericPlan, piece_source
from btfgen.decoder.generic import plan as generic_plan
from btfgen.decoder.runtime import (
    ArrayType,
    CaptureDesc,
    BoolType,
    BytesType,
    CharsType,
    CompositeType,
    EnumType,
    FastPath,
    FloatType,
    FunctionDesc,
    IntType,
    Member,
    Piece,
    Plan,
    PtrType,
    RecordPlans,
    RetDesc,
    ValueDesc,
)
from btfgen.layout import FunctionLayout, RegPiece, ValueLayout

# NamedTuples built without their Python-level __new__ (a whole kernel makes a few hundred
# thousand of these, and the generated __new__ was a tenth of its Python module's time).
_new = tuple.__new__


def type_desc(t: T.Type, memo: dict | None = None) -> tuple:
    """The descriptor of `t`; `memo` (by type id) makes one type one shared descriptor object,
    which a generated module then prints once. TypeWalkError past the one depth limit, or for a
    member without a size: no descriptor would decode it right."""
    return _Describe({} if memo is None else memo).desc(t, 0)


class _Describe(TypeWalk):
    def __init__(self, memo: dict):
        self.memo = memo

    def desc(self, t: T.Type, depth: int) -> tuple:
        t = walk.strip(t)
        hit = self.memo.get(t.id)
        if hit is not None and t.id:
            return hit
        d = self.memo[t.id] = self.visit(t, depth)
        return d

    def visit_int(self, t: T.Int, depth: int) -> tuple:
        if t.is_bool:
            return BoolType("bool", t.size)
        return IntType("int", t.size, t.signed)

    def visit_enum(self, t: T.Enum, depth: int) -> tuple:
        names: dict[int, str] = {}
        for v in t.values:
            names.setdefault(v.value, v.name)
        return EnumType("enum", t.size, t.signed, names)

    def visit_ptr(self, t: T.Ptr, depth: int) -> tuple:
        return PtrType("ptr", t.table.pointer_size)

    def visit_float(self, t: T.Float, depth: int) -> tuple:
        return FloatType("float", t.size)

    def visit_array(self, t: T.Array, depth: int) -> tuple:
        elem = walk.strip(t.elem)
        if isinstance(elem, T.Int) and elem.size == 1 and not elem.is_bool:
            return CharsType("chars", t.nelems)
        return ArrayType("array", t.nelems, measure.size_of(elem), self.desc(elem, depth))

    def visit_composite(self, t: T.Composite, depth: int) -> tuple:
        """Members as (name, bit_offset, bit_size, type), anonymous members' own lifted."""
        tag = "struct" if isinstance(t, T.Struct) else "union"
        return CompositeType(tag, t.size, tuple(
            Member(m.name, offset, m.bitfield_size, self.desc(m.type, depth))
            for m, offset in walk.named_members(t, depth)))

    def visit_other(self, t: T.Type, depth: int) -> tuple:
        return BytesType("bytes", measure.size_of(t))


def _value_desc_memo(v: ValueLayout, byte_order: str, memo: dict) -> tuple:
    d = memo.get(v)  # type descriptors are under int type ids, values under themselves
    if d is None:
        d = memo[v] = value_desc(v, byte_order, memo)
    return d


def value_desc(v: ValueLayout, byte_order: str, memo: dict | None = None) -> ValueDesc:
    """A value whose type cannot be described is unavailable, saying why (never shown as some
    other type's bytes)."""
    pieces = []
    for p in v.pieces:
        source, src = piece_source(p, byte_order)
        pieces.append(_new(Piece, (source, src, p.size, p.value_offset)))
    unavailable = v.unavailable
    try:
        t = type_desc(v.type, memo)
    except T.TypeWalkError as e:
        t = BytesType("bytes", 0)
        unavailable = unavailable or f"its type cannot be decoded ({e})"
    return _new(ValueDesc, (v.name, t, v.size, tuple(pieces), v.by_ref, unavailable))


_CODES = {1: "bB", 2: "hH", 4: "iI", 8: "qQ"}


def fast_format(f: FunctionLayout, args: tuple[ValueDesc, ...], byte_order: str):
    """The FastPath (struct format, permutation) reading every argument in one go, or None when
    some argument is not one whole scalar in one register."""
    spots = []
    for v, d in zip(f.args, args):
        tdesc = d.type
        if v.unavailable is not None or v.by_ref or len(v.pieces) != 1:
            return None
        (p,) = v.pieces
        if not isinstance(p, RegPiece) or p.size != v.size or v.size not in _CODES:
            return None
        if tdesc.tag == "int":
            code = _CODES[v.size][0 if tdesc.signed else 1]
        elif tdesc.tag == "ptr":
            code = _CODES[v.size][1]
        elif tdesc.tag == "bool" and v.size == 1:
            code = "?"
        else:
            return None
        spots.append((d.pieces[0].src, v.size, code))
    order = sorted(range(len(spots)), key=lambda i: spots[i][0])
    fmt, pos = ["<" if byte_order == "little" else ">"], 0
    for i in order:
        src, size, code = spots[i]
        if src < pos:
            return None  # overlapping pieces: let the general path say what they mean
        if src > pos:
            fmt.append(f"{src - pos}x")
        fmt.append(code)
        pos = src + size
    perm = tuple(order.index(i) for i in range(len(spots)))
    return FastPath("".join(fmt), None if perm == tuple(range(len(perm))) else perm)


def capture_desc(c, plan, memo: dict | None = None, skipped: tuple = ()) -> CaptureDesc:
    """The descriptor of capture `c` (btfgen.typed.capture.Capture) where `plan` (a
    generic.CapturePlan, or None: left out, for the first of the plan's `skipped` reasons
    that names it) put it."""
    size = c.size if plan is None or plan.size < 0 else plan.size
    if c.string or c.buffer:
        t: tuple = CharsType("chars", size)
    else:
        t = type_desc(c.type, memo)
    pointers = (c.root,) + tuple(h.name for h in c.hops)
    head, mask = (-1, 0) if plan is None else (plan.head, plan.root_mask)
    kind = "str" if c.string else "buf" if c.buffer else "value"
    length: tuple = ()
    if c.buffer:
        if plan is None or not plan.length:
            length = (-1, c.length.const or 1, False, c.length.text, -1, 0)
        else:
            at, nbytes, signed, lhead, lmask = plan.length
            length = (at, nbytes, signed, c.length.text, lhead, lmask)
    why = ""
    if plan is None:
        said = f"capture {c.text}: "
        why = next((s[len(said):] for s in skipped if s.startswith(said)), "not planned")
    return CaptureDesc(c.text, kind, t, size, c.bit_offset, c.bit_size, c.at_exit, head, mask,
                       pointers, length, why)


def function_desc(f: FunctionLayout, byte_order: str, pointer_size: int,
                  gplan: GenericPlan | None = None, memo: dict | None = None,
                  captures: tuple = (), sizes: tuple[int, int] | None = None) -> FunctionDesc:
    order = "little" if byte_order == "little" else "big"
    memo = {} if memo is None else memo
    # Values recur across prototypes as one object: the memo keeps their descriptors too.
    args = tuple(_value_desc_memo(a, byte_order, memo) for a in f.args)
    ret = None
    if f.ret is not None:
        needs_entry = f.ret.by_ref and not f.ret.at_exit
        ret = RetDesc(_value_desc_memo(f.ret, byte_order, memo), needs_entry)
    gplan = gplan or generic_plan(f, byte_order, pointer_size, captures)

    def plans(ps):
        return tuple(None if p is None else _new(Plan, (p.data_off, p.ptr_off, p.op_mask))
                     for p in ps)

    # The bytes the BPF side sends: the caller's where the register image decodes a kind
    # (straight.PlanTable.sizes), else what the plan's ops write.
    record = _new(RecordPlans, (plans(gplan.entry), plans(gplan.exit), sizes or gplan.sizes))
    fast = fast_format(f, args, byte_order)
    caps = tuple(capture_desc(c, p, memo, gplan.skipped)
                 for c, p in zip(captures, gplan.captures))
    return _new(FunctionDesc, (f.name, f.btf_id, order, pointer_size, args, ret, fast, record,
                               caps))
