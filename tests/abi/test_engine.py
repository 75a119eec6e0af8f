"""The engine on hand-made type tables: what no compiler emits (hostile or broken BTF) must end
in an `unavailable` value with a reason, never an exception, and the run goes on."""

from __future__ import annotations

from btfgen.abi.arches import load_arch
from btfgen.btf import types as T
from btfgen.btf.made import MadeTypes
from btfgen.place import place_functions


Table = MadeTypes


def build():
    t = Table()

    def add(cls, *args, **kw):
        obj = cls(len(t) + 1, *args, table=t, **kw)
        t[obj.id] = obj
        return obj

    t[0] = T.Void(0, "", t)
    long_ = add(T.Int, "long", size=8, encoding=T.INT_SIGNED, bit_offset=0, bits=64)
    fwd = add(T.Fwd, "opaque", is_union=False)
    # struct loop { struct loop self; } : a cycle only hostile BTF can contain
    loop_id = len(t) + 1
    loop = T.Struct(loop_id, "loop", t, 8, (T.Member("self", loop_id, 0, 0, t),), False)
    t[loop_id] = loop
    big = add(T.Array, "", elem_id=long_.id, index_id=long_.id, nelems=1 << 30)
    holder = add(T.Struct, "holder", size=8 << 30,
                 members=(T.Member("a", big.id, 0, 0, t),), kind_flag=False)
    params = tuple(T.Param(n, i.id, t) for n, i in
                   (("a", long_), ("f", fwd), ("l", loop), ("h", holder), ("b", long_)))
    proto = add(T.FuncProto, "", ret_id=loop.id, params=params, variadic=False)
    func = add(T.Func, "hostile", type_id=proto.id, linkage=T.Linkage.GLOBAL)
    return t, func


def test_hostile_types_become_unavailable_values():
    table, func = build()
    (f,) = place_functions(table, load_arch("x86_64"), [func]).functions
    a, fwd, loop, holder, b = f.args
    assert [p.hwreg for p in a.pieces] == ["rdi"]
    assert fwd.unavailable == "a forward declaration cannot be passed by value"
    assert "cycle" in loop.unavailable and loop.pieces == ()
    # 8 GiB by value: on the stack, as the ABI says, without walking a billion elements.
    assert holder.pieces[0].stack == 8 and holder.pieces[0].size == 8 << 30
    assert [p.hwreg for p in b.pieces] == ["rsi"]
    assert "cycle" in f.ret.unavailable
