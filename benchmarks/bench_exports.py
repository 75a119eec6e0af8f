#!/usr/bin/env python3
"""`btfgen decode --format chrome|folded` and `--tree` over a recording of nested calls:
events/s of each export in this process (CPU time, the walk and the text made, written to
nowhere), beside `--format jsonl` (replay.print_recording, its checks included) over the same
file, and numpy's grouping into sections (the columnar path's) over it; then the peak memory
(VmHWM) of `btfgen decode --format chrome` over files of growing size: bounded by a span and
the open calls, not by the file. Beside them, `btfgen trace`'s live printer (Printer.records,
text and --json) handed the file's first events as the ring hands them over.

The recording is synthetic (no BPF needed), as bench_columnar makes it: the x86_64 golden
module's `scalars` (nine whole-scalar arguments, random values) called nested on three threads
(tests/recordings/nested.py: each thread a tree of calls three deep), SPAN events in one span
written by recording.Writer, that span repeated (each carries its own checksum; the trees are
whole in a span, so the repeats pair as the first did).

Target (issue 48): >= 300,000 events/s, memory bounded.

The texts (chrome's args, the tree's calls) are made by the C module _btfgen_lines where it is
installed (`pip install .` builds it), else by lines.py's Python handlers; the first line
printed says which, and BTFGEN_PURE_PYTHON=1 measures the second beside the first.

    BENCH_EVENTS=1000000 BENCH_ROUNDS=3 python3 benchmarks/bench_exports.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "recordings"))

import nested  # noqa: E402
import synth  # noqa: E402

from btfgen.probe import recording  # noqa: E402

EVENTS = int(os.environ.get("BENCH_EVENTS", 1_000_000))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))
SPAN = 16384
# The live printer's rows: the recording's first LIVE_EVENTS events, in spans of LIVE_SPAN
# records (a reader that keeps up takes a few hundred at a poll).
LIVE_EVENTS = min(EVENTS, 200_000)
LIVE_SPAN = 256


def make(path: Path, events: int) -> int:
    """A file of about `events` events: one span of nested calls, repeated. Returns its
    events."""
    mod = synth.module("x86_64")
    desc = mod._descriptor("scalars")[0]
    span_events = nested.calls([desc], SPAN, 1, "little")
    one = path.with_suffix(".one")
    w = recording.Writer(str(one), {"arch": "x86_64", "byte_order": "little", "who": False,
                                 "kernel_release": "synthetic"}, synth.descriptors(mod), "little")
    w.records(span_events)
    w.close(0)
    data = one.read_bytes()
    one.unlink()
    span_at = data.index(b"SPAN")
    head, span = data[:span_at], data[span_at:-recording.END.size]
    n = max(1, events // len(span_events))
    with open(path, "wb") as f:
        f.write(head)
        for _ in range(n):
            f.write(span)
        total = n * len(span_events)
        tail = recording.struct.pack("<QQ", total, 0)
        f.write(recording.END.pack(b"END\0", 0, total, 0, recording.zlib.crc32(tail), 0))
    return total


class _Nowhere:
    def write(self, text: str) -> int:
        return len(text)


def _exports():
    from btfgen.recordings.chrome import Chrome
    from btfgen.recordings.folded import Folded
    from btfgen.recordings.tree import Tree

    return {"--format chrome": lambda: Chrome(_Nowhere()),
            "--format chrome --no-args": lambda: Chrome(_Nowhere(), args=False),
            "--format folded": lambda: Folded(_Nowhere()),
            "--tree": lambda: Tree(_Nowhere())}


def rate(path: Path, make_export) -> float:
    from btfgen.recordings import callwalk

    export = make_export()
    cpu = time.process_time()
    _walk, _cut, events, _lost = callwalk.walk(str(path), export)
    return events / (time.process_time() - cpu)


def jsonl_rate(path: Path, events: int) -> float:
    import contextlib
    import io

    from btfgen.recordings import replay

    cpu = time.process_time()
    with contextlib.redirect_stderr(io.StringIO()):
        replay.print_recording(str(path), _Nowhere(), as_json=True)
    return events / (time.process_time() - cpu)


def ring_spans(path: Path, events: int) -> tuple[list, list, str]:
    """The recording's first `events` events as the ring hands them to `btfgen trace`'s
    printer: spans of LIVE_SPAN records in the ring's layout (8-byte headers), their runs
    found by the reader's walk; (the spans, the decoders, the byte order)."""
    from btfgen.probe import ringspan
    from btfgen.recordings import grouping, replay
    from btfgen.recordings.reader import Reader

    records: list[bytes] = []
    with Reader(str(path), replay.word_sum(), grouping=grouping.fastest()) as r:
        functions, order = replay.functions(r), r.order
        for batch in r.batches():
            for data, starts, ends in batch.places(r.strides):
                records += [bytes(data[a:b]) for a, b in zip(starts, ends)]
            if len(records) >= events:
                break
    spans = []
    for at in range(0, min(events, len(records)), LIVE_SPAN):
        laid = ringspan.Span.of(records[at:at + LIVE_SPAN], sys.byteorder)
        span = ringspan.Span(laid.data, None, laid.records)
        span.runs  # the reader's walk, before the clock  # noqa: B018
        spans.append(span)
    return spans, functions, order


def live_rate(spans: list, functions: list, order: str, as_json: bool) -> float:
    """Events/s of the live printer as run.py wires it (output.Printer.records, lines batched,
    each line saying whose call it was), a span at a time."""
    from btfgen.probe import output

    printer = output.Printer(functions, order, _Nowhere(), who=True, as_json=as_json,
                             batch=True, flush=False)
    cpu = time.process_time()
    for span in spans:
        printer.records(span)
    return sum(s.records for s in spans) / (time.process_time() - cpu)


def sections_rate(path: Path) -> float:
    """Records/s through numpy's grouping into sections (each function and kind's records as
    one array: the columnar path's, `btfgen decode --format parquet`), over the same file."""
    from btfgen.recordings import grouping, replay
    from btfgen.recordings.reader import Reader

    with Reader(str(path), replay.word_sum(), grouping=grouping.NumpyGrouping) as r:
        cpu, n = time.process_time(), 0
        for batch in r.batches():
            n += sum(section[2] for section in batch.sections)
        return n / (time.process_time() - cpu)


def peak(path: Path, *options: str) -> int:
    """VmHWM (kB) of `btfgen decode` over `path`, its output to /dev/null (VmHWM, not
    ru_maxrss: Linux carries ru_maxrss over exec from the forking parent)."""
    code = ("import runpy, sys; sys.argv = ['btfgen', 'decode', '-q', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('btfgen', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print([l.split()[1] for l in open('/proc/self/status') "
            "if l.startswith('VmHWM:')][0], file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *options, str(path)], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=True)
    return int(proc.stderr.split()[-1])


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-exports-", dir=os.environ.get("TMPDIR")) \
            as tmp:
        path = Path(tmp) / "nested.btfrec"
        events = make(path, EVENTS)
        print(f"recording: {events} events (calls of scalars nested 3 deep on 3 threads), "
              f"{path.stat().st_size / 1e6:.0f} MB; best of {ROUNDS}, CPU time, load "
              f"{os.getloadavg()[0]:.1f}")
        from btfgen.probe import lines

        print("texts made by " + ("_btfgen_lines (C)" if lines.EXTENSION is not None else
                                  "lines.py's Python handlers"))
        jsonl = max(jsonl_rate(path, events) for _ in range(ROUNDS))
        print(f"{'--format jsonl (for scale)':32s} {jsonl:10,.0f} events/s")
        for name, make_export in _exports().items():
            best = max(rate(path, make_export) for _ in range(ROUNDS))
            print(f"{name:32s} {best:10,.0f} events/s  (x{best / jsonl:.2f} jsonl; target "
                  f">= 300,000)")
        best = max(sections_rate(path) for _ in range(ROUNDS))
        print(f"{'sections (the columnar path)':32s} {best:10,.0f} records/s")
        spans, functions, order = ring_spans(path, LIVE_EVENTS)
        for what, as_json in (("text", False), ("--json", True)):
            best = max(live_rate(spans, functions, order, as_json) for _ in range(ROUNDS))
            print(f"{'btfgen trace printing, ' + what:32s} {best:10,.0f} events/s  (spans of "
                  f"{LIVE_SPAN} records as the ring hands them over)")
        del spans
        for times in (1, 4):
            big = Path(tmp) / f"x{times}.btfrec"
            n = make(big, EVENTS * times)
            print(f"peak RSS, --format chrome over {n:>9} events ({big.stat().st_size / 1e6:5.0f}"
                  f" MB): {peak(big, '--format', 'chrome') / 1024:5.0f} MB; --tree: "
                  f"{peak(big, '--tree') / 1024:5.0f} MB")
            big.unlink()
        print(f"load {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
