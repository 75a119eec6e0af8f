#!/usr/bin/env python3
"""This tree against an older one, in one run: the figures issues 15, 19 and 37 set targets for.

  python3 benchmarks/bench_compare.py [--old-rev REV | --old DIR] [--runs N] [--pairs N]
      [--figures place,generate,dump,trace,uprobe,reader] [--jobs J] [--trace-glob GLOB]
      [--reader-records N] [BTF]

The older tree is REV of this repository (default: the commit before the one-`Target`
refactor, 3cf2915; issue 15's was 103e254), exported with `git archive` into a temporary
directory, or a directory given with --old. Figures 1 and 3 are taken for both trees in
alternation, best of --runs; figures 2 and 4 in --pairs pairs (default 9): each pair runs both
trees back to back, the older first in every other pair, and gives the ratio new/old of its
wall (and of its CPU). A busy moment on a shared machine then hits both runs of a pair alike,
and the median of the ratios (with their range) says more than a ratio of best or median times:

1. place every FUNC: `place_functions` over all FUNCs of a freshly opened BTF (type decoding
   included), wall and CPU, in a fresh process. Target <= 0.8 s.
2. whole-kernel generation, one process: `python3 -m btfgen BTF -o DIR -q -j 1` into an empty
   directory, wall and the child's CPU (--jobs: another -j; 0: btfgen's default). Targets: best
   wall <= 4.5 s; median ratio new/old <= 1.0 (issue 37).
3. `python3 -m btfgen dump BTF` against `bpftool btf dump file BTF format raw`, both to
   /dev/null, wall. Target: ratio <= 2.
4. whole-kernel trace build: `python3 -m btfgen trace --kernel --btf BTF --build DIR '*'`
   (--trace-glob: other functions) into an empty directory, wall and the children's CPU (clang
   included). Target: median ratio new/old <= 1.0. An older tree that refuses the build
   (3cf2915's trace held at most 4,096 functions) is said so, and the new tree's figure given
   alone (median of --pairs runs).

5. a uprobe trace's start-up: `python3 -m btfgen trace TRACEE traced -- 1`
   (benchmarks/tracee.c, built here with gcc -O2 -g; one call traced), the whole command from
   start to exit: the build, the load, the attach and the detach, wall and the children's CPU,
   in --pairs pairs. Needs root (BPF) and gcc. Target (issue 47): median ratio new/old <= 1.05.
6. the `--record` reader: each tree's own benchmarks/bench_reader.py (--reader-records records
   a round, 3 rounds), its `--record` row's records/s for the 6-argument records, in --pairs
   pairs; the ratio given is new/old of the time a record (old's rate / new's). Needs root.
   Target (issue 47): median ratio <= 1.05.

The generic decoder's cost per call is benchmarks/bench_generic.py (its BPF code did not change).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
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


def generate(tree: Path, btf: str, tmp: Path, jobs: int = 1) -> tuple[float, float]:
    out = tmp / "gen"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "btfgen", btf, "-o", str(out), "-q"]
    cmd += ["-j", str(jobs)] if jobs else []
    # From the tree's own directory, as `dump`: `python -m` puts it first on sys.path.
    return _child_cpu(lambda: subprocess.run(cmd, env=env, check=True, cwd=tree))


class Refused(Exception):
    """The tree refused the command (its first line of stderr says why)."""


def trace_build(tree: Path, btf: str, tmp: Path, glob: str) -> tuple[float, float]:
    out = tmp / "trace"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", btf, "--build",
           str(out), glob]
    done: list[subprocess.CompletedProcess] = []
    figures = _child_cpu(lambda: done.append(subprocess.run(
        cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    if done[0].returncode:
        lines = done[0].stderr.strip().splitlines()
        raise Refused(lines[-1] if lines else f"exit status {done[0].returncode}")
    return figures


def pairs(n: int, measure, trees: dict[str, Path]) -> dict[str, list[tuple[float, float]]]:
    """`measure(tree)` for both trees, `n` pairs back to back, the older first in pairs 0, 2, ..."""
    runs: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
    for i in range(n):
        for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
            runs[name].append(measure(trees[name]))
    return runs


def ratio_line(label: str, runs: dict[str, list[tuple[float, float]]],
               target: float = 1.0) -> str:
    """The median ratio new/old of the pairs' walls (and CPUs), the walls' range, each tree's
    median wall."""
    walls = [n[0] / o[0] for o, n in zip(runs["old"], runs["new"])]
    cpus = [n[1] / o[1] for o, n in zip(runs["old"], runs["new"]) if o[1]]
    med = statistics.median
    ok = "ok" if med(walls) <= target else "MISSED"
    line = (f"  {label:20} median ratio new/old wall {med(walls):.3f} (range "
            f"{min(walls):.3f}-{max(walls):.3f}, {len(walls)} pairs) [target <= {target}: {ok}]")
    if cpus:
        line += f"; cpu {med(cpus):.3f} ({min(cpus):.3f}-{max(cpus):.3f})"
    return line + (f"\n  {'':20} median wall old {med(w for w, _ in runs['old']):5.2f} s, new "
                   f"{med(w for w, _ in runs['new']):5.2f} s")


def build_tracee(tmp: Path) -> Path:
    exe = tmp / "tracee"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(exe), str(ROOT / "benchmarks" / "tracee.c")],
                   check=True)
    return exe


def uprobe_startup(tree: Path, tracee: Path) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "btfgen", "trace", str(tracee), "traced", "--", "1"]
    done: list[subprocess.CompletedProcess] = []
    figures = _child_cpu(lambda: done.append(subprocess.run(
        cmd, env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    if done[0].returncode or "traced(" not in done[0].stdout:
        raise Refused(f"exit {done[0].returncode}: {done[0].stderr.strip()[-300:]}")
    return figures


def record_reader(tree: Path, tmp: Path, records: int) -> tuple[float, float]:
    """(seconds a million records, 0) by the tree's own bench_reader's --record row: the time
    a record, so that a ratio new/old above 1 is slower, as the walls' are."""
    out = tmp / "reader.json"
    env = dict(os.environ, PYTHONPATH=str(tree))
    p = subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_reader.py"),
                        "--records", str(records), "--rounds", "3", "--json", str(out)],
                       env=env, cwd=tree, capture_output=True, text=True)
    if p.returncode or not out.exists():
        raise Refused(f"bench_reader: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    rate = json.loads(out.read_text())["rows"]["record"]["six"]["records_s"]
    return 1e6 / rate, 0.0


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
    ap.add_argument("--runs", type=int, default=3, help="best of RUNS: place, dump")
    ap.add_argument("--pairs", type=int, default=9, help="pairs: generate, trace")
    ap.add_argument("--figures", default=",".join(FIGURES),
                    help=f"which ({', '.join(FIGURES)}; default: all)")
    ap.add_argument("--jobs", type=int, default=1, metavar="J",
                    help="the generation's -j (0: btfgen's default)")
    ap.add_argument("--trace-glob", default="*", metavar="GLOB",
                    help="the kernel functions the trace build takes")
    ap.add_argument("--reader-records", type=int, default=200_000, metavar="N",
                    help="bench_reader's --records (figure reader)")
    args = ap.parse_args()
    chosen = args.figures.split(",")
    if not chosen or any(f not in FIGURES for f in chosen):
        ap.error(f"--figures: choose among {', '.join(FIGURES)}")
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
                if "place" in chosen:
                    figs.setdefault(("place", name), []).append(place(tree, args.btf, args.arch))
                if "dump" in chosen:
                    figs.setdefault(("dump", name), []).append(dump(tree, args.btf))
            if have_bpftool and "dump" in chosen:
                figs.setdefault(("dump", "bpftool"), []).append(dump(None, args.btf))
        gen = trace = None
        if "generate" in chosen:
            gen = pairs(args.pairs, lambda t: generate(t, args.btf, tmp, args.jobs), trees)
        if "trace" in chosen:
            trace = _trace_figures(args, tmp, trees)
        startup = reader = None
        if "uprobe" in chosen:
            tracee = build_tracee(tmp)
            startup = _paired_or_said("uprobe trace start-up", args.pairs,
                                      lambda t: uprobe_startup(t, tracee), trees, 1.05)
        if "reader" in chosen:
            reader = _paired_or_said("--record reader, time a record", args.pairs,
                                     lambda t: record_reader(t, tmp, args.reader_records),
                                     trees, 1.05)
    print(f"{args.btf}, arch {args.arch}; old = {args.old or args.old_rev}, new = this tree; "
          f"best of {args.runs} or {args.pairs} pairs, alternating; load "
          f"{os.getloadavg()[0]:.2f} on {len(os.sched_getaffinity(0))} CPUs after")
    if "place" in chosen:
        _best_line("place every FUNC", figs[("place", "old")], figs[("place", "new")], 0.8)
    if gen is not None:
        jobs = f"-j {args.jobs}" if args.jobs else "-j default"
        _best_line(f"whole kernel, {jobs}", gen["old"], gen["new"], 4.5)
        print(ratio_line(f"whole kernel, {jobs}", gen))
    if trace is not None:
        print(trace)
    for line in (startup, reader):
        if line is not None:
            print(line)
    if "dump" in chosen:
        _dump_line(figs, have_bpftool)
    return 0


FIGURES = ("place", "generate", "dump", "trace", "uprobe", "reader")


def _paired_or_said(label: str, n: int, measure, trees: dict[str, Path], target: float) -> str:
    try:
        runs = pairs(n, measure, trees)
    except Refused as e:
        return f"  {label:20} not measured: {e}"
    return ratio_line(label, runs, target)


def _best_line(label: str, old: list, new: list, target: float) -> None:
    (ow, oc), (nw, nc) = best(old), best(new)
    print(f"  {label:20} old wall {ow:5.2f} s cpu {oc:5.2f} s | new wall {nw:5.2f} s "
          f"cpu {nc:5.2f} s [target <= {target} s: {'ok' if nw <= target else 'MISSED'}]")


def _trace_figures(args, tmp: Path, trees: dict[str, Path]) -> str:
    label = f"trace build {args.trace_glob!r}"
    try:
        trace_build(trees["new"], args.btf, tmp, args.trace_glob)
    except Refused as e:
        return f"  {label:20} this tree refuses it: {e}"
    try:
        trace_build(trees["old"], args.btf, tmp, args.trace_glob)
    except Refused as e:
        walls = [trace_build(trees["new"], args.btf, tmp, args.trace_glob)
                 for _ in range(args.pairs)]
        med = statistics.median
        return (f"  {label:20} the old tree refuses it ({e}): new alone, median of "
                f"{len(walls)}: wall {med(w for w, _ in walls):5.2f} s, cpu "
                f"{med(c for _, c in walls):5.2f} s")
    runs = pairs(args.pairs, lambda t: trace_build(t, args.btf, tmp, args.trace_glob), trees)
    return ratio_line(label, runs)


def _dump_line(figs: dict, have_bpftool: bool) -> None:
    (ow, oc), (nw, nc) = best(figs[("dump", "old")]), best(figs[("dump", "new")])
    line = f"  {'btfgen dump':20} old wall {ow:5.2f} s cpu {oc:5.2f} s | new wall {nw:5.2f} s " \
           f"cpu {nc:5.2f} s"
    if have_bpftool:
        bw, bc = best(figs[("dump", "bpftool")])
        line += (f"; bpftool wall {bw:5.2f} s cpu {bc:5.2f} s: ratio old {ow / bw:.1f}x, new "
                 f"{nw / bw:.1f}x [target <= 2x: {'ok' if nw <= 2 * bw else 'MISSED'}]")
    print(line)


if __name__ == "__main__":
    sys.exit(main())
