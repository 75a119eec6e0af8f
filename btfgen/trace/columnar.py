"""Recordings as columns: the events of one function and kind, batch by batch, as numpy
structured arrays (one dtype per function, built from its record layout) and pyarrow record
batches; a pyarrow Table or a pandas DataFrame; Parquet files (`btfgen decode --format
parquet`). Needs the `btfgen[arrow]` extra (numpy, pyarrow; pandas for DataFrames).

A whole scalar (int, pointer, bool, enum as its number, float) is read in place for every event
of a batch at once, never a Python call per event. Other values (structs, arrays, values behind
a pointer) go through the per-record decoder, one event at a time. A value the BPF side failed
to read (its bit in the record's `failed` mask), or one the trace cannot hold, is null.

Memory is bounded by one batch of the file (at most recording.MAX_BATCH_EVENTS events), whatever
the file's size.
"""

from __future__ import annotations

import re
from pathlib import Path

from btfgen.errors import BtfgenError
from btfgen.trace import replay, recording

try:
    import numpy as np
    import pyarrow as pa
except ImportError as e:  # one line for the CLI
    raise BtfgenError(f"columnar decoding needs the btfgen[arrow] extra ({e.name} is missing)"
                      ) from None

KINDS = {"entry": 0, "exit": 1}
# struct trace_event's header, then btfgen_record's: where each event field sits.
EVENT_FIELDS = [("timestamp", "u8", 24), ("cpu", "u4", 32), ("pid", "u4", 0), ("tid", "u4", 4)]
FAILED_AT = recording.EVENT_HEADER + 8
DATA_AT = recording.EVENT_HEADER + recording.RECORD_HEADER
SIZES = {1, 2, 4, 8}
FLOATS = {2: "f2", 4: "f4", 8: "f8"}


class Layout:
    """One function and kind's columns: `dtype` reads the event header and every in-place
    scalar; `scalars` are (column, op mask, bool?); `others` (column, value descriptor, index)
    need the per-record decoder; `missing` are always null."""

    def __init__(self, fn, kind: int, stride: int, order: str) -> None:
        bo = "<" if order == "little" else ">"
        names, formats, offsets = [], [], []
        for name, fmt, at in EVENT_FIELDS + [("failed", "u8", FAILED_AT)]:
            names.append(name), formats.append(bo + fmt), offsets.append(at)
        self.scalars, self.others, self.missing = [], [], []
        values = fn.args if kind == 0 else ((fn.ret[0],) if fn.ret else ())
        self.columns = [n for n, _, _ in EVENT_FIELDS]
        for i, (vdesc, plan) in enumerate(zip(values, fn._record[kind])):
            column = vdesc[0] if kind == 0 else "return"
            self.columns.append(column)
            fmt = _scalar(vdesc)
            if vdesc[5] is not None or plan is None:
                self.missing.append((column, vdesc))
            elif fmt is not None and plan[0] >= 0:
                names.append(column), formats.append(bo + fmt), offsets.append(DATA_AT + plan[0])
                self.scalars.append((column, plan[2], vdesc[1][0] == "bool"))
            else:
                # Behind a pointer the BPF side did not follow: the address (per-record: Unread).
                address = bool(vdesc[4]) and plan[0] < 0
                self.others.append((column, vdesc, i, address))
        self.dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                               "itemsize": stride})
        self.fn, self.kind = fn, kind


def _scalar(vdesc) -> str | None:
    """The numpy format of a value read in place, or None."""
    _name, t, size, _pieces, by_ref, _unavail = vdesc
    if by_ref or size != t[1] or t[1] not in SIZES:
        return None
    if t[0] in ("int", "enum"):
        return f"{'i' if t[2] else 'u'}{t[1]}"
    if t[0] in ("ptr", "bool"):
        return f"u{t[1]}"
    if t[0] == "float":
        return FLOATS.get(t[1])
    return None


word_sum = replay.word_sum()


def arrays(path: str, function: str, kind: str = "entry"):
    """numpy structured arrays, one per batch of the file: the events of `function` (its
    entries or exits), every in-place scalar a field; zero-copy views of the batch read."""
    for layout, batch in _sections(path, function, kind):
        yield np.frombuffer(batch, dtype=layout.dtype)


def record_batches(path: str, function: str, kind: str = "entry"):
    """pyarrow RecordBatches, one per batch of the file, with the columns timestamp, cpu, pid,
    tid and every argument (entry) or `return` (exit)."""
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
    with recording.Reader(path, word_sum) as r:
        fn, at = _function(r, function)
        layout = Layout(fn, KINDS[kind], r.strides[at], r.order)
    return _to_arrow(layout, b"").schema.empty_table()


def _function(reader: recording.Reader, function: str):
    names = [d[0] for d in reader.descriptors]
    if function not in names:
        raise BtfgenError(f"{reader.path}: no function {function!r} recorded "
                          f"(there are: {', '.join(names)})")
    at = names.index(function)
    return replay.functions(reader)[at], at


def _sections(path: str, function: str, kind: str, reuse: bool = False):
    if kind not in KINDS:
        raise BtfgenError(f"kind is entry or exit, not {kind!r}")
    with recording.Reader(path, word_sum, reuse) as r:
        fn, at = _function(r, function)
        layout = Layout(fn, KINDS[kind], r.strides[at], r.order)
        for batch in r.batches():
            for fi, k, _count, payload in batch.sections:
                if fi == at and k == layout.kind:
                    yield layout, payload


def _to_arrow(layout: Layout, payload):
    a = np.frombuffer(payload, dtype=layout.dtype)
    failed = np.ascontiguousarray(a["failed"])  # one strided pass, then contiguous ones
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
        cols[name] = pa.nulls(len(a), type=arrow_type(vdesc[1]))
    if layout.others:
        stride = layout.dtype.itemsize
        rows = [layout.fn.decode_record(payload[i * stride + recording.EVENT_HEADER:
                                                (i + 1) * stride])
                for i in range(len(a))]
        for name, vdesc, i, address in layout.others:
            typ = pa.uint64() if address else arrow_type(vdesc[1])
            cols[name] = pa.array([plain(row[i] if layout.kind == 0 else row, vdesc[1])
                                   for row in rows], type=typ)
    return pa.RecordBatch.from_pydict({c: cols[c] for c in layout.columns})


def _native(view):
    """A field as a contiguous array in this machine's byte order (Arrow's)."""
    if view.dtype.byteorder not in ("=", "|") and view.dtype.byteorder != _NATIVE:
        return view.astype(view.dtype.newbyteorder("="))
    return np.ascontiguousarray(view)


_NATIVE = "<" if np.little_endian else ">"


def arrow_type(t):
    """The Arrow type of a value of type descriptor `t` (see btfgen.decoder.runtime)."""
    tag = t[0]
    if tag in ("int", "enum") and t[1] in SIZES:
        return getattr(pa, f"{'' if t[2] else 'u'}int{8 * t[1]}")()
    if tag == "ptr":
        return pa.uint64()
    if tag == "bool":
        return pa.bool_()
    if tag == "float" and t[1] in FLOATS:
        return {2: pa.float16(), 4: pa.float32(), 8: pa.float64()}[t[1]]
    if tag == "int" or tag == "enum":
        return pa.string()  # wider than 64 bits: the number in decimal
    if tag == "array":
        return pa.list_(arrow_type(t[3]))
    if tag in ("struct", "union"):
        return pa.struct([(m[0], arrow_type(m[3])) for m in t[2]])
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
    tag = t[0]
    if tag in ("int", "enum") and t[1] not in SIZES:
        return str(int(value))
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, dict):
        return {m[0]: plain(value[m[0]], m[3]) for m in t[2]}
    if isinstance(value, list):
        return [plain(v, t[3]) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return value


def write_parquet(path: str, directory: str) -> int:
    """One Parquet file per recorded function and kind, FUNCTION.KIND.parquet in `directory`,
    written batch by batch (bounded memory) to FILE.part, renamed when whole."""
    import pyarrow.parquet as pq

    replay.verify(path)  # a bad file writes nothing
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with recording.Reader(path, word_sum, reuse=True) as r:
        names = [d[0] for d in r.descriptors]
        fns = replay.functions(r)
        layouts = {(i, k): Layout(fns[i], k, r.strides[i], r.order)
                   for i in range(len(fns)) for k in (0, 1)}
        writers: dict = {}
        try:
            for batch in r.batches():
                for fi, k, _count, payload in batch.sections:
                    rb = _to_arrow(layouts[fi, k], payload)
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
