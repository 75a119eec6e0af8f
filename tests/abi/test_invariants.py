"""Properties every placement must have, on random prototypes for every arch: a value's pieces
cover its bytes exactly once, no register or stack byte holds two arguments, register pieces fit
their registers, stack pieces lie above the stack-argument base."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from btfgen.abi.arches import conventions
from btfgen.btf import measure
from btfgen.btf import types as T
from btfgen.btf.made import MadeTypes
from btfgen.layout import RegPiece
from btfgen.place import place_functions


Table = MadeTypes


SCALARS = [("char", 1, T.INT_SIGNED), ("_Bool", 1, T.INT_BOOL), ("short", 2, T.INT_SIGNED),
           ("int", 4, T.INT_SIGNED), ("long long", 8, T.INT_SIGNED), ("__int128", 16, 0),
           ("float", 4, None), ("double", 8, None), ("ptr", 0, None)]

# A type is a scalar name, ("array", type, n) or ("struct", [types], packed).
types_ = st.recursive(
    st.sampled_from([s[0] for s in SCALARS]),
    lambda inner: st.one_of(
        st.tuples(st.just("array"), inner, st.integers(1, 5)),
        st.tuples(st.just("struct"), st.lists(inner, min_size=1, max_size=4), st.booleans())),
    max_leaves=6)


def build(table: Table, spec, max_align: int):
    if isinstance(spec, str):
        name, size, enc = next(s for s in SCALARS if s[0] == spec)
        if name == "ptr":
            return table.add(T.Ptr, "", type_id=0)
        if enc is None:
            return table.add(T.Float, name, size=size)
        return table.add(T.Int, name, size=size, encoding=enc, bit_offset=0, bits=8 * size)
    if spec[0] == "array":
        elem = build(table, spec[1], max_align)
        return table.add(T.Array, "", elem_id=elem.id, index_id=0, nelems=spec[2])
    members, off, align = [], 0, 1
    for i, m in enumerate(spec[1]):
        t = build(table, m, max_align)
        a = 1 if spec[2] else measure.align_of(t, max_align)
        off = (off + a - 1) // a * a
        members.append(T.Member(f"m{i}", t.id, 8 * off, 0, table))
        off += measure.size_of(t)
        align = max(align, a)
    size = (off + align - 1) // align * align
    return table.add(T.Struct, "s", size=size, members=tuple(members), kind_flag=False)


CONVENTIONS = conventions()


@settings(max_examples=60, deadline=None)
@given(params=st.lists(types_, min_size=1, max_size=10), ret=types_, variadic=st.booleans())
def test_placements_are_consistent(params, ret, variadic):
    for conv in CONVENTIONS:
        table = Table(conv.pointer_size)
        if conv.pointer_size == 4:  # no __int128 on the 32-bit arches
            params_ = [p for p in params if "__int128" not in repr(p)]
            ret_ = "int" if "__int128" in repr(ret) else ret
        else:
            params_, ret_ = params, ret
        ps = tuple(T.Param(f"p{i}", build(table, p, conv.max_align).id, table)
                   for i, p in enumerate(params_))
        rt = build(table, ret_, conv.max_align)
        proto = table.add(T.FuncProto, "", ret_id=rt.id, params=ps, variadic=variadic)
        func = table.add(T.Func, "f", type_id=proto.id, linkage=T.Linkage.GLOBAL)
        (f,) = place_functions(table, conv, [func]).functions
        regs, stack = set(), set()
        for v in (*f.args, f.ret):
            if v is None or v.unavailable or not v.pieces:
                continue
            want = conv.pointer_size if v.by_ref else v.size
            covered = sorted((p.value_offset, p.value_offset + p.size) for p in v.pieces)
            assert covered[0][0] == 0 and covered[-1][1] == want, (conv.name, v)
            assert all(a[1] == b[0] for a, b in zip(covered, covered[1:])), (conv.name, v)
            if v is f.ret:
                continue
            for p in v.pieces:
                if isinstance(p, RegPiece):
                    assert p.size <= p.reg_size and p.hwreg not in regs, (conv.name, f)
                    regs.add(p.hwreg)
                else:
                    assert p.stack >= conv.stack_base, (conv.name, v)
                    span = set(range(p.stack, p.stack + p.size))
                    assert not span & stack, (conv.name, f)
                    stack |= span
