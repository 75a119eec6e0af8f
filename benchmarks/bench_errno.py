#!/usr/bin/env python3
"""What the errno attribution of a user trace (trace.bpf.c's raw_syscalls:sys_exit program,
issue 48 item 2) costs the machine's system calls: every system call's exit runs it while a
user trace prints or records exits, in every process, not only the traced one.

  sudo python3 benchmarks/bench_errno.py [--calls N] [--rounds R] [--json FILE]

benchmarks/syscall_loop.c times N getppid system calls in a loop. Each round, in turn:
  - none:      no tracer; the loop alone;
  - errno:     `btfgen trace` (in this process, printing to /dev/null) of syscall_loop's
               `mark`, the errno program attached (the default): the loop in a process it
               does not trace, while it traces; then the loop in the traced process, after
               its `mark` was entered once (its thread has a slot the program writes at every
               system call's exit);
  - no errno:  the same with the errno program not loaded (Run.errnos_wanted patched False).
The untraced loop runs while the traced process waits (it has made its READY file and polls
for GO), so both loops run while the probes are attached. Figures: ns a system call, medians of
the rounds, what each adds to `none`'s, and what the errno program adds (errno less no errno:
the tracer's own presence, its reader and the CPUs it takes on a shared machine, apart). A
round during which another system call program was loaded (another user's trace: `bpftool prog
show`, looked at before and after each variant) is left out and counted. Then one more errno
round with the kernel's bpf_stats on (not timed: the stats add their own cost to every run):
the errno program's own time a run, read just before it is detached (its runs: the two loops'
system calls, a miss of the map lookup in the untraced one and a hit and a write in the traced
one, and the machine's others); what the program's attachment adds beyond it is the kernel's
(a system call tracepoint with a probe sends every thread's system calls through the slow
path), not the program's. Needs root, gcc and clang (bpftool to see other programs).
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
sys.path.insert(0, str(ROOT))
VARIANTS = ("none", "errno", "no errno")
STATS = "/proc/sys/kernel/bpf_stats_enabled"


def _foreign() -> int:
    """System call programs loaded now (by names: ours, bpftrace's, bcc's), -1 if unknown."""
    try:
        proc = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                              text=True, timeout=60)
        progs = json.loads(proc.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return -1
    return sum(1 for p in progs if p.get("type") in ("raw_tracepoint", "tracepoint", "tracing")
               and any(w in p.get("name", "") for w in ("sys_e", "syscall")))


def _ns(result: Path) -> float:
    n, took = result.read_text().split()
    return int(took) / int(n)


def _untraced_after(exe: Path, work: Path, calls: int) -> subprocess.Popen:
    """The untraced loop, started by this process (so not a child of the traced one: never
    followed), once the traced process says the probes are in (READY); then GO."""
    script = (f'while [ ! -e "$1" ]; do sleep 0.01; done; "$2" {calls} "$3"; status=$?; '
              f': > "$4"; exit $status')
    return subprocess.Popen(["/bin/sh", "-c", script, "sh", str(work / "READY"), str(exe),
                             str(work / "untraced"), str(work / "GO")])


def _traced_round(run, directory: Path, work: Path, exe: Path, calls: int,
                  errno_program: bool) -> tuple[float, float]:
    """(untraced ns, traced ns) a system call, with or without the errno program."""
    for name in ("READY", "GO", "untraced", "traced"):
        (work / name).unlink(missing_ok=True)
    wanted = run.Run.errnos_wanted
    if not errno_program:
        run.Run.errnos_wanted = lambda self: False
    helper = _untraced_after(exe, work, calls)
    try:
        with open(os.devnull, "w") as out:
            status = run.run(directory, run.Options(
                [str(calls), str(work / "traced"), str(work / "READY"), str(work / "GO")]),
                out=out)
    finally:
        run.Run.errnos_wanted = wanted
        if helper.wait(timeout=600):
            raise SystemExit(f"the untraced loop failed ({helper.returncode})")
    if status:
        raise SystemExit(f"btfgen trace: status {status}")
    return _ns(work / "untraced"), _ns(work / "traced")


def _program_stats(run, directory: Path, work: Path, exe: Path, calls: int) -> tuple:
    """(ns a run, runs) of the errno program over one errno round, bpf_stats on."""
    from btfgen.probe import syscall
    from btfgen.probe.libbpf import libbpf

    detach, got = run.Run.detach, []

    def measured(self):
        if self.probes_from is not None and not got:  # attached still (detach runs twice)
            fd = libbpf().bpf_program__fd(self.obj.program("syscall_exit"))
            info = syscall.info(self.manifest.bpf_syscall, fd, syscall.PROG_INFO_SIZE)
            at = syscall.PROG_RECURSION_MISSES  # run_time_ns and run_cnt are just before it
            got.extend(int.from_bytes(info[at - k:at - k + 8], syscall.BYTE_ORDER)
                       for k in (16, 8))
        detach(self)

    with open(STATS) as f:
        before = f.read().strip()
    run.Run.detach = measured
    try:
        with open(STATS, "w") as f:
            f.write("1")
        _traced_round(run, directory, work, exe, calls, True)
    finally:
        run.Run.detach = detach
        with open(STATS, "w") as f:
            f.write(before)
    ns, count = got
    return ns / max(count, 1), count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    from btfgen.probe import run
    from btfgen.trace import command

    work = Path(tempfile.mkdtemp(prefix="bench_errno."))
    exe = work / "syscall_loop"
    subprocess.run(["gcc", "-O2", "-g", str(ROOT / "benchmarks" / "syscall_loop.c"), "-o",
                    str(exe)], check=True)
    directory = work / "dir"
    if command.main(["--build", str(directory), str(exe), "mark"]):
        return 1
    untraced: dict[str, list[float]] = {v: [] for v in VARIANTS}
    traced: dict[str, list[float]] = {v: [] for v in VARIANTS[1:]}
    left_out = 0
    for r in range(args.rounds):
        order = VARIANTS[r % 3:] + VARIANTS[:r % 3]  # alternating: no variant always first
        got: dict[str, tuple] = {}
        others = _foreign()
        for variant in order:
            if variant == "none":
                subprocess.run([str(exe), str(args.calls), str(work / "untraced")], check=True)
                got[variant] = (_ns(work / "untraced"), None)
            else:
                got[variant] = _traced_round(run, directory, work, exe, args.calls,
                                             variant == "errno")
            others = max(others, _foreign())
        if others > 0:
            left_out += 1
            continue
        for variant, (u, t) in got.items():
            untraced[variant].append(u)
            if t is not None:
                traced[variant].append(t)
    if not untraced["none"]:
        print(f"every round had another system call program beside it ({left_out})")
        return 1
    own, runs = _program_stats(run, directory, work, exe, args.calls)
    base = statistics.median(untraced["none"])
    kept = len(untraced["none"])
    print(f"{args.calls:,} getppid system calls a loop, medians of {kept} rounds "
          f"({left_out} left out: another system call program was loaded; ns a system call; "
          f"added: beside no tracer)")
    print("| tracer | untraced process | added | traced process | added |")
    print("|---|---|---|---|---|")
    figures = {}
    for variant in VARIANTS:
        u = statistics.median(untraced[variant])
        t = statistics.median(traced[variant]) if variant in traced else None
        figures[variant] = {"untraced_ns": u, "traced_ns": t,
                            "untraced_rounds": untraced[variant],
                            "traced_rounds": traced.get(variant)}
        label = {"none": "none", "errno": "btfgen trace, errno program",
                 "no errno": "btfgen trace, no errno program"}[variant]
        shown = ("–", "–") if t is None else (f"{t:,.0f}", f"{t - base:+,.0f}")
        print(f"| {label} | {u:,.0f} | {u - base:+,.0f} | {shown[0]} | {shown[1]} |")
    adds = [statistics.median(d["errno"]) - statistics.median(d["no errno"])
            for d in (untraced, traced)]
    print(f"the errno program adds (errno less no errno): {adds[0]:+,.0f} ns a system call in "
          f"the untraced process, {adds[1]:+,.0f} in the traced one")
    print(f"the errno program's own time: {own:,.0f} ns a run over {runs:,} runs (bpf_stats, "
          f"one more errno round)")
    if args.json:
        args.json.write_text(json.dumps({"calls": args.calls, "rounds": args.rounds,
                                         "figures": figures, "left_out": left_out,
                                         "errno_adds_ns": adds, "program_ns_a_run": own,
                                         "program_runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
