"""Benchmark: `btfgen check` (DWARF against btfgen's placement) on a big vmlinux.

    python3 benchmarks/bench_dwarf.py VMLINUX --btf BTF [--arch i386] [--named 100] [--whole]

Prints the wall time and peak RSS of checking --named functions (a seeded sample: only their
compile units are read, found through .debug_aranges; target <= 3 s, interpreter start
included) and, with --whole, of checking every function (target <= 120 s on this 2-CPU
machine). Each run is a fresh process, as a user would run it.
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from btfgen.btf.reader import open_btf  # noqa: E402


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (MB) of the child, its stdout's first line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr.strip())
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    return wall, max(peak, before) // 1024, first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("vmlinux")
    ap.add_argument("--btf", required=True)
    ap.add_argument("--arch")
    ap.add_argument("--named", type=int, default=100)
    ap.add_argument("--whole", action="store_true")
    args = ap.parse_args()
    base = [sys.executable, "-m", "btfgen", "check", args.vmlinux, "--btf", args.btf]
    if args.arch:
        base += ["--arch", args.arch]
    names = sorted({f.name for f in open_btf(args.btf).funcs()})
    sample = random.Random(7).sample(names, args.named)
    wall, rss, line = timed(base + [a for n in sample for a in ("--func", n)])
    print(f"{args.named} named functions: {wall:.2f} s, peak RSS {rss} MB (target <= 3 s)")
    print(f"  {line}")
    if args.whole:
        wall, rss, line = timed(base)
        print(f"every function: {wall:.1f} s, peak RSS {rss} MB (target <= 120 s)")
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
