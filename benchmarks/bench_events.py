#!/usr/bin/env python3
"""What one `btfgen trace` event costs the BPF side, and the bytes it takes of the ring.

  sudo python3 benchmarks/bench_events.py [--calls N] [--rounds R] [--attach MODE] [--repo DIR]

Traces benchmarks/tracee.c's `traced` (six longs and a string, the bench_tracers program) for
N calls with `--record`, in this process, and reads the kernel's own accounting of each BPF
program (bpf_stats: run time and run count, enabled for the run and put back after) just before
the probes are detached: the nanoseconds a program run takes, the uprobe's trap and the reader
apart. Then the bytes each event takes of the ring (spec_format.event_size, with the ring's
8-byte header). Medians of the rounds. `--repo`: the btfgen checkout to measure (another
revision, for a before and after). Needs root, gcc, pahole and bpftool.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATS = "/proc/sys/kernel/bpf_stats_enabled"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--attach", default="multi", help="single, multi or session")
    ap.add_argument("--repo", type=Path, default=ROOT)
    args = ap.parse_args()
    sys.path.insert(0, str(args.repo))
    from btfgen.probe import run
    from btfgen.trace import command

    work = Path(tempfile.mkdtemp(prefix="bench_events."))
    exe = work / "tracee"
    subprocess.run(["gcc", "-O2", "-g", str(ROOT / "benchmarks" / "tracee.c"), "-o", str(exe)],
                   check=True)
    directory = work / "dir"
    if command.main(["--build", str(directory), str(exe), "traced"]):
        return 1
    per_run: dict[str, list[float]] = {}
    detach = run.Run.detach

    def measured(self):
        if self.probes_from is not None:  # the function probes still attached: their
            # programs' counts are whole
            shown = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                                   text=True, check=True).stdout
            for p in json.loads(shown):
                if p.get("name", "").startswith("trace_") and p.get("run_cnt"):
                    per_run.setdefault(p["name"], []).append(p["run_time_ns"] / p["run_cnt"])
        detach(self)

    run.Run.detach = measured
    with open(STATS) as f:
        before = f.read().strip()
    try:
        with open(STATS, "w") as f:
            f.write("1")
        for _ in range(args.rounds):
            with open(os.devnull, "w") as out:
                status = run.run(directory, run.Options([str(args.calls)], attach=args.attach,
                                                        record=str(work / "rec")), out=out)
            if status:
                return status
    finally:
        with open(STATS, "w") as f:
            f.write(before)
    print(f"{args.calls:,} calls of traced(), --attach {args.attach}, median of {args.rounds}:")
    for name, ns in sorted(per_run.items()):
        print(f"  {name}: {statistics.median(ns):,.0f} ns a run")
    sys.path.insert(0, str(directory))
    from btfgen.probe import manifest, spec_format

    decoders = manifest.load_decoders(directory, manifest.load_manifest(directory))
    desc = decoders._descriptor("traced")[0]
    if hasattr(spec_format, "event_size"):
        sizes = [spec_format.event_size(desc, k) + 8 for k in (0, 1)]
        print(f"  ring bytes an event (its 8-byte header with it): entry {sizes[0]}, "
              f"exit {sizes[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
