"""Recordings as columns: the events of one function and kind, batch by batch, as numpy
structured arrays (one dtype per function, built from its record layout) and pyarrow record
batches; a pyarrow Table or a pandas DataFrame; Parquet files (`btfgen decode --format
parquet`). Needs the `btfgen[arrow]` extra (numpy, pyarrow; pandas for DataFrames).

A whole scalar (int, pointer, bool, enum as its number, float) is read in place for every event
of a batch at once, never a Python call per event. Other values (structs, arrays, values behind
a pointer) go through the per-record decoder, one event at a time. A value the BPF side failed
to read (its bit in the record's `failed` mask), or one the trace cannot hold, is null.

Memory is bounded by one batch of the file (format 1: at most reader.MAX_BATCH_EVENTS
events; format 2: a span of the ring, at most ringspan.MAX_SPAN bytes, two while the next is
read), whatever the file's size.
"""

from __future__ import annotations

import re
from pathlib import Path

from btfgen.decoder.runtime import DecodeError
from btfgen.errors import BtfgenError
from btfgen.probe import event, recording, spec_format
from btfgen.recordings import grouping, replay
from btfgen.recordings.reader import Reader

try:
    import numpy as np
    import pyarrow as pa
except ImportError as e:  # one line for the CLI
    raise BtfgenError(f"columnar decoding needs the btfgen[arrow] extra ({e.name} is missing)"
                      ) from None

from btfgen.recordings import errnos, stack_columns  # noqa: E402 (numpy, pyarrow: after the check)
from btfgen.recordings.stack_columns import StackColumns  # noqa: E402

KINDS = {"entry": 0, "exit": 1}
# Columns from struct trace_event's header: column -> its field there.
EVENT_COLUMNS = {"timestamp": "ns", "cpu": "cpu", "pid": "tgid", "tid": "pid"}


def _field(fields, name: str, at: int = 0) -> tuple[str, int]:
    """(numpy unsigned format, offset) of an integer field of a spec_format table."""
    size = spec_format.size_of(tuple(f for f in fields if f.name == name))
    return f"u{size}", at + spec_format.offset_of(fields, name)


EVENT_FIELDS = [(column, *_field(spec_format.EVENT_HEAD, field))
                for column, field in EVENT_COLUMNS.items()]
# The record's header: `failed` nulls values; btf_id and kind, read as one word (one pass),
# must be the section's.
_ID_KIND = spec_format.RECORD_HEAD[:2]
assert [f.name for f in _ID_KIND] == ["btf_id", "kind"]
# Named with a space, which no C identifier has: an argument called `failed` keeps its name.
FAILED, ID_KIND, FLAGS = " failed", " id_kind", " flags"
RECORD_FIELDS = [
    (FLAGS, *_field(spec_format.EVENT_HEAD, "flags")),  # the losses pairing must know of
    (FAILED, *_field(spec_format.RECORD_HEAD, "failed", event.EVENT_HEADER)),
    (ID_KIND, f"u{spec_format.size_of(_ID_KIND)}", event.EVENT_HEADER),
]


def value_columns(names, kind: int) -> list[str]:
    """Column names for a function's values: their own, except where one would be an event
    column's or another value's (`pid` of find_get_pid, say: `arg_pid`) or has none (`arg2`).
    Every name is then one column's, as a table and a numpy record both need."""
    if kind:
        return ["return"] * len(names[:1])
    taken = set(EVENT_COLUMNS)
    out = []
    for i, name in enumerate(names):
        column = name if name and name not in taken else f"arg_{name}" if name else f"arg{i}"
        if column in taken:
            column = f"arg{i}_{name}" if name else f"arg{i}_"
        taken.add(column)
        out.append(column)
    return out
DATA_AT = event.DATA
SIZES = {1, 2, 4, 8}
FLOATS = {2: "f2", 4: "f4", 8: "f8"}


class Layout:
    """One function and kind's columns: `dtype` reads the event header and every in-place
    scalar; `scalars` are (column, op mask, bool?); `others` (column, value descriptor, index)
    need the per-record decoder; `missing` are always null. An exit's `errno` follows its
    return, by the kernel's convention or a user function's (`kernel`: errnos.py)."""

    def __init__(self, fn, kind: int, stride: int, order: str, kernel: bool = False) -> None:
        bo = "<" if order == "little" else ">"
        names, formats, offsets = [], [], []
        for name, fmt, at in EVENT_FIELDS + RECORD_FIELDS:
            names.append(name), formats.append(bo + fmt), offsets.append(at)
        self.scalars, self.others, self.missing = [], [], []
        values = fn.args if kind == 0 else ((fn.ret.value,) if fn.ret else ())
        plans = fn.desc.record.entry if kind == 0 else fn.desc.record.exit
        self.columns = [n for n, _, _ in EVENT_FIELDS]
        columns = value_columns([v.name for v in values], kind)
        for i, (vdesc, plan, column) in enumerate(zip(values, plans, columns)):
            self.columns.append(column)
            fmt = _scalar(vdesc)
            if vdesc.unavailable is not None or plan is None:
                self.missing.append((column, vdesc))
            elif fmt is not None and plan.data_off >= 0:
                names.append(column), formats.append(bo + fmt)
                offsets.append(DATA_AT + plan.data_off)
                self.scalars.append((column, plan.op_mask, vdesc.type.tag == "bool"))
            else:
                # Behind a pointer the BPF side did not follow: the address (per-record: Unread).
                address = vdesc.by_ref and plan.data_off < 0
                self.others.append((column, vdesc, i, address))
        if kind:
            self.columns.append(ERRNO)
        # Captures (what pointers pointed to): decoded per record, after the values.
        self.captures = [(CAPTURE_PREFIX + c.name, c) for c in fn.desc.captures
                         if c.at_exit == bool(kind)]
        for column, c in self.captures:
            self.columns.append(column)
            if c.kind in ("str", "buf"):
                self.columns.append(column + TRUNCATED)
        self.dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                               "itemsize": stride})
        self.fn, self.kind, self.kernel = fn, kind, kernel
        # The id_kind word of this function's events of this kind.
        self.id_kind = int.from_bytes(spec_format.structs(_ID_KIND)[order].pack(fn.btf_id, kind),
                                      order)


ERRNO = "errno"  # an exit's, after its return: no exit's other column is named so

# A capture's column is its path after this (`cap:how->flags`): no argument's name has a colon.
CAPTURE_PREFIX = "cap:"
TRUNCATED = ".truncated"  # after a string or buffer capture's column: whether it went on past
# the limit


def capture_arrow_type(c):
    """A capture's Arrow type: a string, a buffer's bytes (binary), or its value's with char
    arrays as strings."""
    if c.kind == "str":
        return pa.string()
    if c.kind == "buf":
        return pa.binary()
    return arrow_type(c.type, text=True)


def _scalar(vdesc) -> str | None:
    """The numpy format of a value read in place, or None."""
    t = vdesc.type
    if vdesc.by_ref or t.tag not in SCALAR_TAGS or vdesc.size != t.size or t.size not in SIZES:
        return None
    if t.tag in ("int", "enum"):
        return f"{'i' if t.signed else 'u'}{t.size}"
    if t.tag in ("ptr", "bool"):
        return f"u{t.size}"
    if t.tag == "float":
        return FLOATS.get(t.size)
    return None


SCALAR_TAGS = ("int", "enum", "ptr", "bool", "float")


word_sum = replay.word_sum()


def arrays(path: str, function: str, kind: str = "entry"):
    """numpy structured arrays, one per batch of the file: the events of `function` (its
    entries or exits), every in-place scalar a field; zero-copy views of the batch read."""
    for layout, batch in _sections(path, function, kind):
        yield grouping.records(batch, layout.dtype)


def record_batches(path: str, function: str, kind: str = "entry"):
    """pyarrow RecordBatches, one per batch of the file, with the columns timestamp, cpu, pid,
    tid and every argument (entry) or `return` and `errno` (exit: errnos.py, null where none)."""
    for layout, payload in _sections(path, function, kind, reuse=True):
        yield _to_arrow(layout, payload)  # copies: the read buffer can be reused


def table(path: str, function: str, kind: str = "entry"):
    """A pyarrow Table of the whole file's events of `function` (all of it in memory: for a
    file larger than that, use record_batches or write_parquet)."""
    batches = list(record_batches(path, function, kind))
    if not batches:
        return _empty(path, function, kind)
    return pa.Table.from_batches(batches)


def dataframe(path: str, function: str, kind: str = "entry"):
    """The same as a pandas DataFrame (needs pandas)."""
    return table(path, function, kind).to_pandas()


def _empty(path: str, function: str, kind: str):
    with Reader(path, word_sum, grouping=grouping.NumpyGrouping) as r:
        fn, at = _function(r, function)
        layout = Layout(fn, KINDS[kind], r.strides[at], r.order, is_kernel(r))
    return _to_arrow(layout, b"").schema.empty_table()


def is_kernel(reader: Reader) -> bool:
    """Whether the recording traced kernel functions (whose errno convention: errnos.py)."""
    return reader.header.get("kind") == "kernel"


def _function(reader: Reader, function: str):
    fns = replay.functions(reader)
    names = [f.name for f in fns]
    if function not in names:
        raise BtfgenError(f"{reader.path}: no function {function!r} recorded "
                          f"(there are: {', '.join(names)})")
    at = names.index(function)
    return fns[at], at


def _sections(path: str, function: str, kind: str, reuse: bool = False):
    if kind not in KINDS:
        raise BtfgenError(f"kind is entry or exit, not {kind!r}")
    with Reader(path, word_sum, reuse, grouping=grouping.NumpyGrouping) as r:
        fn, at = _function(r, function)
        layout = Layout(fn, KINDS[kind], r.strides[at], r.order, is_kernel(r))
        for batch in r.batches():
            for fi, k, _count, payload in batch.sections:
                if fi == at and k == layout.kind:
                    yield layout, payload


def _to_arrow(layout: Layout, payload):
    a = grouping.records(payload, layout.dtype)
    if len(a) and (a[ID_KIND] != np.uint64(layout.id_kind)).any():
        # A section's events are its function's, of its kind: else each would be misread.
        raise recording.RecordError(f"corrupt batch (a section of {layout.fn.name} "
                                    f"{'exits' if layout.kind else 'entries'} holds other "
                                    f"events)")
    failed = np.ascontiguousarray(a[FAILED])  # one strided pass, then contiguous ones
    any_failed = bool(failed.any()) if len(a) else False
    cols = {}
    for name, _fmt, _at in EVENT_FIELDS:
        cols[name] = pa.array(_native(a[name]))
    for name, mask, is_bool in layout.scalars:
        values = _native(a[name])
        if is_bool:
            values = values != 0
        nulls = (failed & np.uint64(mask)) != 0 if any_failed and mask else None
        cols[name] = pa.array(values, mask=nulls)
    for name, vdesc in layout.missing:
        cols[name] = pa.nulls(len(a), type=arrow_type(vdesc.type))
    if layout.kind:
        cols[ERRNO] = errnos.number_column(_errnos(layout, a, failed))
    if layout.others:
        stride = layout.dtype.itemsize
        try:
            rows = [layout.fn.decode_record(
                        grouping.record_bytes(payload, i, stride)[event.EVENT_HEADER:])
                    for i in range(len(a))]
        except DecodeError as e:  # what a damaged file can cause
            raise recording.RecordError(f"corrupt event ({e})") from None
        for name, vdesc, i, address in layout.others:
            typ = pa.uint64() if address else arrow_type(vdesc.type)
            cols[name] = pa.array([plain(row[i] if layout.kind == 0 else row, vdesc.type)
                                   for row in rows], type=typ)
    if layout.captures:
        stride = layout.dtype.itemsize
        try:
            caps = [layout.fn.decode_captures(
                        grouping.record_bytes(payload, i, stride)[event.EVENT_HEADER:])
                    for i in range(len(a))]
        except DecodeError as e:
            raise recording.RecordError(f"corrupt event ({e})") from None
        for name, c in layout.captures:
            values = [row[c.name] for row in caps]
            if c.kind == "buf":  # the bytes read; null where nothing was (a length <= 0 ...)
                cols[name] = pa.array([bytes(v) if isinstance(v, bytes) else None
                                       for v in values], type=pa.binary())
            else:
                cols[name] = pa.array([plain(v, c.type) for v in values],
                                      type=capture_arrow_type(c))
            if c.kind in ("str", "buf"):
                cols[name + TRUNCATED] = pa.array(
                    [getattr(v, "truncated", None) for v in values], type=pa.bool_())
    return pa.RecordBatch.from_pydict({c: cols[c] for c in layout.columns})


def _errnos(layout: Layout, a, failed):
    """The exits' errnos (errnos.numbers), 0 where none: from a return read in place only."""
    ret = [(mask, is_bool) for column, mask, is_bool in layout.scalars if column == "return"]
    if not ret or ret[0][1] or not len(a):
        return np.zeros(len(a), np.int64)
    mask = np.uint64(ret[0][0])
    readable = (failed & mask) == 0 if mask else np.ones(len(a), bool)
    return errnos.numbers(a["return"], readable, a[FLAGS], layout.fn.ret.value.type.tag,
                          layout.kernel)


def _native(view):
    """A field as a contiguous array in this machine's byte order (Arrow's)."""
    if view.dtype.byteorder not in ("=", "|") and view.dtype.byteorder != _NATIVE:
        return view.astype(view.dtype.newbyteorder("="))
    return np.ascontiguousarray(view)


_NATIVE = "<" if np.little_endian else ">"


def arrow_type(t, text: bool = False):
    """The Arrow type of a value of type descriptor `t` (see btfgen.decoder.runtime); with
    `text`, char arrays are strings (as captures decode them)."""
    tag = t.tag
    if text and tag == "chars":
        return pa.string()
    if tag in ("int", "enum") and t.size in SIZES:
        return getattr(pa, f"{'' if t.signed else 'u'}int{8 * t.size}")()
    if tag == "ptr":
        return pa.uint64()
    if tag == "bool":
        return pa.bool_()
    if tag == "float" and t.size in FLOATS:
        return {2: pa.float16(), 4: pa.float32(), 8: pa.float64()}[t.size]
    if tag == "int" or tag == "enum":
        return pa.string()  # wider than 64 bits: the number in decimal
    if tag == "array":
        return pa.list_(arrow_type(t.elem, text))
    if tag in ("struct", "union"):
        return pa.struct([(m.name, arrow_type(m.type, text)) for m in t.members])
    return pa.binary()


def plain(value, t):
    """A per-record value of type `t` as Arrow takes it: enums as their number, a value not
    captured as null, one behind a pointer (not read) as its address, integers wider than 64
    bits in decimal."""
    name = type(value).__name__
    if value is None or name == "Unavailable":
        return None
    if name == "Unread":
        return value.address
    if t.tag in ("int", "enum") and t.size not in SIZES:
        return str(int(value))
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, dict):
        return {m.name: plain(value[m.name], m.type) for m in t.members}
    if isinstance(value, list):
        return [plain(v, t.elem) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return str(value)  # a captured string, without its marks
    return value


def write_parquet(path: str, directory: str) -> int:
    """One Parquet file per recorded function and kind, FUNCTION.KIND.parquet in `directory`,
    written batch by batch (bounded memory) to FILE.part, renamed when whole. A recording made
    with --stack: the entries' files end with the stack columns (stack_columns.py)."""
    import pyarrow.parquet as pq

    checked = replay.verify(path)  # a bad file writes nothing
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with Reader(path, word_sum, reuse=True, grouping=grouping.NumpyGrouping,
                trust=checked) as r:
        fns = replay.functions(r)
        names = [f.name for f in fns]
        layouts = {(i, k): Layout(fns[i], k, r.strides[i], r.order, is_kernel(r))
                   for i in range(len(fns)) for k in (0, 1)}
        # --stack: the entries' files have the stack columns (stack_columns.py)
        stacks = StackColumns(r.header, r.order, fns) if r.header.get("stack") else None
        writers: dict = {}
        try:
            for batch in r.batches():
                entries = stacks.span(batch, r.strides) if stacks else {}
                for fi, k, _count, payload in batch.sections:
                    rb = _to_arrow(layouts[fi, k], payload)
                    if stacks is not None and k == 0:
                        more = stack_columns.columns(entries.get(fi), rb.num_rows)
                        rb = pa.RecordBatch.from_arrays([*rb.columns, *more.values()],
                                                        [*rb.schema.names, *more])
                    if (fi, k) not in writers:
                        name = names[fi] if re.fullmatch(r"[A-Za-z_][\w.]*", names[fi]) \
                            else f"function{fi}"
                        target = out / f"{name}.{'exit' if k else 'entry'}.parquet"
                        writers[fi, k] = (pq.ParquetWriter(str(target) + ".part", rb.schema),
                                          target)
                    writers[fi, k][0].write_batch(rb)
        except BaseException:
            for w, target in writers.values():
                w.close()
                Path(str(target) + ".part").unlink()
            raise
        for w, target in writers.values():
            w.close()
            Path(str(target) + ".part").replace(target)
    for _, target in sorted(writers.values(), key=lambda x: str(x[1])):
        print(target)
    return 0


__all__ = ["arrays", "record_batches", "table", "dataframe", "write_parquet"]
