"""A type's size and alignment in the target's memory, as walks over the type model."""

from __future__ import annotations

from btfgen.btf import types as T
from btfgen.btf.walk import TypeWalk


class _Size(TypeWalk):
    what = "size"

    def visit_int(self, t, depth: int) -> int:
        return t.size

    visit_enum = visit_float = visit_composite = visit_datasec = visit_int

    def visit_ptr(self, t: T.Ptr, depth: int) -> int:
        return t.table.pointer_size

    def visit_array(self, t: T.Array, depth: int) -> int:
        return t.nelems * self.visit(t.elem, depth)


class _Align(TypeWalk):
    """Alignment as the target lays the type out in memory.

    BTF records no alignment, so it is derived: scalars align to their size up to the arch's
    `max_scalar_align` (i386: 4, arm EABI: 8, 64-bit arches: 16); a composite to its most aligned
    member, unless its layout shows it was packed (a member off its alignment, or a size that is
    not a multiple of it), in which case 1. Padding that natural alignment cannot explain shows
    an `__aligned(n)`: a member placed past the next naturally aligned offset, or tail padding
    past the naturally rounded size, raises the alignment to the smallest power of two that
    explains it.
    """

    what = "alignment"

    def visit_int(self, t, depth: int, max_scalar_align: int) -> int:
        return min(t.size, max_scalar_align) or 1

    visit_enum = visit_float = visit_int

    def visit_ptr(self, t: T.Ptr, depth: int, max_scalar_align: int) -> int:
        return min(t.table.pointer_size, max_scalar_align)

    def visit_array(self, t: T.Array, depth: int, max_scalar_align: int) -> int:
        return self.visit(t.elem, depth, max_scalar_align)

    def visit_composite(self, t: T.Composite, depth: int, max_scalar_align: int) -> int:
        align = 1
        end = 0  # bytes the members seen so far occupy
        for m in t.members:
            # A bitfield contributes its base type's alignment (gcc), but cannot prove packing.
            a = self.visit(m.type, depth, max_scalar_align)
            if m.bitfield_size:
                end = max(end, -(-(m.bit_offset + m.bitfield_size) // 8))
            else:
                if m.bit_offset % (8 * a):
                    return 1
                offset = m.offset
                if isinstance(t, T.Struct) and offset > _round_up(end, a):
                    a = _alignment_explaining(end, offset, a)
                end = max(end, offset + _SIZE.visit(m.type, depth))
            align = max(align, a)
        if t.size > _round_up(end, align):
            align = _alignment_explaining(end, t.size, align)
        if t.size % align:
            return 1
        return align


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def _alignment_explaining(start: int, at: int, align: int) -> int:
    """The smallest power of two >= `align` that rounds `start` up to `at`; `align` when none
    does (the gap has another cause, such as an unnamed bitfield BTF does not record)."""
    a = align
    while a <= at:
        if _round_up(start, a) == at:
            return a
        a *= 2
    return align


_SIZE = _Size()
_ALIGN = _Align()


def size_of(t: T.Type) -> int:
    """Bytes `t` occupies; TypeWalkError for a type without a size (void, a function, a FWD)."""
    return _SIZE.visit(t)


def align_of(t: T.Type, max_scalar_align: int) -> int:
    return _ALIGN.visit(t, 0, max_scalar_align)
