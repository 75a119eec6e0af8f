#!/usr/bin/env python3
"""What the sleepable uprobe programs (issue 48, item 4: user memory faulted in) cost a traced
call beside the non-sleepable ones, in each user attach mode the kernel takes them in.

  sudo python3 benchmarks/bench_sleepable.py [--calls N] [--rounds R] [--json FILE]

Traces benchmarks/tracee.c's `traced` (six longs and a string: the bench_tracers program, whose
string is resident) for N calls with `--record`, in this process, once with the sleepable
programs and once with --no-sleepable, in each attach mode (session, multi, single), the runs
alternating round after round. Per mode and kind: the BPF programs' own time a run (the kernel's
bpf_stats, enabled for the runs and put back after, read just before the probes are detached:
the uprobe's trap and the reader apart), and what the tracing adds to the program's loop a call
(its loop time traced minus alone, over N: the trap, the program, and the kernel's entry into a
sleepable program, rcu_read_lock_trace where a non-sleepable one takes rcu_read_lock). Medians of
the rounds. Needs root, gcc and clang.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STATS = "/proc/sys/kernel/bpf_stats_enabled"
MODES = ("session", "multi", "single")
TRACEE_LINE = re.compile(rb"^tracee: (\d+) calls (\d+) ns", re.M)


def _loop_ns(stderr: bytes) -> int:
    found = TRACEE_LINE.search(stderr)
    if not found:
        raise SystemExit(f"no tracee line in: {stderr.decode(errors='replace')[-500:]}")
    return int(found.group(2))


def _traced(run, directory: Path, work: Path, calls: int, mode: str,
            sleepable: bool, per_run: dict) -> int:
    """One traced run: the loop's ns, its programs' ns a run added to `per_run`."""
    from btfgen.probe import run as run_module
    from btfgen.probe import syscall
    from btfgen.probe.libbpf import libbpf

    detach = run_module.Run.detach

    def measured(self):
        if self.probes_from is not None:  # the probes still attached: their counts are whole
            for name in self.mode.programs:  # this run's own (others may trace beside it)
                fd = libbpf().bpf_program__fd(self.obj.program(name))
                got = syscall.info(self.manifest.bpf_syscall, fd, syscall.PROG_INFO_SIZE)
                # bpf_prog_info's run_time_ns and run_cnt, just before recursion_misses
                at = syscall.PROG_RECURSION_MISSES
                ns, count = (int.from_bytes(got[at - k:at - k + 8], syscall.BYTE_ORDER)
                             for k in (16, 8))
                if count:
                    per_run.setdefault(name, []).append(ns / count)
        detach(self)

    run_module.Run.detach = measured
    log = work / "stderr"
    saved = os.dup(2)
    try:
        with open(log, "wb") as f:
            os.dup2(f.fileno(), 2)  # the tracee's line (it inherits fd 2) and the tool's
            with open(os.devnull, "w") as out:
                status = run.run(directory, run.Options(
                    [str(calls)], attach=mode, record=str(work / "rec"), sleepable=sleepable),
                    out=out)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        run_module.Run.detach = detach
    text = log.read_bytes()
    if status:
        raise SystemExit(f"{mode}: status {status}: {text.decode(errors='replace')[-500:]}")
    if sleepable != (b", sleepable" in text):
        raise SystemExit(f"{mode}: sleepable={sleepable} not taken: {text.decode()[:300]}")
    return _loop_ns(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    from btfgen.abi.arches import host_bpf_syscall
    from btfgen.probe import features, run
    from btfgen.trace import command

    number = host_bpf_syscall()
    modes = [m for m in MODES if not features.sleepable_uprobes(number, m).why
             and not (m == "session" and features.session_links(number, kernel=False).why)
             and not (m == "multi" and features.uprobe_multi_links(number).why)]
    if not modes:
        print("no attach mode here takes sleepable uprobe programs")
        return 1
    work = Path(tempfile.mkdtemp(prefix="bench_sleepable."))
    exe = work / "tracee"
    subprocess.run(["gcc", "-O2", "-g", str(ROOT / "benchmarks" / "tracee.c"), "-o", str(exe)],
                   check=True)
    directory = work / "dir"
    if command.main(["--build", str(directory), str(exe), "traced"]):
        return 1
    alone: list[int] = []
    loops: dict[tuple[str, bool], list[int]] = {}
    progs: dict[tuple[str, bool], dict] = {}
    with open(STATS) as f:
        before = f.read().strip()
    try:
        with open(STATS, "w") as f:
            f.write("1")
        for _ in range(args.rounds):
            alone.append(_loop_ns(subprocess.run([str(exe), str(args.calls)],
                                                 capture_output=True, check=True).stderr))
            for mode in modes:
                for sleepable in (True, False):
                    key = (mode, sleepable)
                    loops.setdefault(key, []).append(_traced(
                        run, directory, work, args.calls, mode, sleepable,
                        progs.setdefault(key, {})))
    finally:
        with open(STATS, "w") as f:
            f.write(before)
    base = statistics.median(alone) / args.calls
    print(f"{args.calls:,} calls of traced() a run, medians of {args.rounds} rounds; the "
          f"program alone {base:,.0f} ns a call")
    print("| mode | programs | BPF ns a run (entry; exit) | added ns a call |")
    print("|---|---|---|---|")
    figures = []
    for (mode, sleepable), ns in loops.items():
        runs = {name: statistics.median(v) for name, v in progs[(mode, sleepable)].items()}
        added = statistics.median(ns) / args.calls - base
        shown = "; ".join(f"{runs[n]:,.0f}" for n in ("trace_session", "trace_entry",
                                                      "trace_exit") if n in runs)
        print(f"| {mode} | {'sleepable' if sleepable else 'not sleepable'} | {shown} | "
              f"{added:,.0f} |")
        figures.append({"mode": mode, "sleepable": sleepable, "bpf_ns_a_run": runs,
                        "added_ns_a_call": added})
    if args.json:
        args.json.write_text(json.dumps({"calls": args.calls, "rounds": args.rounds,
                                         "alone_ns_a_call": base, "rows": figures}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
