#!/usr/bin/env python3
"""This tree against an older one, in one run: the figures issues 15 and 19 set targets for.

  python3 benchmarks/bench_compare.py [--old-rev REV | --old DIR] [--runs N] [BTF]

The older tree is REV of this repository (default: the commit before the one-`Target`
refactor, 3cf2915; issue 15's was 103e254), exported with `git archive` into a temporary directory, or a directory given with
--old. Each figure is taken for both trees in alternation, best of --runs, so a busy moment on a
shared machine hits both alike:

1. place every FUNC: `place_functions` over all FUNCs of a freshly opened BTF (type decoding
   included), wall and CPU, in a fresh process. Target <= 0.8 s.
2. whole-kernel generation, one process: `python3 -m btfgen BTF -o DIR -q -j 1` into an empty
   directory, wall and the child's CPU. Target <= 4.5 s, and no slower than the older tree.
3. `python3 -m btfgen dump BTF` against `bpftool btf dump file BTF format raw`, both to
   /dev/null, wall. Target: ratio <= 2.

The generic decoder's cost per call is benchmarks/bench_generic.py (its BPF code did not change).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PLACE = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from btfgen.abi.arches import load_arch
from btfgen.btf.reader import open_btf
from btfgen.place import place_functions
btf = open_btf(sys.argv[2])
funcs = list(btf.funcs())
conv = load_arch(sys.argv[3], btf.pointer_size)
w, c = time.perf_counter(), time.process_time()
place_functions(btf, conv, funcs)
print(time.perf_counter() - w, time.process_time() - c)
"""


def _child_cpu(run) -> tuple[float, float]:
    """(wall, CPU of the children) of `run()`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w = time.perf_counter()
    run()
    wall = time.perf_counter() - w
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def place(tree: Path, btf: str, arch: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _PLACE, str(tree), btf, arch], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def generate(tree: Path, btf: str, tmp: Path) -> tuple[float, float]:
    out = tmp / "gen"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    return _child_cpu(lambda: subprocess.run(
        [sys.executable, "-m", "btfgen", btf, "-o", str(out), "-q", "-j", "1"], env=env,
        check=True, cwd=tmp))


def dump(tree: Path | None, btf: str) -> tuple[float, float]:
    if tree is None:
        cmd = ["bpftool", "btf", "dump", "file", btf, "format", "raw"]
        env = None
    else:
        cmd = [sys.executable, "-m", "btfgen", "dump", btf]
        env = dict(os.environ, PYTHONPATH=str(tree))
    # From the tree's own directory: `python -m` puts the working directory first on sys.path,
    # ahead of PYTHONPATH, so from anywhere else inside a checkout it would run that checkout.
    with open(os.devnull, "wb") as null:
        return _child_cpu(lambda: subprocess.run(cmd, stdout=null, env=env, check=True,
                                                 cwd=tree))


def best(results: list[tuple[float, float]]) -> tuple[float, float]:
    return min(results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("btf", nargs="?", default="/sys/kernel/btf/vmlinux")
    ap.add_argument("--old", metavar="DIR", help="the older tree (default: --old-rev exported)")
    ap.add_argument("--old-rev", default="3cf2915", metavar="REV")
    ap.add_argument("--arch", default=os.uname().machine)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not Path(args.btf).exists():
        print(f"no {args.btf}: nothing to measure")
        return 0
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        old = Path(args.old) if args.old else tmp / "old"
        if not args.old:
            old.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.old_rev],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        trees = {"old": old, "new": ROOT}
        figs: dict[tuple[str, str], list] = {}
        have_bpftool = shutil.which("bpftool") is not None
        for _ in range(args.runs):
            for name, tree in trees.items():
                figs.setdefault(("place", name), []).append(place(tree, args.btf, args.arch))
                figs.setdefault(("generate", name), []).append(generate(tree, args.btf, tmp))
                figs.setdefault(("dump", name), []).append(dump(tree, args.btf))
            if have_bpftool:
                figs.setdefault(("dump", "bpftool"), []).append(dump(None, args.btf))
    print(f"{args.btf}, arch {args.arch}; old = {args.old or args.old_rev}, new = this tree; "
          f"best of {args.runs}, alternating; load {os.getloadavg()[0]:.2f} on "
          f"{len(os.sched_getaffinity(0))} CPUs after")
    for what, target in (("place", 0.8), ("generate", 4.5)):
        (ow, oc), (nw, nc) = best(figs[(what, "old")]), best(figs[(what, "new")])
        label = {"place": "place every FUNC", "generate": "whole kernel, -j 1"}[what]
        print(f"  {label:20} old wall {ow:5.2f} s cpu {oc:5.2f} s | new wall {nw:5.2f} s "
              f"cpu {nc:5.2f} s [target <= {target} s: {'ok' if nw <= target else 'MISSED'}]")
    (ow, oc), (nw, nc) = best(figs[("dump", "old")]), best(figs[("dump", "new")])
    line = f"  {'btfgen dump':20} old wall {ow:5.2f} s cpu {oc:5.2f} s | new wall {nw:5.2f} s " \
           f"cpu {nc:5.2f} s"
    if have_bpftool:
        bw, bc = best(figs[("dump", "bpftool")])
        line += (f"; bpftool wall {bw:5.2f} s cpu {bc:5.2f} s: ratio old {ow / bw:.1f}x, new "
                 f"{nw / bw:.1f}x [target <= 2x: {'ok' if nw <= 2 * bw else 'MISSED'}]")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
