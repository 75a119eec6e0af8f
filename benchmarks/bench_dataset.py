#!/usr/bin/env python3
"""Recordings into one Parquet dataset (`btfgen decode --format parquet -o DIR`): recordings/s
and rows/s over this machine's CPUs (a process each), against the floor: bare pyarrow writing
the same rows, already decoded into Arrow tables in memory, to the same number of files with
the same number of processes (no reading, no checksums, no decoding, no pairing).

The recordings are synthetic (no BPF needed), each a different host: calls of the x86_64 golden
module's `scalars` (nine whole-scalar arguments), an entry and an exit each, in spans of SPAN
records as `btfgen trace --record` writes them (each record as long as its function's decoder
reads: the size a record takes once events are the size of what they hold, issue 34).

Target (issue 22): >= 50% of the floor.

    BENCH_RECORDINGS=16 BENCH_EVENTS=262144 python3 benchmarks/bench_dataset.py
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "recordings"))

import datasets  # noqa: E402
import synth  # noqa: E402

from btfgen.probe import recording  # noqa: E402
from btfgen.recordings import reader  # noqa: E402

RECORDINGS = int(os.environ.get("BENCH_RECORDINGS", 16))
EVENTS = int(os.environ.get("BENCH_EVENTS", 4 * reader.MAX_BATCH_EVENTS))
FUNCTION = "scalars"
SPAN = 16384  # records a span, as the tracer's reader takes them from a 16 MiB ring


def make(directory: Path) -> list[Path]:
    """RECORDINGS files of EVENTS events: MAX_BATCH_EVENTS events written by recording.Writer
    under each host's header (spans of SPAN), repeated (each span carries its own checksum),
    then the end."""
    mod = synth.module("x86_64")
    descs = synth.descriptors(mod)
    one = [d for d in descs if d[0] == FUNCTION]
    size = recording.stride(one[0])
    evs = [e[:size] for e in synth.events(one, reader.MAX_BATCH_EVENTS, 1, "little")]
    repeat = max(1, EVENTS // reader.MAX_BATCH_EVENTS)
    paths = []
    for i in range(RECORDINGS):
        small = directory / f"one-{i}"
        w = recording.Writer(str(small), datasets.header(mod, f"host-{i:03}", "6.1.0-bench"),
                             descs, "little")
        for at in range(0, len(evs), SPAN):
            w.records(evs[at:at + SPAN])
        w.close(0)
        data = small.read_bytes()
        small.unlink()
        at = data.index(b"SPAN")
        head, batch = data[:at], data[at:-recording.END.size]
        events = repeat * reader.MAX_BATCH_EVENTS
        tail = recording.struct.pack("<QQ", events, 0)
        paths.append(directory / f"r{i:03}.btfrec")
        with open(paths[-1], "wb") as f:
            f.write(head)
            for _ in range(repeat):
                f.write(batch)
            f.write(recording.END.pack(b"END\0", 0, events, 0, recording.zlib.crc32(tail), 0))
    return paths


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def dataset_rate(paths: list[Path], out: Path, jobs: int) -> float:
    from btfgen.recordings import dataset

    t = time.perf_counter()
    results = dataset.add_all([str(p) for p in paths], str(out), jobs)
    took = time.perf_counter() - t
    assert all(r.new for r in results), [r.error for r in results]
    return took


_TABLES: list = []  # the floor's decoded rows, inherited by its forked workers


def _write_floor(i: int) -> int:
    import pyarrow.parquet as pq

    table, target = _TABLES[i]
    pq.write_table(table, target)
    return table.num_rows


def floor_rate(out: Path, floor: Path, jobs: int) -> float:
    """The dataset's own rows, read back into memory first: bare pq.write_table of each."""
    import pyarrow.parquet as pq

    _TABLES.clear()
    for i, f in enumerate(sorted(out.rglob("*.parquet"))):
        _TABLES.append((pq.read_table(f), str(floor / f"{i}.parquet")))
    floor.mkdir()
    t = time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        list(pool.map(_write_floor, range(len(_TABLES))))
    return time.perf_counter() - t


def main() -> int:
    try:
        import pyarrow  # noqa: F401
    except ImportError as e:
        print(f"bench_dataset: needs the btfgen[arrow] extra ({e.name} is missing)")
        return 1
    jobs = cpus()
    with tempfile.TemporaryDirectory(prefix="bench-dataset-", dir=os.environ.get("TMPDIR"))\
            as tmp:
        paths = make(Path(tmp))
        size = sum(p.stat().st_size for p in paths)
        events = RECORDINGS * (EVENTS // reader.MAX_BATCH_EVENTS) * reader.MAX_BATCH_EVENTS
        print(f"{RECORDINGS} recordings of {events // RECORDINGS} events of {FUNCTION} "
              f"(9 scalar arguments; entries and exits), {size / 1e6:.0f} MB, {jobs} processes")
        best = float("inf"), float("inf")
        for run in range(2):  # the second with the files in the page cache
            out, floor = Path(tmp) / f"ds{run}", Path(tmp) / f"floor{run}"
            took = dataset_rate(paths, out, jobs)
            bare = floor_rate(out, floor, jobs)
            best = min(best[0], took), min(best[1], bare)
            shutil.rmtree(out), shutil.rmtree(floor)
        took, bare = best
        print(f"btfgen decode -o DIR (files -> dataset): {RECORDINGS / took:7.2f} recordings/s, "
              f"{events / took / 1e6:6.2f} M rows/s")
        print(f"floor (bare pyarrow write_table):        {RECORDINGS / bare:7.2f} recordings/s, "
              f"{events / bare / 1e6:6.2f} M rows/s")
        print(f"dataset at {bare / took:.0%} of the floor (target >= 50%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
