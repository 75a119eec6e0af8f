#!/usr/bin/env python3
"""Columnar decoding of a recording (`btfgen trace --record`): records/s of one scalar-only
function's entries into Arrow record batches (btfgen.recordings.columnar), against the per-record
path (the generated decoder's decode_record, one Python call per record) and a bare
numpy.frombuffer of the same bytes (no file framing, no checksum, no Arrow); then the peak
memory of the columnar path over files of growing size: bounded by one batch of the file, not
by the file.

The recording is synthetic (no BPF needed): the x86_64 golden module's `scalars` (nine
whole-scalar arguments: ints of 1-8 bytes, a bool, a pointer), random value bytes, in spans of
SPAN records as `btfgen trace --record` writes them (recording format 2: the ring's bytes, each
record its kernel header and its bytes). Each record is as long as its function's decoder reads
(its stride): the size a record takes once events are the size of what they hold (issue 34);
BENCH_RECORD_BYTES=1080 gives today's generic record.

Target (issue 14): >= 20 M records/s for scalar-only functions.

    BENCH_RECORDS=20000000 python3 benchmarks/bench_columnar.py

With --formats, the recording formats back to back instead (the machine's load moves the
figure more than anything else): BENCH_RECORDS records written in each format by its own writer
(1: tests/recordings/recording_v1.py, 2: tests/recordings/recording_v2.py, 3: today's writer with
every span's runs, 4: today's, every second span raw, as the tracer writes a span it handed over
on the BPF side's count), then
columnar.record_batches over each in turn, the order alternating, BENCH_ROUNDS rounds (and
format 3 once more with its checks not taken: a second pass's `trust`); medians and each round's
ratio to format 1's.

    BENCH_RECORDS=2000000 BENCH_ROUNDS=7 python3 benchmarks/bench_columnar.py --formats
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "recordings"))

import synth  # noqa: E402

from btfgen.probe import event, recording  # noqa: E402

RECORDS = int(os.environ.get("BENCH_RECORDS", 20_000_000))
RECORD_BYTES = int(os.environ.get("BENCH_RECORD_BYTES", 0))  # 0: the function's stride
FUNCTION = "scalars"
SPAN = 16384  # records a span: ~2 MiB, what the tracer's reader takes from a 16 MiB ring


def make(path: Path, records: int) -> None:
    """A file of `records` entries of FUNCTION: one real span written by recording.Writer,
    repeated (each span carries its own checksum), then the end."""
    mod = synth.module("x86_64")
    descs = synth.descriptors(mod)
    desc = mod._descriptor(FUNCTION)[0]
    size = RECORD_BYTES or recording.stride(desc)
    rng = random.Random(1)
    one = path.with_suffix(".one")
    w = recording.Writer(str(one), {"arch": "x86_64", "byte_order": "little", "who": False,
                                 "kernel_release": "synthetic"}, descs, "little")
    w.records(synth.event(desc, 0, rng, 1000 + i)[:size] for i in range(SPAN))
    w.close(0)
    data = one.read_bytes()
    one.unlink()
    span_at = data.index(b"SPAN")
    head, span = data[:span_at], data[span_at:-recording.END.size]
    n = records // SPAN
    with open(path, "wb") as f:
        f.write(head)
        for _ in range(n):
            f.write(span)
        events = n * SPAN
        tail = recording.struct.pack("<QQ", events, 0)
        f.write(recording.END.pack(b"END\0", 0, events, 0, recording.zlib.crc32(tail), 0))


def make_format(path: Path, records: int, version: int) -> None:
    """`records` entries of FUNCTION in recording format `version`, written by its writer a
    span (version 1: a batch) of SPAN records at a time, one span's records repeated."""
    mod = synth.module("x86_64")
    descs = synth.descriptors(mod)
    desc = mod._descriptor(FUNCTION)[0]
    size = RECORD_BYTES or recording.stride(desc)
    rng = random.Random(1)
    span = [synth.event(desc, 0, rng, 1000 + i)[:size] for i in range(SPAN)]
    synth.write(path, mod, span * (records // SPAN), batch=SPAN, version=version)


def formats(records: int, rounds: int) -> int:
    import statistics

    from btfgen.recordings import columnar

    with tempfile.TemporaryDirectory(prefix="bench-columnar-", dir=os.environ.get("TMPDIR"))\
            as tmp:
        paths = {}
        for version in (1, 2, 3, 4):
            paths[version] = Path(tmp) / f"v{version}.btfrec"
            make_format(paths[version], records, version)
        # 4: every second span raw (the tracer's, handed over on the BPF side's count): its
        # runs found from its headers as it is read.
        runs = {k: [] for k in ("1", "2", "3", "4", "3, checks not taken")}
        cpus = {k: [] for k in runs}  # records a second of the process's CPU time

        def rate(key: str) -> float:
            path = paths[int(key[0])]
            trust = path.stat().st_size if "not" in key else 0
            real = columnar.Reader
            columnar.Reader = lambda *a, **k: real(*a, **dict(k, trust=trust))
            try:
                cpu = time.process_time()
                rate, rows = columnar_rate(path)
                cpus[key].append(rows / (time.process_time() - cpu))
                return rate
            finally:
                columnar.Reader = real

        for key in runs:
            rate(key)  # each file in the page cache, its code warm
            cpus[key].clear()
        for r in range(rounds):
            for key in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                runs[key].append(rate(key))
        print(f"{records} entries of {FUNCTION}, {SPAN} records a span, median of {rounds} "
              f"alternating rounds, load {os.getloadavg()[0]:.1f} at the end:")
        for key, rates in runs.items():
            ratio = statistics.median(a / b for a, b in zip(rates, runs["1"]))
            cpu = statistics.median(a / b for a, b in zip(cpus[key], cpus["1"]))
            print(f"format {key:22s} {statistics.median(rates) / 1e6:6.2f} M records/s "
                  f"(x{ratio:.2f} format 1's, round by round); "
                  f"{statistics.median(cpus[key]) / 1e6:6.2f} M a CPU second (x{cpu:.2f})")
    return 0


def columnar_rate(path: Path) -> tuple[float, int]:
    from btfgen.recordings import columnar

    t = time.perf_counter()
    rows = sum(b.num_rows for b in columnar.record_batches(str(path), FUNCTION, "entry"))
    return rows / (time.perf_counter() - t), rows


def per_record_rate(path: Path, limit: int = 300_000) -> float:
    from btfgen.decoder.runtime import Function
    from btfgen.recordings import grouping
    from btfgen.recordings.reader import Reader

    with Reader(str(path), grouping=grouping.NumpyGrouping) as r:
        fn = next(f for f in map(Function, r.descriptors) if f.name == FUNCTION)
        stride = r.strides[0]
        done, t = 0, time.perf_counter()
        for batch in r.batches():
            for _fi, _k, count, payload in batch.sections:
                for i in range(count):
                    fn.decode_record(grouping.record_bytes(payload, i, stride)
                                     [event.EVENT_HEADER:])
                done += count
            if done >= limit:
                break
        return done / (time.perf_counter() - t)


def frombuffer_rate(path: Path) -> float:
    """numpy.frombuffer over the batches' payloads already in memory, one field summed: the
    floor of what reading these bytes costs."""
    import numpy as np

    from btfgen.recordings import columnar, grouping, replay
    from btfgen.recordings.reader import Reader

    with Reader(str(path), grouping=grouping.NumpyGrouping) as r:
        fn = replay.functions(r)[0]
        layout = columnar.Layout(fn, 0, r.strides[0], r.order)
        payloads = [np.ascontiguousarray(p) for b, _ in zip(r.batches(), range(40))
                    for *_, p in b.sections]
    t = time.perf_counter()
    rows = 0
    for p in payloads:
        a = grouping.records(p, layout.dtype)
        a["a"].sum()
        rows += len(a)
    return rows / (time.perf_counter() - t)


# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forking parent.
PEAK = """
import sys
sys.path.insert(0, {root!r})
from btfgen.recordings import columnar
rows = 0
for b in columnar.record_batches({path!r}, "scalars", "entry"):
    rows += b.num_rows
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print(rows, hwm[0])
"""


def peak_memory(path: Path) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", PEAK.format(root=str(ROOT), path=str(path))],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


def main() -> int:
    try:
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as e:
        print(f"bench_columnar: needs the btfgen[arrow] extra ({e.name} is missing)")
        return 1
    if "--formats" in sys.argv[1:]:
        return formats(RECORDS, int(os.environ.get("BENCH_ROUNDS", 7)))
    with tempfile.TemporaryDirectory(prefix="bench-columnar-", dir=os.environ.get("TMPDIR"))\
            as tmp:
        path = Path(tmp) / "big.btfrec"
        make(path, RECORDS)
        size = path.stat().st_size
        rate, rows = columnar_rate(path)  # the file is in the page cache from here on
        rate, rows = columnar_rate(path)
        print(f"recording: {rows} entries of {FUNCTION} (9 scalar arguments), "
              f"{size / 1e9:.2f} GB, {size / rows:.0f} bytes/record")
        print(f"columnar (file -> Arrow record batches): {rate / 1e6:6.2f} M records/s  "
              f"(target >= 20)")
        per = per_record_rate(path)
        print(f"per-record decode_record:                {per / 1e6:6.2f} M records/s  "
              f"(columnar x{rate / per:.0f})")
        bare = frombuffer_rate(path)
        print(f"bare numpy.frombuffer (bytes in memory): {bare / 1e6:6.2f} M records/s  "
              f"(columnar at {rate / bare:.0%} of it)")
        decoded = rows * (8 + 4 + 4 + 4 + 4 + 1 + 1 + 8 + 8 + 2 + 8 + 4 + 8)
        for frac in (4, 1):
            small = Path(tmp) / f"part{frac}.btfrec"
            make(small, RECORDS // frac)
            n, kb = peak_memory(small)
            print(f"peak RSS over {n:>9} records ({small.stat().st_size / 1e9:.2f} GB file): "
                  f"{kb / 1024:6.0f} MB")
            small.unlink()
        print(f"(the {rows} records decoded all at once would take {decoded / 1e9:.2f} GB of "
              f"columns; the columnar path holds one span of {SPAN})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
