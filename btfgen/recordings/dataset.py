"""Recordings from many hosts as one Hive-partitioned Parquet dataset (`btfgen decode --format
parquet -o DIR FILE|DIR...`), for the engines users already have: DuckDB on a laptop, Spark on
a cluster. Needs the `btfgen[arrow]` extra.

    DIR/host=H/kernel=K/function=F/R.parquet   the rows of function F from recording R
    DIR/_recordings/R.json                     the recordings DIR holds: written last

R is the start of the recording's SHA-256: a recording already in DIR (its R.json is there) is
not added again, and adding one writes new files only, never touching what is there. Every
file is written under a hidden name (`.R.PID.parquet.part`: Spark and a `*.parquet` glob both
skip it) and renamed when whole, and R.json only after all of R's files: a crash leaves no
partial Parquet file, only a hidden .part, and a rerun adds the recording whole.

A row is one event: `time` (wall clock, UTC, in us; null if the recorder did not note its clock),
`timestamp` (the tracer's CLOCK_MONOTONIC ns), cpu, pid, tid, `kind` (entry or exit), `call`
and `duration_ns` (shared by an entry and its exit when both were recorded: the call, paired on
its thread as `btfgen decode` pairs them; null when one of them was lost), arch, recording,
then `arg_NAME` per argument (null on exits), `ret`, `errno` and `errno_name` (null on entries;
errno: what `btfgen decode` names beside the return, errnos.py). host, kernel and function
come from the path (Hive partitions). A recording made with --stack adds `stack`, `stack_ip`
and `stack_cut` (stack_columns.py; null on exits). Integers keep their width and signedness,
enums are their enumerator names (dictionary-encoded; a value no enumerator has is its number in
decimal), structs by value are struct columns. The columns of a function are those of its
decoder in that recording: two kernels can give one function different columns, and each file
says its own; readers merge by name (DuckDB union_by_name, Spark mergeSchema).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from btfgen.errors import BtfgenError
from btfgen.probe import recording, spec_format
from btfgen.probe.calls import OpenCalls
from btfgen.recordings import columnar, errnos, grouping, replay, stack_columns
from btfgen.recordings.reader import Reader
from btfgen.recordings.stack_columns import StackColumns
from btfgen.recordings.partitions import segment

import numpy as np  # noqa: I001 (after columnar: its import says which extra is missing)
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

RECORDINGS = "_recordings"
ID_LENGTH = 32  # hex digits of the SHA-256: a collision would need 2**64 recordings
ROW_GROUP = 1 << 17  # rows buffered per function before they go to the file as a row group
KINDS = ("entry", "exit")
# Microseconds: Spark reads no nanosecond timestamp (the ns are in `timestamp`).
TIME = pa.timestamp("us", tz="UTC")
EVENT_COLUMNS = ("timestamp", "cpu", "pid", "tid")  # columnar's first columns, in its order


class Added(NamedTuple):
    """What adding one recording did: `new` False when the dataset held it already; `error`
    the one line saying why it was refused (nothing of it was written); `cut` the one line
    saying it was cut short (its tracer killed: what it wrote was added)."""
    path: str
    recording: str | None
    new: bool
    rows: int
    error: str | None = None
    cut: str | None = None


def recording_id(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()[:ID_LENGTH]


def marker(directory: str, rid: str) -> Path:
    return Path(directory) / RECORDINGS / f"{rid}.json"


def add(path: str, directory: str) -> Added:
    """Add one recording to the dataset at `directory`; never raises for a bad recording (the
    pool's workers report, the parent prints)."""
    try:
        rid = recording_id(path)
        if marker(directory, rid).exists():
            return Added(path, rid, False, 0)
        rows, cut = _write(path, directory, rid)
        return Added(path, rid, True, rows, cut=cut and (
            f"{path}: cut at byte {cut[0]} after {cut[1]} events (the recording has no end: its "
            f"tracer was killed?): added up to there"))
    except (recording.RecordError, BtfgenError) as e:
        return Added(path, None, False, 0, _one_line(str(e), path))
    except OSError as e:
        return Added(path, None, False, 0, f"{path}: {e.strerror or e}")
    except Exception as e:  # a damaged file's way we did not foresee: still one line
        return Added(path, None, False, 0, f"{path}: corrupt ({type(e).__name__}: {e})")


def _one_line(text: str, path: str) -> str:
    text = " ".join(text.split())
    return text if text.startswith(path) else f"{path}: {text}"


class _Source(NamedTuple):
    host: str
    kernel: str
    arch: str
    clock_offset: int | None  # wall clock minus CLOCK_MONOTONIC when the recording started


def _source(path: str, header: dict) -> _Source:
    values = [header.get(k) for k in ("host", "kernel_release", "arch")]
    for key, v in zip(("host", "kernel_release", "arch"), values):
        if not isinstance(v, str) or not v:
            raise BtfgenError(f"{path}: no {key} in its header (recorded by an older btfgen "
                              f"tracer?): the dataset is partitioned by it")
    offset = header.get("clock_offset_ns")
    return _Source(*values, offset if isinstance(offset, int) else None)


def _write(path: str, directory: str, rid: str) -> tuple[int, tuple | None]:
    # Pass 1 checks the whole file (a bad one writes nothing) and reads only each event's time
    # and thread, to pair entries with exits across batches; pass 2 writes, batch by batch.
    with Reader(path, columnar.word_sum, reuse=True, grouping=grouping.NumpyGrouping) as r:
        fns = replay.functions(r)
        source = _source(path, r.header)
        layouts = {(i, k): columnar.Layout(fn, k, r.strides[i], r.order, columnar.is_kernel(r))
                   for i, fn in enumerate(fns) for k in (0, 1)}
        keys = _Keys(len(fns))
        for batch in r.batches():
            for fi, k, _count, payload in batch.sections:
                keys.add(fi, k, grouping.records(payload, layouts[fi, k].dtype))
        events, lost, cut, checked = r.events, r.lost, r.cut, r.checked
    calls = keys.pair()
    files = _Files(directory, source, rid, [fn.name for fn in fns])
    try:
        with Reader(path, columnar.word_sum, reuse=True, grouping=grouping.NumpyGrouping,
                    trust=checked) as r:
            stacks = StackColumns(r.header, r.order, fns) if r.header.get("stack") else None
            rows = _Rows(fns, layouts, source, rid, calls, stacks=stacks is not None)
            for batch in r.batches():
                entries = stacks.span(batch, r.strides) if stacks else {}
                for fi, k, _count, payload in batch.sections:
                    files.add(fi, rows.batch(fi, k, columnar._to_arrow(layouts[fi, k], payload),
                                             entries.get(fi) if k == 0 else None),
                              rows.schema(fi))
        written = files.close()
    except BaseException:
        files.abandon()
        raise
    doc = {"recording": rid, "source": os.path.abspath(path), "host": source.host,
           "kernel": source.kernel, "arch": source.arch, "events": events, "lost": lost,
           "rows": files.rows, "files": written, "functions": files.functions()}
    if cut:
        doc["cut_at"] = cut[0]  # a cut recording: `lost` is not known
    # One line of JSON: Spark reads the directory as a table (btfgen/recordings/spark.py).
    _atomic_text(marker(directory, rid), json.dumps(doc, sort_keys=True) + "\n")
    return files.rows, cut


class _Keys:
    """Each function's event times, threads and kinds, in the order pass 2 meets them."""

    def __init__(self, nfuncs: int) -> None:
        self.parts: list[list] = [[] for _ in range(nfuncs)]
        self.losses: list[tuple] = []  # (times, threads, flags) of events marked with a loss

    def add(self, fi: int, kind: int, events) -> None:
        flags = events[columnar.FLAGS]
        # A record the BPF side said not to pair (spec_format.EVENT_NOT_PAIRED: the BPF
        # trampoline's exit whose entry the kernel skipped, the fentry.multi pair's) is left out
        # of the pairing, as the tracer leaves it (output.Printer).
        self.parts[fi].append((events["timestamp"].astype(np.int64),
                               events["tid"].astype(np.int64), kind,
                               (flags.astype(np.int64) & spec_format.EVENT_NOT_PAIRED) != 0))
        flagged = np.flatnonzero(flags)
        if len(flagged):
            self.losses.append((events["timestamp"][flagged].astype(np.int64),
                                events["tid"][flagged].astype(np.int64),
                                events[columnar.FLAGS][flagged].astype(np.int64)))

    def pair(self) -> list[tuple]:
        """Per function, (call, duration_ns) for every event: -1 where unpaired."""
        out, base = [], 0
        for parts in self.parts:
            if not parts:
                out.append((np.empty(0, np.int64), np.empty(0, np.int64)))
                continue
            ts = np.concatenate([p[0] for p in parts])
            tid = np.concatenate([p[1] for p in parts])
            kind = np.concatenate([np.full(len(p[0]), p[2], np.int8) for p in parts])
            alone = np.concatenate([p[3] for p in parts])
            if alone.any():
                paired = np.flatnonzero(~alone)
                call = np.full(len(ts), -1, np.int64)
                took = np.full(len(ts), -1, np.int64)
                call[paired], took[paired], n = pair_calls(ts[paired], tid[paired],
                                                           kind[paired], base)
            else:
                call, took, n = pair_calls(ts, tid, kind, base)
            unpair_across_losses(call, took, ts, tid, kind, self.losses)
            out.append((call, took))
            base += n
        return out


def unpair_across_losses(call, took, ts, tid, kind, losses) -> None:
    """Takes back the pairs (in place: call and took -1) that a record marked with a loss
    (spec_format.EVENT_THREAD_LOST, EVENT_SOME_LOST) falls inside of, in (entry, exit]: the
    tracer forgets a thread's open calls at such a record (probe/calls.py), so these are the
    pairs it does not make. Call ids left unused are harmless gaps."""
    if not losses:
        return
    l_ts = np.concatenate([x[0] for x in losses])
    l_tid = np.concatenate([x[1] for x in losses])
    l_flags = np.concatenate([x[2] for x in losses])
    exits = np.flatnonzero((kind == 1) & (call >= 0))
    if not len(exits):
        return
    t_exit = ts[exits]
    t_entry = t_exit - took[exits]
    bad = np.zeros(len(exits), bool)
    some = l_ts[(l_flags & spec_format.EVENT_SOME_LOST) != 0]
    if len(some):
        bad |= t_exit >= some.min()  # every record after the first such one is marked too
    thread = (l_flags & spec_format.EVENT_THREAD_LOST) != 0
    order = np.lexsort((l_ts[thread], l_tid[thread]))
    f_tid, f_ts = l_tid[thread][order], l_ts[thread][order]
    by_thread = np.argsort(tid[exits], kind="stable")
    e_tid = tid[exits][by_thread]
    for t in np.unique(f_tid):
        lo, hi = np.searchsorted(f_tid, t, "left"), np.searchsorted(f_tid, t, "right")
        mine = by_thread[np.searchsorted(e_tid, t, "left"):np.searchsorted(e_tid, t, "right")]
        times = f_ts[lo:hi]
        inside = (np.searchsorted(times, t_exit[mine], "right") -
                  np.searchsorted(times, t_entry[mine], "right"))
        bad[mine[inside > 0]] = True
    dropped = np.isin(call, call[exits[bad]])
    call[dropped] = -1
    took[dropped] = -1


# Rounds of taking out the calls with nothing inside them before what is left is paired one
# event at a time: a call nested this deep is rare, and a round costs a pass over what is left.
PAIRING_ROUNDS = 64


def pair_calls(ts, tid, kind, base: int = 0):
    """Entries (kind 0) paired with exits (1) of one function, as `btfgen decode` pairs them:
    by the one rule, btfgen.probe.calls.OpenCalls, in each thread's time order. An entry that
    its thread's next event exits is one call (the innermost open one), and taking such a pair
    out changes no other pairing: so, round after round, those are found over arrays at once
    (nearly every call in the first round, a level of nesting in each next), and only what is
    left (deeper nesting, lost events) goes through the rule an event at a time. Returns (call
    ids from `base`, durations, pairs), -1 where unpaired."""
    n = len(ts)
    call = np.full(n, -1, np.int64)
    took = np.full(n, -1, np.int64)
    if n == 0:
        return call, took, 0
    order = np.lexsort((kind, ts, tid))  # per thread, in time order; an entry first at a tie
    o_tid, o_kind = tid[order], kind[order]
    exit_at = np.full(n, -1, np.int64)  # by position in `order`: an entry's exit's position
    left = np.arange(n)
    for _ in range(PAIRING_ROUNDS):
        k, t = o_kind[left], o_tid[left]
        direct = np.flatnonzero((k[:-1] == 0) & (k[1:] == 1) & (t[:-1] == t[1:]))
        if not len(direct):
            break
        exit_at[left[direct]] = left[direct + 1]
        keep = np.ones(len(left), bool)
        keep[direct] = keep[direct + 1] = False
        left = left[keep]
    if len(left):
        fn, open_calls = object(), OpenCalls(max_depth=None)
        for at, thread, k in zip(left.tolist(), o_tid[left].tolist(), o_kind[left].tolist()):
            if k == 0:
                open_calls.enter(thread, fn, at)
            elif (entry := open_calls.exit(thread, fn)) is not None:
                exit_at[entry] = at
    entries = np.flatnonzero(exit_at >= 0)
    e, x = order[entries], order[exit_at[entries]]
    ids = base + np.arange(len(entries), dtype=np.int64)
    call[e] = call[x] = ids
    took[e] = took[x] = ts[x] - ts[e]
    return call, took, len(entries)


class _Rows:
    """Columnar's record batches as dataset rows: the event columns, the pairing, the
    recording's own columns, arg_NAME and ret, enums as names."""

    def __init__(self, fns, layouts, source: _Source, rid: str, calls,
                 stacks: bool = False) -> None:
        self.fns, self.source, self.rid, self.calls = fns, source, rid, calls
        self.stacks = stacks  # the recording has stacks: their columns (stack_columns.py)
        self.cursor = [0] * len(fns)
        self._schemas = {}
        for fi in range(len(fns)):
            empty = [self._columns(fi, k, columnar._to_arrow(layouts[fi, k], b""), 0)
                     for k in (0, 1)]
            if stacks:
                empty.append(stack_columns.columns(None, 0))
            fields = {}
            for cols in empty:
                for name, array in cols.items():
                    fields.setdefault(name, array.type)
            self._schemas[fi] = pa.schema(list(fields.items()))
        self.cursor = [0] * len(fns)

    def schema(self, fi: int) -> pa.Schema:
        return self._schemas[fi]

    def batch(self, fi: int, kind: int, rb, stacks=None) -> pa.RecordBatch:
        """`stacks`: the entries' stacks (StackColumns.span's rows of function `fi`)."""
        at = self.cursor[fi]
        self.cursor[fi] = at + rb.num_rows
        cols = self._columns(fi, kind, rb, at)
        if self.stacks:
            cols.update(stack_columns.columns(stacks, rb.num_rows))
        schema = self._schemas[fi]
        return pa.RecordBatch.from_arrays(
            [cols.get(f.name, pa.nulls(rb.num_rows, f.type)) for f in schema], schema=schema)

    def _columns(self, fi: int, kind: int, rb, at: int) -> dict:
        fn, n = self.fns[fi], rb.num_rows
        values = fn.args if kind == 0 else (fn.ret[:1] if fn.ret else ())
        ncaps = sum(1 + (c.kind in ("str", "buf")) for c in fn.captures
                    if c.at_exit == bool(kind))
        first_capture = len(EVENT_COLUMNS) + len(values) + kind  # an exit's errno
        assert rb.num_columns == first_capture + ncaps  # columnar's order
        ts = rb.column(0).to_numpy().astype(np.int64)
        call, took = (a[at:at + n] for a in self.calls[fi])
        off = self.source.clock_offset
        cols = {"time": pa.array((ts + off) // 1000, type=TIME) if off is not None
                else pa.nulls(n, TIME)}
        for i, name in enumerate(EVENT_COLUMNS):
            cols[name] = rb.column(i)
        cols["kind"] = _constant(KINDS[kind], n)
        cols["call"] = pa.array(call, mask=call < 0)
        cols["duration_ns"] = pa.array(took, mask=call < 0)
        cols["arch"] = _constant(self.source.arch, n)
        cols["recording"] = _constant(self.rid, n)
        names = ["ret"] if kind else _arg_columns([v[0] for v in values])
        for i, (vdesc, name) in enumerate(zip(values, names)):
            cols[name] = _as_names(rb.column(len(EVENT_COLUMNS) + i), vdesc[1])
        if kind:  # every function's exits have them (null for a void one): one schema for all
            cols["errno"] = rb.column(columnar.ERRNO)
            cols["errno_name"] = errnos.name_column(cols["errno"])
        for i in range(first_capture, rb.num_columns):
            cols[rb.schema.field(i).name] = rb.column(i)  # captures: cap:PATH, as columnar's
        return cols


def _arg_columns(names: list[str]) -> list[str]:
    """`arg_NAME` for each argument (`arg_N` for one without a name), each once: two of one
    name (hostile BTF can have them) would otherwise be one column, the other's values lost."""
    out, taken = [], set()
    for i, name in enumerate(names):
        column = f"arg_{name or i}"
        if column in taken:
            column = f"arg{i}_{name}"
        taken.add(column)
        out.append(column)
    return out


def _constant(value: str, n: int):
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))


def _as_names(column, t):
    """An enum's numbers as its enumerator names, dictionary-encoded; other columns as they
    are."""
    if t[0] != "enum" or not pa.types.is_integer(column.type):
        return column
    names = t[3]
    uniques = pc.unique(column).drop_null()
    words = [names.get(v, str(v)) for v in uniques.to_pylist()]
    indices = pc.index_in(column, value_set=uniques)
    return pa.DictionaryArray.from_arrays(indices.cast(pa.int32()),
                                          pa.array(words, type=pa.string()))


class _Files:
    """One Parquet file per function of the recording, under its hidden .part name until
    close() renames them all."""

    def __init__(self, directory: str, source: _Source, rid: str, names: list[str]) -> None:
        self.root, self.rid, self.names = Path(directory), rid, names
        self.base = self.root / segment("host", source.host) / segment("kernel", source.kernel)
        self.open: dict[int, list] = {}  # function -> [writer, part, target, batches, rows]
        self.rows = 0

    def add(self, fi: int, batch, schema) -> None:
        if not batch.num_rows:
            return
        slot = self.open.get(fi)
        if slot is None:
            target = self.base / segment("function", self.names[fi]) / f"{self.rid}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            part = target.parent / f".{self.rid}.{os.getpid()}.parquet.part"
            slot = self.open[fi] = [None, part, target, [], 0, schema]
        slot[3].append(batch)
        slot[4] += batch.num_rows
        self.rows += batch.num_rows
        if slot[4] >= ROW_GROUP:
            self._flush(slot)

    def _flush(self, slot) -> None:
        if slot[0] is None:
            slot[0] = pq.ParquetWriter(str(slot[1]), slot[5])
        slot[0].write_table(pa.Table.from_batches(slot[3], slot[5]))
        slot[3], slot[4] = [], 0

    def close(self) -> list[str]:
        for slot in self.open.values():
            if slot[3]:
                self._flush(slot)
            slot[0].close()
        written = []
        for slot in self.open.values():
            os.replace(slot[1], slot[2])
            written.append(str(slot[2].relative_to(self.root)))
        return sorted(written)

    def functions(self) -> list[str]:
        return sorted(self.names[fi] for fi in self.open)

    def abandon(self) -> None:
        for slot in self.open.values():
            if slot[0] is not None:
                slot[0].close()
            slot[1].unlink(missing_ok=True)


def _atomic_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.parent / f".{path.name}.{os.getpid()}.part"
    part.write_text(text)
    os.replace(part, path)


# -- many recordings ---------------------------------------------------------------------------

def inputs(paths: list[str]) -> list[str]:
    """The recordings named: files as given, a directory's files (not its hidden ones),
    sorted; each once."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(str(c) for c in Path(p).iterdir() if c.is_file()
                          and not c.name.startswith("."))
        else:
            out.append(p)
    seen: set[str] = set()
    return [p for p in out if not (os.path.realpath(p) in seen or seen.add(os.path.realpath(p)))]


def add_all(paths: list[str], directory: str, jobs: int = 1, progress=None) -> list[Added]:
    """Add every recording, `jobs` at a time in worker processes; the results in the order
    given. A recording met twice (the same bytes under two names) lands once."""
    root = Path(directory)
    if root.exists() and not root.is_dir():
        raise BtfgenError(f"{directory}: not a directory")
    root.mkdir(parents=True, exist_ok=True)
    sizes = [_size(p) for p in paths]
    if progress is not None:
        progress.total(sum(sizes), "bytes")
    if jobs <= 1 or len(paths) <= 1:
        results = []
        for p, size in zip(paths, sizes):
            results.append(add(p, directory))
            if progress is not None:
                progress.advance(size)
    else:
        results = _in_pool(paths, sizes, directory, jobs, progress)
    seen: set[str] = set()
    out = []
    for a in results:
        if a.new and a.recording in seen:
            a = a._replace(new=False, rows=0)
        seen.add(a.recording)
        out.append(a)
    return out


def _in_pool(paths, sizes, directory, jobs, progress) -> list[Added]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("fork")  # no re-import of pyarrow per worker
    results: list[Added | None] = [None] * len(paths)
    with ProcessPoolExecutor(min(jobs, len(paths)), mp_context=ctx) as pool:
        futures = {pool.submit(add, p, directory): i for i, p in enumerate(paths)}
        for f in as_completed(futures):
            i = futures[f]
            results[i] = f.result()
            if progress is not None:
                progress.advance(sizes[i])
    return results


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


__all__ = ["Added", "add", "add_all", "inputs", "pair_calls", "recording_id"]
