#!/usr/bin/env python3
"""`btfgen trace --count / --latency`: what a counted (or timed) call costs beside an empty
program on the same link, on one user program, and the whole kernel counted in the amd64 guest.

  sudo python3 benchmarks/bench_summary.py [--calls N] [--rounds R] [--json FILE]

The program is bench_tracers.py's (benchmarks/tracee.c: `traced(...)` called N times in a loop,
its loop's wall time on stderr). Each row runs it under one tracer; the figure is the time the
tracer adds to a call (the loop traced minus the loop alone, over N), the median of the rounds:

- an empty BPF program on one uprobe.session link, returning 1 (the kernel then skips the
  exit: what --count asks of a call), and returning 0 (entry and exit: what --latency asks);
- `btfgen trace --run DIR --count` (DIR built once with --build), `--count --by comm`,
  `--latency`, and `--latency --by 'traced: a'` (a key from the decoded record, its time and key
  kept on the per-thread stack instead of the session cookie), each printing its table at the
  end; the counts are checked against N;
- `--count` and `--latency` on a pair of uprobe_multi links (`--attach multi`) and on single
  uprobes (`--attach single`): a count attaches the entry alone there (--latency both).
  `--rows multi` runs only these (and the empty programs), to set them beside an older tree's
  (PYTHONPATH=OLD_TREE: the tracer is run as `python -m btfgen`).
- `--count --by ustack` and `--latency --by ustack`: each call's entry sent with its stack (a
  4 KiB slice of the user stack and the registers) and counted by the tracer, which unwinds
  and names it (stack_summary.py). The reader cannot keep up with a tight loop, so these rows
  run with a ring of 256 MiB (`--ring-size`), room for every event of `--calls 20000`: the
  figure is then the traced call's own cost, and the tracer's CPU (user and system, start-up
  included) is given over the calls. The counts, plus the records said lost, are checked
  against N. `--rows stack` runs only these, `--count` without a key, the empty programs and
  bpftrace's.
- bpftrace (where installed) on the same function, `-c` the program, `/pid == cpid/`:
  `@[ustack] = count()` (its stack id made in the kernel, the frames named at the end) beside
  `@ = count()`; the counts are checked against N.

The whole-kernel row is tests/live_kernel/test_summary_kernel.py's unstable-amd64 run, read
from the live cache when it is there (that test writes it): calls counted over the tracing
time, the rate the kernel sustained under QEMU's TCG with every function counted and timed.
Needs root (BPF, uprobes), gcc, clang and pahole.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_tracers import TRACEE, TRACEE_LINE, bpftrace_version, missing_tools  # noqa: E402

from btfgen.probe import bpf_object, features, tracefs  # noqa: E402
from btfgen.trace import symbols  # noqa: E402

EMPTY = """\
#define SEC(name) __attribute__((section(name), used))
SEC("uprobe") int empty(void *ctx) { return RET; }
char LICENSE[] SEC("license") = "GPL";
"""
# label: (build options, run options)
ROWS = {
    "count": (["--count"], []),
    "count by comm": (["--count", "--by", "comm"], []),
    "latency": (["--latency"], []),
    "latency by an argument": (["--latency", "--by", "traced: a"], []),
    "count, --attach multi": (["--count"], ["--attach", "multi"]),
    "latency, --attach multi": (["--latency"], ["--attach", "multi"]),
    "count, --attach single": (["--count"], ["--attach", "single"]),
    "latency, --attach single": (["--latency"], ["--attach", "single"]),
    "count by ustack": (["--count", "--by", "ustack"], ["--ring-size", "256"]),
    "latency by ustack": (["--latency", "--by", "ustack"], ["--ring-size", "256"]),
}
# label: bpftrace's action on `traced`'s entry
BPFTRACE_ROWS = {
    "bpftrace, @ = count()": "@ = count();",
    "bpftrace, @[ustack] = count()": "@[ustack] = count();",
}
CLANG = shutil.which("clang-19") or shutil.which("clang") or "clang"
DEFAULT_CALLS = 200_000
DEFAULT_ROUNDS = 3
LIVE_RESULT = Path.home() / ".cache" / "btfgen-live" / "results" / "summary-unstable-amd64.txt"


def loop_ns(stderr: str, calls: int) -> int:
    m = TRACEE_LINE.search(stderr)
    if not m or int(m.group(1)) != calls:
        raise SystemExit(f"bench_summary: no tracee line in:\n{stderr[-2000:]}")
    return int(m.group(2))


def alone(exe: Path, calls: int) -> int:
    proc = subprocess.run([str(exe), str(calls)], capture_output=True, text=True, check=True)
    return loop_ns(proc.stderr, calls)


def empty(exe: Path, obj_path: Path, offset: int, calls: int, syscall: int) -> int:
    """The loop under the empty program, on one uprobe.session link on `traced` in every
    process that runs `exe` (only the one this runs does)."""
    with bpf_object.BpfObject(str(obj_path), bpf_syscall=syscall) as obj:
        obj.expect_uprobe_multi("empty", session=True)
        obj.load()
        obj.attach_uprobe_multi("empty", str(exe), ["traced"], [0], offsets=[offset],
                                session=True)
        return alone(exe, calls)


def traced(exe: Path, directory: Path, args: list[str], calls: int) -> tuple[int, str, str,
                                                                             float]:
    """The loop's ns, the tracer's stdout and stderr, and its CPU seconds (user and system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "btfgen", "trace", "--run", str(directory),
                           *args, "--", str(calls)], capture_output=True, text=True,
                          check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return loop_ns(proc.stderr, calls), proc.stdout, proc.stderr, cpu


def bpftrace_counted(exe: Path, action: str, calls: int) -> tuple[int, str, float]:
    """The loop's ns under bpftrace, its printed maps, and its CPU seconds (user and system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(["bpftrace", "-e", f"uprobe:{exe}:traced /pid == cpid/ {{ {action} }}",
                           "-c", f"{exe} {calls}"], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return loop_ns(proc.stderr, calls), proc.stdout, cpu


def map_counted(out: str) -> int:
    """A bpftrace count map's calls: `@: N`, or each key's `]: N`."""
    return sum(int(n) for n in re.findall(r"^(?:@|\]): (\d+)$", out, re.M))


def stack_counted(out: str, err: str) -> int:
    """--by ustack's calls: its rows' counts (COUNT under FUNC) or histograms' counts, and the
    records said lost."""
    rows = re.findall(r"^traced\s+(\d+)$", out, re.M) or re.findall(r"count: (\d+)$", out, re.M)
    lost = re.search(r"^btfgen trace: (\d+) records lost \(ring", err, re.M)
    return sum(int(n) for n in rows) + (int(lost.group(1)) if lost else 0)


def whole_kernel() -> dict | None:
    """The live test's figures: functions, calls counted, seconds traced."""
    if not LIVE_RESULT.exists():
        return None
    text = LIVE_RESULT.read_text()
    head = re.match(r"(\S+), (\d+) functions", text)
    calls = re.search(r"^calls (\d+)$", text, re.M)
    tracing = re.search(r"time: run: tracing: ([\d.]+) s", text)
    attach = re.search(r"time: run: attach: ([\d.]+) s", text)
    missed = re.search(r"^btfgen_trace: (\d+) calls missed by the kernel \(", text, re.M)
    if not (head and calls and tracing):
        return None
    return {"kernel": head.group(1), "functions": int(head.group(2)),
            "calls": int(calls.group(1)), "tracing_s": float(tracing.group(1)),
            "attach_s": float(attach.group(1)) if attach else None,
            "calls_per_s": int(calls.group(1)) / float(tracing.group(1)),
            "missed": int(missed.group(1)) if missed else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--rows", choices=("all", "multi", "stack"), default="all")
    args = p.parse_args()
    rows_asked = {k: v for k, v in ROWS.items()
                  if args.rows == "all" or (args.rows == "multi" and "--attach" in k)
                  or (args.rows == "stack" and ("ustack" in k or k == "count"))}
    bpftrace = {} if args.rows == "multi" or not bpftrace_version() else BPFTRACE_ROWS
    if missing := missing_tools():
        print(f"bench_summary: not installed: {', '.join(missing)}", file=sys.stderr)
        return 2
    if reason := features.bpf_programs().why:
        print(f"bench_summary: BPF unavailable: {reason}", file=sys.stderr)
        return 2
    tracefs.mount_tracefs()
    calls = args.calls
    with tempfile.TemporaryDirectory(prefix="bench-summary-") as tmp:
        t = Path(tmp)
        exe = t / "tracee"
        subprocess.run(["gcc", "-O2", "-g", str(TRACEE), "-o", str(exe)], check=True)
        offset = symbols.functions(str(exe), ["traced"])[0].offset
        objects = {}
        for ret, label in ((1, "empty program, entry only"), (0, "empty program, entry and exit")):
            src = t / f"empty{ret}.bpf.c"
            src.write_text(EMPTY.replace("RET", str(ret)))
            objects[label] = t / f"empty{ret}.bpf.o"
            subprocess.run([CLANG, "-O2", "-target", "bpf", "-c", str(src), "-o",
                            str(objects[label])], check=True)
        dirs = {}
        for label, (opts, _) in rows_asked.items():
            dirs[label] = t / re.sub(r"[^A-Za-z0-9]+", "-", label)
            subprocess.run([sys.executable, "-m", "btfgen", "trace", "--build", str(dirs[label]),
                            *opts, str(exe), "traced"], check=True, capture_output=True)
        syscall = json.loads((next(iter(dirs.values())) / "trace.json").read_text())[
            "bpf_syscall"]
        runs: dict[str, list[int]] = {"alone": []}
        cpus: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            runs["alone"].append(alone(exe, calls))
            for label, obj in objects.items():
                runs.setdefault(label, []).append(empty(exe, obj, offset, calls, syscall))
            for label, directory in dirs.items():
                took, out, err, cpu = traced(exe, directory, ROWS[label][1], calls)
                if "ustack" in label:
                    if stack_counted(out, err) != calls:
                        raise SystemExit(f"bench_summary: {label}: not {calls} calls:\n{out}"
                                         f"{err}")
                elif label.startswith("count") and not re.search(rf"\b{calls}$", out, re.M):
                    raise SystemExit(f"bench_summary: {label}: not {calls} calls:\n{out}")
                runs.setdefault(label, []).append(took)
                cpus.setdefault(label, []).append(cpu)
            for label, action in bpftrace.items():
                took, out, cpu = bpftrace_counted(exe, action, calls)
                if map_counted(out) != calls:
                    raise SystemExit(f"bench_summary: {label}: not {calls} calls:\n{out}")
                runs.setdefault(label, []).append(took)
                cpus.setdefault(label, []).append(cpu)
    base = statistics.median(runs["alone"]) / calls
    best = min(runs["alone"]) / calls
    rows = [{"tracer": label, "ns_per_call": statistics.median(v) / calls,
             "added_ns": statistics.median(v) / calls - base,
             "best_added_ns": min(v) / calls - best,
             "tracer_cpu_us": (statistics.median(cpus[label]) / calls * 1e6
                               if label in cpus else None)} for label, v in runs.items()]
    print(f"| {calls:,} calls of traced(), {args.rounds} rounds | ns a call (median) | added "
          "(median) | added (best) | tracer's CPU a call, us (median, start-up included) |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        cpu = "" if row["tracer_cpu_us"] is None else f"{row['tracer_cpu_us']:,.1f}"
        print(f"| {row['tracer']} | {row['ns_per_call']:,.0f} | {row['added_ns']:,.0f} | "
              f"{row['best_added_ns']:,.0f} | {cpu} |")
    kernel = whole_kernel()
    if kernel:
        print(f"\nwhole kernel ({kernel['kernel']}, {kernel['functions']:,} functions, "
              f"counted and timed): {kernel['calls']:,} calls in {kernel['tracing_s']:.1f} s "
              f"traced, {kernel['calls_per_s']:,.0f} calls/s; none sent, so none lost; "
              f"{kernel['missed'] or 0:,} calls the kernel did not run the program for")
    if args.json:
        Path(args.json).write_text(json.dumps({"calls": calls, "rows": rows,
                                               "whole_kernel": kernel}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
