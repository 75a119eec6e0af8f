"""BTF as `bpftool btf dump file F [-B BASE] format raw` prints it, byte for byte.

Formats the reader's raw records (`Btf.columns` for the fixed part of every record,
`Btf.items_of` and `Btf.tail` for the rest: the same fields the type model is built from)
rather than the model objects: a vmlinux has ~10^5 types and ~3·10^5 members, and a frozen
object for each would make the dump many times slower than bpftool. For the same reason every
kind is formatted a whole kind at a time with `map` and comprehensions over columns: the kinds
whose line is only their fixed part (FUNC, PTR & co, FWD, FLOAT: 3/5 of a vmlinux), and
STRUCT, UNION and FUNC_PROTO with all their items gathered at once; the rare kinds, and any kind
with a damaged record (so that the error names it), go one record at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import accumulate, repeat
from operator import add, and_, itemgetter, rshift

from btfgen.btf import wire
from btfgen.btf.reader import Btf
from btfgen.btf.types import Kind

_INT_ENCODING = {0: "(none)", 1: "SIGNED", 2: "CHAR", 4: "BOOL"}
_LINKAGE = {0: "static", 1: "global", 2: "extern"}
_KIND_NAME = {k: ("UNKNOWN" if k is Kind.UNKN else k.name) for k in Kind}

# Kinds printed from the fixed part alone, one format each: (id, name, size/type, extra).
_WHOLE_KIND = {
    Kind.FUNC: "[%d] FUNC '%s' type_id=%d linkage=%s",  # spelled as an f-string in _whole_kind
    **{k: f"[%d] {k.name} '%s' type_id=%d%s" for k in (
        Kind.PTR, Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPEDEF, Kind.TYPE_TAG)},
    Kind.FWD: "[%d] FWD '%s'%.0s fwd_kind=%s",  # "%.0s": FWD's size word is not shown
    Kind.FLOAT: "[%d] FLOAT '%s' size=%d%s",
}

_MEMBER = "\t'%s' type_id=%d bits_offset=%d".__mod__
_PARAM = "\t'%s' type_id=%d".__mod__
_ENUM_VALUE = "\t'%s' val=%d".__mod__

# Kinds whose items are formatted a whole kind at a time: the record's line (id, kind, name,
# size or return type, vlen) and one line per item, each item line starting with its own newline
# so that a record's block is its line followed by its items joined with "". Value: what the
# size_or_type word is called.
_ITEMS_KIND = {Kind.STRUCT: "size", Kind.UNION: "size", Kind.FUNC_PROTO: "ret_type_id"}


def _pick(seq, positions: list[int]) -> list:
    if len(positions) == 1:
        return [seq[positions[0]]]
    return list(itemgetter(*positions)(seq))


def dump_raw(btf: Btf) -> str:
    """The whole dump of `btf`'s own types (a split table's, not its base's) as one string."""
    first = btf.first_id
    count = len(btf) - first
    name_offs, infos, sizes, codes = btf.columns

    # ~3·10^5 names in a vmlinux, looked up in bulk. A copy: 0 means "(anon)" only here.
    by_offset = dict(btf.strings_by_offset())
    by_offset[0] = "(anon)"
    names_get = by_offset.get

    def column(offsets, type_id: int) -> list[str]:
        found = list(map(names_get, offsets))
        if None in found:  # an offset into the middle of a string, or into the base's strings
            found = [names_get(o) or btf.string(o, type_id) for o in offsets]
        return found

    names = list(map(names_get, name_offs))
    if None in names:  # the slow way, which says which type a bad offset belongs to
        names = [name if name is not None else btf.string(off, first + i)
                 for i, (name, off) in enumerate(zip(names, name_offs))]

    blocks: list[str | None] = [None] * count
    # Positions grouped by kind, each group in id order (a stable sort by kind code).
    order = sorted(range(count), key=codes.__getitem__)
    counts = sorted(Counter(codes).items())
    starts = list(accumulate((n for _, n in counts), initial=0))
    for (code, _), lo, hi in zip(counts, starts, starts[1:]):
        positions = order[lo:hi]
        if wire.TAIL_BY_CODE[code] is None:  # stepped over by the layout section: one line
            for i in positions:
                blocks[i] = _unknown(first + i, code, names[i], infos[i], sizes[i])
            continue
        kind = Kind(code)
        fmt = _WHOLE_KIND.get(kind)
        if fmt is not None:
            lines = _whole_kind(kind, fmt, positions, first, names, infos, sizes)
        elif kind in _ITEMS_KIND:
            lines = _items_kind(btf, kind, positions, names, infos, sizes, names_get)
        else:
            lines = None
        if lines is None:  # one record at a time; also what finds a damaged record
            for i in positions:
                blocks[i] = _block(btf, first + i, kind, names[i], infos[i], sizes[i], column)
            continue
        for i, line in zip(positions, lines):
            blocks[i] = line
    blocks.append("")
    return "\n".join(blocks)  # type: ignore[arg-type]


def _whole_kind(kind: Kind, fmt: str, positions: list[int], first: int, names: list[str],
                infos, sizes) -> Iterable[str]:
    """The lines of every record of a kind whose line is its fixed part alone."""
    vlens = map(and_, _pick(infos, positions), repeat(wire.VLEN_MASK))
    if kind is Kind.FUNC:  # the most numerous kind: an f-string is cheaper than the format
        return [f"[{i}] FUNC '{n}' type_id={t} linkage={linkage}"
                for i, n, t, linkage in zip(map(add, positions, repeat(first)),
                                            _pick(names, positions), _pick(sizes, positions),
                                            map(_LINKAGE.get, vlens, repeat("(unknown)")))]
    if kind is Kind.FWD:
        kflags = map(rshift, _pick(infos, positions), repeat(31))
        extra = map(("struct", "union").__getitem__, kflags)
    else:
        extra = repeat("")
    return map(fmt.__mod__, zip(map(add, positions, repeat(first)), _pick(names, positions),
                                _pick(sizes, positions), extra))


def _items_kind(btf: Btf, kind: Kind, positions: list[int], names: list[str], infos, sizes,
                names_get) -> list[str] | None:
    """The blocks of every record of a kind with items (`_ITEMS_KIND`), or None when some
    record needs the one-at-a-time path: a type id out of range, a member name not at the
    start of a string."""
    first = btf.first_id
    my_infos = _pick(infos, positions)
    ids = list(map(add, positions, repeat(first)))
    columns = btf.items_of(ids, kind)
    if columns is None:
        return None
    item_names = list(map(names_get, columns[0]))
    if None in item_names:
        return None
    # f-strings in a comprehension: the cheapest formatting per line (~10^5 lines here).
    if kind is Kind.FUNC_PROTO:
        items = [f"\n\t'{n}' type_id={t}" for n, t in zip(item_names, columns[1])]
    else:
        items = [f"\n\t'{n}' type_id={t} bits_offset={o}"
                 for n, t, o in zip(item_names, columns[1], columns[2])]
    vlens = list(map(and_, my_infos, repeat(wire.VLEN_MASK)))
    bounds = list(accumulate(vlens, initial=0))
    if kind is not Kind.FUNC_PROTO:
        # kind_flag set (a few hundred structs in a kernel): the offset words of its members
        # carry bitfield sizes.
        for k in [k for k, info in enumerate(my_infos) if info >> 31]:
            lo, hi = bounds[k], bounds[k + 1]
            items[lo:hi] = map(_member_with_bitfield, item_names[lo:hi], columns[1][lo:hi],
                               columns[2][lo:hi])
    bodies = map("".join, map(items.__getitem__, map(slice, bounds, bounds[1:])))
    kind_name, size_label = kind.name, _ITEMS_KIND[kind]
    return [f"[{i}] {kind_name} '{n}' {size_label}={st} vlen={v}{body}" for i, n, st, v, body
            in zip(ids, _pick(names, positions), _pick(sizes, positions), vlens, bodies)]


def _member_with_bitfield(name: str, type_id: int, word: int) -> str:
    line = f"\n\t'{name}' type_id={type_id} bits_offset={word & 0xFFFFFF}"
    return f"{line} bitfield_size={word >> 24}" if word >> 24 else line


def _block(btf: Btf, type_id: int, kind: Kind, name: str, info: int, st: int, column) -> str:
    """The lines of one type whose dump needs more than its fixed part."""
    vlen = info & wire.VLEN_MASK
    kflag = info >> 31
    tail = btf.tail(type_id, kind, vlen)
    head = f"[{type_id}] {_KIND_NAME[kind]} '{name}'"
    lines: list[str]
    if kind is Kind.FUNC_PROTO:
        head = f"{head} ret_type_id={st} vlen={vlen}"
        if not vlen:
            return head
        lines = [head, *map(_PARAM, zip(column(tail[0], type_id), tail[1]))]
    elif kind is Kind.STRUCT or kind is Kind.UNION:
        head = f"{head} size={st} vlen={vlen}"
        if not vlen:
            return head
        m_names, m_types, words = tail
        m_names = column(m_names, type_id)
        if not kflag or max(words) < 1 << 24:  # no bitfield sizes in the offset words
            lines = [head, *map(_MEMBER, zip(m_names, m_types, words))]
        else:
            lines = [head]
            for m_name, m_type, word in zip(m_names, m_types, words):
                line = f"\t'{m_name}' type_id={m_type} bits_offset={word & 0xFFFFFF}"
                lines.append(f"{line} bitfield_size={word >> 24}" if word >> 24 else line)
    elif kind is Kind.ENUM:
        head = f"{head} encoding={'SIGNED' if kflag else 'UNSIGNED'} size={st} vlen={vlen}"
        lines = [head, *map(_ENUM_VALUE, zip(column(tail[0], type_id), tail[1]))]
    elif kind is Kind.ENUM64:
        lines = [f"{head} encoding={'SIGNED' if kflag else 'UNSIGNED'} size={st} vlen={vlen}"]
        for v_name, lo, hi in zip(column(tail[0], type_id), tail[1], tail[2]):
            v = hi << 32 | lo
            if kflag:
                lines.append(f"\t'{v_name}' val={v - (1 << 64) if v >> 63 else v}LL")
            else:
                lines.append(f"\t'{v_name}' val={v}ULL")
    elif kind is Kind.INT:
        return (f"{head} size={st} bits_offset={(tail >> 16) & 0xFF} nr_bits={tail & 0xFF} "
                f"encoding={_INT_ENCODING.get((tail >> 24) & 0x0F, 'UNKN')}")
    elif kind is Kind.ARRAY:
        return f"{head} type_id={tail[0]} index_type_id={tail[1]} nr_elems={tail[2]}"
    elif kind is Kind.VAR:
        return f"{head} type_id={st}, linkage={_LINKAGE.get(tail, '(unknown)')}"
    elif kind is Kind.DATASEC:
        lines = [f"{head} size={st} vlen={vlen}"]
        for v_type, v_off, v_size in zip(*tail):
            lines.append(f"\ttype_id={v_type} offset={v_off} size={v_size} "
                         f"({_describe(btf, v_type)})")
    elif kind is Kind.DECL_TAG:
        return f"{head} type_id={st} component_idx={tail}"
    else:  # pragma: no cover - the reader knows no other kinds
        return head
    return "\n".join(lines)


def _unknown(type_id: int, code: int, name: str, info: int, st: int) -> str:
    """The one line of a type of a kind btfgen does not know: what every record has (bpftool
    7.1 predates such kinds, so there is no line of its to match)."""
    kflag = " kind_flag=1" if info >> 31 else ""
    return (f"[{type_id}] KIND_{code} '{name}' size_or_type={st} "
            f"vlen={info & wire.VLEN_MASK}{kflag} (a kind btfgen does not know)")


def _kind_name(kind: Kind | int) -> str:
    return _KIND_NAME[kind] if isinstance(kind, Kind) else f"KIND_{kind}"


def _describe(btf: Btf, type_id: int) -> str:
    """"KIND 'name'" of any type id, the base's included (bpftool's DATASEC annotation)."""
    if type_id == 0:
        return "UNKNOWN '(anon)'"
    table = btf
    while type_id < table.first_id and table.base is not None:
        table = table.base
    r = table.record(type_id)
    name = table.string(r.name_off, type_id) if r.name_off else "(anon)"
    return f"{_kind_name(r.kind)} '{name}'"
