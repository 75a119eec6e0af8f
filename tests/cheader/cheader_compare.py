"""Structural comparison of two types from different tables (headers vs. BTF).

What must agree is what placement and decoders use: kinds, sizes, member names and bit offsets,
bitfield widths, signedness, enum values, typedef and tag names, parameter names, variadic-ness.
Not compared: ids, base-type spellings (clang's DWARF says "long", gcc's "long int"), the order of
stacked qualifiers, and top-level qualifiers of parameters (gcc keeps `const` on a `T *const p`
parameter, the prototype's type does not).
"""

from __future__ import annotations

from btfgen.btf import types as T

_QUALS = (T.Const, T.Volatile, T.Restrict, T.TypeTag)


def _peel(t: T.Type) -> tuple[frozenset[str], T.Type]:
    quals = set()
    while isinstance(t, _QUALS):
        if not isinstance(t, T.TypeTag):
            quals.add(type(t).__name__)
        t = t.type
    return frozenset(quals), t


def diff_types(a: T.Type, b: T.Type, where: str, *, top_quals: bool = True,
               _seen: set | None = None) -> list[str]:
    seen = set() if _seen is None else _seen
    qa, a = _peel(a)
    qb, b = _peel(b)
    out: list[str] = []
    if top_quals and qa != qb:
        out.append(f"{where}: qualifiers {sorted(qa)} != {sorted(qb)}")
    if type(a) is not type(b):
        return out + [f"{where}: {type(a).__name__} {a.name!r} != {type(b).__name__} {b.name!r}"]
    if (a.id, b.id) in seen:
        return out
    seen.add((a.id, b.id))

    def sub(x, y, w, **kw):
        out.extend(diff_types(x, y, w, _seen=seen, **kw))

    if isinstance(a, T.Int):
        if (a.size, a.signed, a.is_bool, a.bits, a.bit_offset) != \
                (b.size, b.signed, b.is_bool, b.bits, b.bit_offset):
            out.append(f"{where}: int {a} != {b}")
    elif isinstance(a, T.Float):
        if a.size != b.size:
            out.append(f"{where}: float size {a.size} != {b.size}")
    elif isinstance(a, T.Ptr):
        sub(a.type, b.type, where + "*")
    elif isinstance(a, T.Typedef):
        if a.name != b.name:
            out.append(f"{where}: typedef {a.name!r} != {b.name!r}")
        sub(a.type, b.type, f"{where}({a.name})")
    elif isinstance(a, T.Array):
        if a.nelems != b.nelems:
            out.append(f"{where}: array of {a.nelems} != {b.nelems}")
        sub(a.elem, b.elem, where + "[]")
    elif isinstance(a, T.Composite):
        if (a.name, a.size, len(a.members)) != (b.name, b.size, len(b.members)):
            return out + [f"{where}: {a.kind.name.lower()} {a.name!r} size {a.size} with "
                          f"{len(a.members)} members != {b.name!r} size {b.size} with "
                          f"{len(b.members)} members"]
        for ma, mb in zip(a.members, b.members):
            w = f"{where}.{ma.name or '<anon>'}"
            if (ma.name, ma.bit_offset, ma.bitfield_size) != \
                    (mb.name, mb.bit_offset, mb.bitfield_size):
                out.append(f"{w}: member ({ma.name!r}, bit {ma.bit_offset}, width "
                           f"{ma.bitfield_size}) != ({mb.name!r}, bit {mb.bit_offset}, width "
                           f"{mb.bitfield_size})")
            sub(ma.type, mb.type, w)
    elif isinstance(a, T.Enum):
        if (a.name, a.size, a.signed, a.values, a.is64) != \
                (b.name, b.size, b.signed, b.values, b.is64):
            out.append(f"{where}: enum {a} != {b}")
    elif isinstance(a, T.Fwd):
        if (a.name, a.is_union) != (b.name, b.is_union):
            out.append(f"{where}: fwd {a} != {b}")
    elif isinstance(a, T.FuncProto):
        if (a.variadic, len(a.params)) != (b.variadic, len(b.params)):
            return out + [f"{where}: prototype ({len(a.params)} params, variadic {a.variadic})"
                          f" != ({len(b.params)}, {b.variadic})"]
        sub(a.ret, b.ret, where + "()")
        for i, (pa, pb) in enumerate(zip(a.params, b.params)):
            sub(pa.type, pb.type, f"{where}(param {i})", top_quals=False)
    elif isinstance(a, T.Void):
        pass
    else:
        out.append(f"{where}: cannot compare {a!r}")
    return out


def diff_funcs(a: T.Func, b: T.Func) -> list[str]:
    where = a.name
    out = []
    if a.linkage != b.linkage:
        out.append(f"{where}: linkage {a.linkage!r} != {b.linkage!r}")
    names_a = [p.name for p in a.proto.params]
    names_b = [p.name for p in b.proto.params]
    if names_a != names_b:
        out.append(f"{where}: parameter names {names_a} != {names_b}")
    return out + diff_types(a.proto, b.proto, where)
