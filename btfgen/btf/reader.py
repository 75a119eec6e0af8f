"""Opening BTF: a raw file, any ELF with a .BTF section, split BTF on a base; either byte order.

`open_btf` checks the header, finds every record's offset in one pass over the type section
(read once as native 32-bit words) and gathers the fixed part of every record into columns
(`Btf.columns`), checking the type ids there; types are built lazily by id into
`btfgen.btf.types` classes (builders.py) and cached; the name index is built once, on first
lookup. Every defect is a `BtfError` that names the file, the byte offset in .BTF and the type
id. Beside it: the wire layouts (wire.py), the string section (strings.py), an ELF file's .BTF
section (elf.py).

Two consumers share that one record decoder (`columns` + `tail`, together `records`): the type
model (`Btf[id]`) and the raw dump, which formats records directly because building a frozen
object per member of a whole vmlinux would cost seconds.
"""

from __future__ import annotations

import io
import warnings
from array import array
from collections import Counter
from collections.abc import Iterator
from itertools import chain, compress, repeat
from operator import add, and_, eq, mul, ne, rshift, sub
from typing import BinaryIO, NamedTuple

from btfgen.btf import elf, wire
from btfgen.btf.builders import BUILDERS
from btfgen.btf.strings import StringSection
from btfgen.btf.types import Func, Kind, Type, Void
from btfgen.errors import BtfError, BtfgenWarning

DEFAULT_PATH = "/sys/kernel/btf/vmlinux"

# The names an INT for `long` goes by; its size is the pointer size (as libbpf decides it).
_LONG_NAMES = frozenset({
    "long", "long int", "int long", "unsigned long", "long unsigned", "unsigned long int",
    "unsigned int long", "long unsigned int", "long int unsigned", "int unsigned long",
    "int long unsigned",
})

# Kinds whose size_or_type word is a type id.
_REF_KINDS = frozenset({
    Kind.PTR, Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.FUNC,
    Kind.FUNC_PROTO, Kind.VAR, Kind.DECL_TAG, Kind.TYPE_TAG,
})
# Kinds that lead to exactly one other type with no name in between to stop at: a loop made
# only of these cannot be a C type (a real cycle passes through a struct or union).
_CHAIN_KINDS = frozenset({
    Kind.PTR, Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.TYPE_TAG, Kind.ARRAY,
    Kind.FUNC, Kind.VAR, Kind.DECL_TAG,
})
_REF_CODES = frozenset(int(k) for k in _REF_KINDS)
_CHAIN_CODES = frozenset(int(k) for k in _CHAIN_KINDS)
# A kind btfgen does not know stays its number (`Record.kind`).
_KINDS = tuple(Kind(c) if wire.TAIL_BY_CODE[c] is not None else c for c in range(wire.KIND_CODES))
# Plain ints: compared once per record in the hot loop.
_INT, _ARRAY, _STRUCT, _UNION, _ENUM = 1, 3, 4, 5, 6
_FUNC, _FUNC_PROTO, _VAR, _DATASEC, _DECL_TAG, _ENUM64 = 12, 13, 14, 15, 17, 19
# Kinds with vlen items: words per item (= columns); which column holds type ids.
_COLUMNS = tuple(t[1] if t else 0 for t in wire.TAIL_WORDS_BY_CODE)
_ID_COLUMN = tuple({_STRUCT: 1, _UNION: 1, _FUNC_PROTO: 1, _DATASEC: 0}.get(c)
                   for c in range(wire.KIND_CODES))
_VLEN = wire.VLEN_MASK


def _as_signed(values: array) -> array:
    return array("i", values.tobytes())  # the same native words, read as s32


class Record(NamedTuple):
    """One type record, fields as stored (the tail already unpacked), ids checked in range."""

    type_id: int
    offset: int  # in .BTF
    kind: Kind | int  # the kind's number when btfgen does not know it (stepped over by layout)
    name_off: int
    kflag: bool
    vlen: int
    size_type: int  # size or type id, depending on kind
    # INT: the encoding word; ARRAY: (elem, index, nelems); VAR: linkage; DECL_TAG: component
    # index (signed); the vlen items as columns (equal-length u32 arrays): STRUCT/UNION:
    # (name_offs, types, offset words); ENUM: (name_offs, values) with values i32 if kflag else
    # u32; ENUM64: (name_offs, lo32s, hi32s); FUNC_PROTO: (name_offs, types);
    # DATASEC: (types, offsets, sizes); other kinds (and kinds btfgen does not know): None.
    tail: object


class Columns(NamedTuple):
    """The fixed part (`struct btf_type`) of every record of a table, one column per field,
    position i holding type `first_id + i`."""

    name_offs: tuple[int, ...]
    infos: tuple[int, ...]
    size_types: tuple[int, ...]
    codes: bytes  # the kind field of each info word


class Btf:
    """A BTF type table: `btf[id]` decodes lazily (0 is void); a split table continues its
    base's ids and strings."""

    def __init__(self, path: str, data: bytes, *, base: Btf | None = None,
                 elf_machine: str | None = None, elf_pointer_size: int | None = None):
        self.path = str(path)
        self.base = base
        self.elf_machine = elf_machine if elf_machine is not None else (
            base.elf_machine if base is not None else None)
        self._elf_pointer_size = elf_pointer_size
        try:
            self._header = wire.parse_header(data)
        except wire.WireError as e:
            raise self.error(e.offset, e.what) from None
        h = self._header
        self.byte_order = h.byte_order
        if base is not None and base.byte_order != self.byte_order:
            raise self.error(0, f"byte order {self.byte_order} differs from the base's "
                                f"({base.path}: {base.byte_order})")
        self.first_id = len(base) if base is not None else 1
        self.strings = StringSection(bytes(data[h.strings_start:h.strings_end]),
                                     base.strings if base is not None else None)
        defect = self.strings.defect()
        if defect is not None:
            raise self.error(h.strings_start, defect)
        self._words = wire.type_words(data, h)
        self._types_start = h.types_start
        try:
            own_layout = wire.parse_layout(data, h)
            # Split BTF without a layout section of its own shares its base's (as libbpf).
            self.layout = own_layout if own_layout is not None or base is None else base.layout
            self._offsets = wire.scan_types(self._words, h, self.first_id,
                                            wire.record_words(self.layout),
                                            self.layout is not None)
        except wire.WireError as e:
            raise self.error(e.offset, e.what) from None
        self._len = self.first_id + len(self._offsets)
        self.columns = self._columns()
        self._name_offs, self._infos, self._size_types, self._codes = self.columns
        self.unknown_kinds = self._unknown_kinds()
        if self.unknown_kinds:
            warnings.warn(self.unknown_kinds_line(), BtfgenWarning, stacklevel=2)
        self._cache: dict[int, Type] = {0: Void(0, "", self)} if base is None else {}
        self._str_cache = self.strings.cache  # read first by the hot paths
        self._chain_ok: set[int] = set()
        self._names: tuple[dict[str, int], dict[str, list[int]]] | None = None
        self._func_ids: list[int] | None = None
        self._pointer_size: int | None = None
        self._assumed_pointer_size: int | None = None

    # -- errors --------------------------------------------------------------------------------

    def error(self, offset: int | None, what: str) -> BtfError:
        where = f"{elf.SECTION}+{offset:#x}: " if offset is not None else ""
        return BtfError(f"{self.path}: {where}{what}")

    # -- the table protocol ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, type_id: int) -> Type:
        t = self._cache.get(type_id)
        if t is not None:
            return t
        if type_id < self.first_id and self.base is not None:
            return self.base[type_id]
        t = self._decode(type_id)
        self._cache[type_id] = t
        return t

    def __iter__(self) -> Iterator[Type]:
        """This table's own types in id order (a split table's, not its base's)."""
        for type_id in range(self.first_id, self._len):
            yield self[type_id]

    def __repr__(self) -> str:
        return f"Btf({self.path!r}, types={self._len}, byte_order={self.byte_order!r})"

    @property
    def pointer_size(self) -> int:
        size = self.declared_pointer_size or self._assumed_pointer_size
        if size is None:
            # Guessing 8 would place every pointer of a 32-bit target's BTF wrong, silently.
            raise BtfError(f"{self.path}: the BTF does not say how large a pointer is (no `long` "
                           f"type, no ELF class): name the arch with --arch")
        return size

    @property
    def declared_pointer_size(self) -> int | None:
        """What the BTF says: its `long` (the base's first), else the ELF class, else None."""
        if self._pointer_size is None:
            size = self.base._long_size() if self.base is not None else None
            self._pointer_size = size or self._long_size() or self._elf_pointer_size or 0
        return self._pointer_size or None

    def assume_pointer_size(self, size: int) -> None:
        self._assumed_pointer_size = size

    def _long_size(self) -> int | None:
        for name_off, code, size in zip(self._name_offs, self._codes, self._size_types):
            if code == _INT and size in (4, 8):
                try:
                    name = self.string(name_off)
                except BtfError:
                    continue  # reported when that type is decoded
                if name in _LONG_NAMES:
                    return size
        return None

    # -- strings ---------------------------------------------------------------------------------

    def string(self, offset: int, type_id: int | None = None) -> str:
        """The string at `offset` (a split table's offsets continue its base's); a bad offset is
        reported against the record of `type_id` when given."""
        s = self._str_cache.get(offset)
        if s is None:
            s = self.strings.get(offset)
            if s is None:
                end = self.strings.end
                if type_id is None:
                    raise self.error(None, f"string offset {offset:#x} is past the end of the "
                                           f"string section ({end:#x})")
                raise self.error(self.offset_of(type_id),
                                 f"type {type_id}: name offset {offset:#x} is past the end of "
                                 f"the string section ({end:#x})")
        return s

    def strings_at(self, offsets, type_id: int) -> list[str]:
        """The strings at many offsets (item names), in bulk when they are all known already."""
        found = list(map(self._str_cache.get, offsets))
        if None in found:
            found = [self.string(o, type_id) for o in offsets]
        return found

    def strings_by_offset(self) -> dict[int, str]:
        """Every string of this table's own section that starts right after a NUL, by offset
        (`StringSection.by_offset`)."""
        return self.strings.by_offset()

    # -- records ---------------------------------------------------------------------------------

    def record(self, type_id: int) -> Record:
        """The raw record of one of this table's own types, with every type id it names checked
        to be in range."""
        if not self.first_id <= type_id < self._len:
            raise self.error(None, f"type id {type_id} out of range "
                                   f"[{self.first_id}, {self._len})")
        return next(self.records(type_id, type_id + 1))

    def _columns(self) -> Columns:
        """The fixed part of every own record as columns, gathered in bulk, with every type id
        among them checked in range."""
        words = self._words
        offsets = self._offsets
        # `map` over one bound method and a plain list: the cheapest gather pure Python has.
        at = words.__getitem__
        starts = offsets.tolist()
        name_offs = tuple(map(at, starts))
        infos = tuple(map(at, map(add, starts, repeat(1))))
        size_types = tuple(map(at, map(add, starts, repeat(2))))
        codes = bytes(map(and_, map(rshift, infos, repeat(wire.KIND_SHIFT)),
                          repeat(wire.KIND_MASK)))
        n = self._len
        is_ref = map(_REF_CODES.__contains__, codes)
        if max(compress(size_types, is_ref), default=0) >= n:  # find the first culprit
            for i in [i for i, st in enumerate(size_types) if st >= n]:
                if codes[i] in _REF_CODES:
                    type_id = self.first_id + i
                    raise self.error(self.offset_of(type_id),
                                     f"type {type_id} ({_KINDS[codes[i]].name}): refers to "
                                     f"type id {size_types[i]}, past the last ({n - 1})")
        return Columns(name_offs, infos, size_types, codes)

    def _unknown_kinds(self) -> dict[int, int]:
        """{kind number: how many of this table's own types} of the kinds btfgen does not know
        (only a layout section lets the scan step over them); one C-level pass when none."""
        rest = self._codes.translate(None, wire.KNOWN_CODES)
        return dict(sorted(Counter(rest).items())) if rest else {}

    def unknown_kinds_line(self) -> str:
        """The one warning about the kinds btfgen does not know, naming each and its count."""
        kinds = ", ".join(f"kind {code} ({n} type{'s' if n != 1 else ''})"
                          for code, n in self.unknown_kinds.items())
        return (f"{self.path}: BTF {kinds} unknown to btfgen: stepped over by the layout "
                f"section; what refers to them is unavailable")

    def _items(self, type_id: int, code: int, vlen: int) -> list[array]:
        """The vlen items of one record as columns (one u32 array per field, `Record.tail`)."""
        ncols = _COLUMNS[code]
        pos = self._offsets[type_id - self.first_id] + 3
        end = pos + ncols * vlen
        words = self._words
        if ncols == 3:
            columns = [words[pos:end:3], words[pos + 1:end:3], words[pos + 2:end:3]]
        else:
            columns = [words[pos:end:2], words[pos + 1:end:2]]
        ids = _ID_COLUMN[code]
        if ids is not None and vlen:
            top = max(columns[ids])
            if top >= self._len:
                raise self.error(self.offset_of(type_id),
                                 f"type {type_id} ({_KINDS[code].name}): refers to type id "
                                 f"{top}, past the last ({self._len - 1})")
        return columns

    def items_of(self, type_ids: list[int], code: int) -> tuple[list[int], ...] | None:
        """The vlen items of many own records of kind `code` (one with items), one record after
        another in the order given, as columns of u32 words (as in `Record.tail`, but ENUM values
        are not made signed); None when a type id among them is out of range, which `tail` of
        each record then reports. For the dump: one slice per record and column, no per-item
        work in Python."""
        ncols = _COLUMNS[code]
        where = list(map(sub, type_ids, repeat(self.first_id)))
        starts = list(map(add, map(self._offsets.__getitem__, where), repeat(3)))
        vlens = map(and_, map(self._infos.__getitem__, where), repeat(_VLEN))
        ends = map(add, starts, map(mul, vlens, repeat(ncols)))
        # The word index of each item's first field, then one C-level gather per column.
        at = self._words.__getitem__
        items = list(chain.from_iterable(map(range, starts, ends, repeat(ncols))))
        columns = (list(map(at, items)),
                   *(list(map(at, map(add, items, repeat(c)))) for c in range(1, ncols)))
        ids = _ID_COLUMN[code]
        if ids is not None and max(columns[ids], default=0) >= self._len:
            return None
        return columns

    def tail(self, type_id: int, code: int, vlen: int) -> object:
        """The tail of the record of `type_id` (see `Record.tail`), given its kind code and
        vlen (from `columns`), with the type ids in it checked."""
        words = self._words
        w = self._offsets[type_id - self.first_id]
        pos = w + 3
        n = self._len
        bad = 0
        if _COLUMNS[code]:
            tail = tuple(self._items(type_id, code, vlen))
            if code == _ENUM and self._infos[type_id - self.first_id] >> 31:
                tail = (tail[0], _as_signed(tail[1]))
        elif code == _INT or code == _VAR:
            return words[pos]
        elif code == _ARRAY:
            tail = (words[pos], words[pos + 1], words[pos + 2])
            if tail[0] >= n or tail[1] >= n:
                bad = max(tail[0], tail[1])
        elif code == _DECL_TAG:
            return words[pos] - ((words[pos] >> 31) << 32)  # an s32
        else:
            return None
        if bad:
            raise self.error(self._types_start + 4 * w,
                             f"type {type_id} ({_KINDS[code].name}): refers to type id "
                             f"{bad}, past the last ({n - 1})")
        return tail

    def records(self, start: int | None = None, stop: int | None = None) -> Iterator[Record]:
        """The raw records of this table's own types with ids in [start, stop), in id order."""
        first = self.first_id
        start = first if start is None else max(start, first)
        stop = self._len if stop is None else min(stop, self._len)
        new = tuple.__new__
        for type_id in range(start, stop):
            i = type_id - first
            code = self._codes[i]
            info = self._infos[i]
            yield new(Record, (type_id, self._types_start + 4 * self._offsets[i], _KINDS[code],
                               self._name_offs[i], info >> 31 == 1, info & _VLEN,
                               self._size_types[i], self.tail(type_id, code, info & _VLEN)))

    # -- decoding ----------------------------------------------------------------------------------

    def _decode(self, type_id: int) -> Type:
        # The checks of `record()` first, in the same order, then the kind's builder; no
        # Record in between: decoding is the bulk of placing a whole kernel's functions.
        first = self.first_id
        if not first <= type_id < self._len:
            raise self.error(None, f"type id {type_id} out of range [{first}, {self._len})")
        i = type_id - first
        code = self._codes[i]
        info = self._infos[i]
        tail = self.tail(type_id, code, info & _VLEN)
        name = self.string(self._name_offs[i], type_id)
        if code in _CHAIN_CODES:
            self._check_chain(type_id)
        return BUILDERS[code](self, type_id, name, info, self._size_types[i], tail)

    def _check_chain(self, type_id: int) -> None:
        """Refuse a loop of pointers/qualifiers/arrays: walking it (strip, spelling) would
        never end."""
        seen: list[int] = []
        t = type_id
        ok = self._chain_ok
        while t not in ok:
            if t in seen:
                loop = " -> ".join(map(str, seen[seen.index(t):] + [t]))
                raise self.error(self.offset_of(type_id),
                                 f"type {type_id}: reference cycle {loop}")
            if t == 0:
                break
            if t < self.first_id:  # the base checks its own
                break
            seen.append(t)
            i = t - self.first_id
            code = self._codes[i]
            if code not in _CHAIN_KINDS:
                break
            st = self.tail(t, code, 0)[0] if code == _ARRAY else self._size_types[i]
            if st >= self._len:
                break  # record() reports it when that type is decoded
            t = st
        ok.update(seen)

    def offset_of(self, type_id: int) -> int | None:
        if self.first_id <= type_id < self._len:
            return self._types_start + 4 * self._offsets[type_id - self.first_id]
        return None

    # -- lookups -----------------------------------------------------------------------------------

    def _index(self) -> tuple[dict[str, int], dict[str, list[int]]]:
        """(name -> the first id of that name, name -> the later ids of that name) of this
        table's own named types, built once. Bulk operations throughout: a vmlinux has ~10^5
        named types, nearly all of them with a name of their own, so only the repeats are
        handled one by one."""
        if self._names is None:
            ids = range(self.first_id, self._len)
            self._func_ids = list(compress(ids, map(eq, self._codes, repeat(_FUNC))))
            name_offs = self._name_offs
            by_offset = self.strings_by_offset()
            names_list = list(map(by_offset.get, name_offs))
            if None in names_list:  # offsets into the middle of a string or into the base's
                names_list = [n if n is not None else self.string(o, i)
                              for n, o, i in zip(names_list, name_offs, ids)]
            named_ids = list(compress(ids, names_list))  # "" (anonymous) is false
            names_list = list(filter(None, names_list))
            first: dict[str, int] = {}
            kept = list(map(first.setdefault, names_list, named_ids))  # the first id stays
            repeats: dict[str, list[int]] = {}
            for name, type_id in compress(zip(names_list, named_ids), map(ne, kept, named_ids)):
                found = repeats.get(name)
                if found is None:
                    repeats[name] = [type_id]
                else:
                    found.append(type_id)
            self._names = first, repeats
        return self._names

    def _ids_named(self, name: str) -> list[int]:
        first, repeats = self._index()
        type_id = first.get(name)
        if type_id is None:
            return []
        return [type_id, *repeats.get(name, ())]

    def funcs(self) -> Iterator[Func]:
        """This table's own FUNC types in id order (a module's, not its base's)."""
        self._index()
        for type_id in self._func_ids:  # type: ignore[union-attr]
            yield self[type_id]  # type: ignore[misc]

    def find_types(self, name: str, kind: Kind | str | None = None) -> list[Type]:
        """Every type called `name` (of `kind`, if given: a `Kind` or its name), the base's
        first, in id order."""
        if isinstance(kind, str):
            try:
                kind = Kind[kind.upper()]
            except KeyError:
                raise BtfError(f"no BTF kind called {kind!r}") from None
        found = self.base.find_types(name, kind) if self.base is not None else []
        # "enum" is one meaning in two encodings: ENUM finds both, ENUM64 only the 64-bit one.
        kinds = (Kind.ENUM, Kind.ENUM64) if kind is Kind.ENUM else (kind,)
        for type_id in self._ids_named(name):
            t = self[type_id]
            if kind is None or t.kind in kinds:
                found.append(t)
        return found

    def find_funcs(self, name: str) -> list[Func]:
        """Every FUNC called `name` (static functions in several files may share one)."""
        return self.find_types(name, Kind.FUNC)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Opening files.

def _load(path: str, stream: BinaryIO, base: Btf | None) -> Btf:
    magic = stream.read(4)
    stream.seek(0)
    if magic == elf.MAGIC:
        data, machine, pointer_size = elf.read_btf_section(path, stream)
        return Btf(path, data, base=base, elf_machine=machine, elf_pointer_size=pointer_size)
    if wire.byte_order_of(magic) is None:
        raise BtfError(f"{path}: neither BTF (no 0xeb9f magic) nor ELF")
    return Btf(path, stream.read(), base=base)


def load_btf(path: str, data: bytes, base: Btf | None = None) -> Btf:
    """A `Btf` from bytes already in memory (an ELF file or a raw BTF blob); `path` names them
    in errors."""
    return _load(path, io.BytesIO(data), base)


def open_btf(path: str = DEFAULT_PATH, base: str | Btf | None = None) -> Btf:
    """Open BTF from a raw BTF file or any ELF with a .BTF section; `base` (a path or a `Btf`)
    for split BTF such as a kernel module's."""
    if base is not None and not isinstance(base, Btf):
        base = open_btf(base)
    try:
        with open(path, "rb") as f:
            return _load(str(path), f, base)
    except OSError as e:
        raise BtfError(f"{path}: {e.strerror or e}") from None
