#!/usr/bin/env python3
"""`btfgen trace` beside bpftrace on one user program: the cost each adds to a traced call, the
events each delivers and loses, and each tracer's own CPU time.

  sudo python3 benchmarks/bench_tracers.py [--calls N] [--rounds R] [--quick] [--json FILE]

The program (benchmarks/tracee.c, built here with gcc -O2 -g) calls `traced(a, b, c, d, e, f,
s)` -- six `long`s and a `const char *`, the seventh argument, on the stack on x86_64 -- N times
in a loop and reports the loop's wall time and its own CPU time. It runs:

- alone;
- under `btfgen trace --run DIR` printing text (DIR built once, beforehand, with `btfgen trace
  --build`: the build side's clang is not what is measured), and under `--record FILE`; and
  with `--stack` (a second DIR): each entry's user stack unwound and named under its line;
- under bpftrace printing the six arguments, the string (str() of the stack slot: bpftrace 0.17
  has no arg6 on x86_64) and the return value at a uprobe and a uretprobe; again printing the
  string's address instead of str(), as btfgen does (like for like); and once with empty probe
  bodies, the uprobe and uretprobe's own cost, the floor under both tracers; and printing the
  pointer and `ustack` (the frames the kernel walks by frame pointers, named by bpftrace),
  beside btfgen's --stack.

Per traced call: the nanoseconds the tracer adds to the loop (its time traced minus its time
alone, over N); events delivered (btfgen: the text lines, or the lines `btfgen decode --format
jsonl` prints of the recording; bpftrace: its lines) against the 2N made, and lost (btfgen's
"N records lost", bpftrace's "Lost N events"); the tracer's own CPU time (this process's
children's minus the program's own, and minus a one-call run's, the tracer's start-up, which
is shown apart: a one-call run beside each run, in the same round, after one discarded run of
each tracer, so that both are measured alike, warm; where the per-call figure is within what
the start-ups vary by, it says so, not a figure of noise); "unaccounted" is what was made and
neither delivered nor said to be lost. `btfgen decode`'s time over the recording (less its time
over the one-call run's) is set beside the traced loop's. The runs alternate, round after
round; the table gives the median of the rounds (and the best added cost). Needs root (BPF and
uprobes), gcc, clang and pahole for the build; bpftrace's rows say why they are missing when it
is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from btfgen.probe import features, tracefs  # noqa: E402 (after the path insert above)

TRACEE = ROOT / "benchmarks" / "tracee.c"
FUNCTION = "traced"
# A few seconds a traced run on this machine (the uprobe and uretprobe alone add 25-45 us a
# call), and three rounds of every row inside two minutes.
DEFAULT_CALLS = 50_000
DEFAULT_ROUNDS = 3
QUICK_CALLS = 1_000  # 2,000 events: fewer than btfgen's ring buffer holds, so none are lost
TRACEE_LINE = re.compile(r"^tracee: (\d+) calls (\d+) ns cpu (\d+) us", re.M)
# The end's lines, one a reason (not the "lost so far" said while running).
BTFGEN_LOST = re.compile(r"^btfgen trace: (\d+) records lost \(", re.M)
BPFTRACE_LOST = re.compile(r"Lost (\d+) events")

ARGS = 'arg0, arg1, arg2, arg3, arg4, arg5'
ARGS_FMT = "%ld, %ld, %ld, %ld, %ld, %ld"
# x86_64: at the uprobe (the function's first instruction) sp points at the return address,
# and the seventh argument is the next slot.
SEVENTH = '*(uint64 *)(reg("sp") + 8)'


class Tracer(NamedTuple):
    key: str
    label: str
    kind: str  # "alone", "btfgen", "bpftrace"
    script: str = ""  # bpftrace's program
    record: bool = False  # btfgen: --record instead of text
    events: bool = True  # whether it prints an event at each entry and exit
    stack: bool = False  # btfgen: the trace directory built with --stack
    # a run that fails makes the row unavailable (said why), not the whole bench: bpftrace
    # 0.17 aborts naming a ustack once the program has exited (read_symlink /proc/PID/exe),
    # which a short run's last calls hit
    fragile: bool = False


def bpftrace_script(exe: Path, string: bool, stack: bool = False) -> str:
    arg7 = f"str({SEVENTH})" if string else SEVENTH
    fmt7 = "%s" if string else "0x%lx"
    entry = f'printf("{FUNCTION}({ARGS_FMT}, {fmt7})\\n", {ARGS}, {arg7});'
    if stack:
        entry += " print(ustack);"
    exit_ = f'printf("{FUNCTION} -> %ld\\n", retval);'
    return (f"uprobe:{exe}:{FUNCTION} /pid == cpid/ {{ {entry} }}\n"
            f"uretprobe:{exe}:{FUNCTION} /pid == cpid/ {{ {exit_} }}\n")


def tracers(exe: Path) -> list[Tracer]:
    empty = (f"uprobe:{exe}:{FUNCTION} /pid == cpid/ {{ }}\n"
             f"uretprobe:{exe}:{FUNCTION} /pid == cpid/ {{ }}\n")
    return [
        Tracer("alone", "the program alone", "alone", events=False),
        Tracer("btfgen-text", "btfgen trace (text)", "btfgen"),
        Tracer("btfgen-record", "btfgen trace --record", "btfgen", record=True),
        Tracer("btfgen-stack", "btfgen trace --stack (text)", "btfgen", stack=True),
        Tracer("bpftrace-str", "bpftrace, str(arg7)", "bpftrace", bpftrace_script(exe, True)),
        Tracer("bpftrace-ptr", "bpftrace, arg7 as a pointer", "bpftrace",
               bpftrace_script(exe, False)),
        Tracer("bpftrace-ustack", "bpftrace, arg7 as a pointer, ustack", "bpftrace",
               bpftrace_script(exe, False, stack=True), fragile=True),
        Tracer("bpftrace-empty", "bpftrace, empty probes (uprobe floor)", "bpftrace", empty,
               events=False),
    ]


class Run(NamedTuple):
    loop_ns: int  # the program's loop, wall time
    tracer_cpu_s: float  # the tracer's own: its CPU time and its children's but the program's
    delivered: int | None  # events printed or recorded
    lost: int | None
    decode_s: float | None = None  # --record: `btfgen decode --format jsonl`'s wall time


class Failed(Exception):
    """One line: why a run could not be measured."""


class Bench:
    def __init__(self, work: Path, exe: Path, trace_dir: Path) -> None:
        self.work, self.exe, self.trace_dir = work, exe, trace_dir

    def run(self, tracer: Tracer, calls: int) -> Run:
        out = self.work / f"{tracer.key}.out"
        recording = self.work / f"{tracer.key}.btfrec"
        argv = self.argv(tracer, calls, recording)
        before = _children_cpu()
        with open(out, "wb") as sink:
            proc = subprocess.run(argv, stdout=sink, stderr=subprocess.PIPE, cwd=ROOT,
                                  timeout=600)
        cpu = _children_cpu() - before
        err = proc.stderr.decode(errors="replace")
        found = TRACEE_LINE.search(err)
        if proc.returncode or not found:
            raise Failed(f"{tracer.label}: exit status {proc.returncode}: "
                         f"{err.strip().splitlines()[-1:] or ['no output']}")
        if int(found[1]) != calls:
            raise Failed(f"{tracer.label}: the program made {found[1]} calls, not {calls}")
        tracer_cpu = cpu - int(found[3]) / 1e6
        started = time.perf_counter()
        delivered, lost = self.events(tracer, out, recording, err)
        decode_s = time.perf_counter() - started if tracer.record else None
        return Run(int(found[2]), tracer_cpu, delivered, lost, decode_s)

    def argv(self, tracer: Tracer, calls: int, recording: Path) -> list[str]:
        program = [str(self.exe), str(calls)]
        if tracer.kind == "alone":
            return program
        if tracer.kind == "bpftrace":
            return ["bpftrace", "-e", tracer.script, "-c", " ".join(program)]
        record = ["--record", str(recording)] if tracer.record else []
        trace_dir = self.trace_dir.with_name(self.trace_dir.name + "-stack") if tracer.stack \
            else self.trace_dir
        return [sys.executable, "-m", "btfgen", "trace", "--run", str(trace_dir), *record,
                "--", str(calls)]

    def events(self, tracer: Tracer, out: Path, recording: Path, err: str):
        if not tracer.events:
            return None, None
        if tracer.kind == "bpftrace":
            # bpftrace 0.17 says "Lost N events" among its printed lines, on stdout.
            said = BPFTRACE_LOST.findall(err + out.read_text(errors="replace"))
            return _lines(out, FUNCTION.encode()), sum(int(n) for n in said)
        found = BTFGEN_LOST.findall(err)
        if not found:
            raise Failed(f"{tracer.label}: no 'records lost' line on stderr")
        if tracer.record:
            decoded = self.work / "decoded.jsonl"
            with open(decoded, "wb") as sink:
                proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format",
                                       "jsonl", str(recording)], stdout=sink,
                                      stderr=subprocess.PIPE, cwd=ROOT, timeout=600)
            if proc.returncode:
                raise Failed(f"btfgen decode: {proc.stderr.decode(errors='replace').strip()}")
            return _lines(decoded, b"{"), sum(map(int, found))
        return _lines(out, FUNCTION.encode()), sum(map(int, found))


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _lines(path: Path, start: bytes) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.startswith(start))


class Row(NamedTuple):
    tracer: Tracer
    added_ns: float | None  # median over the rounds, per call
    best_added_ns: float | None
    loop_ns: float  # median, per call
    delivered: int | None  # median
    lost: int | None  # median
    most_lost: int | None
    most_unsaid: int | None  # the most events neither delivered nor said to be lost
    cpu_ns: float | None  # the tracer's CPU per call, start-up taken out (median)
    startup_cpu_s: float | None  # median
    decode_s: float | None = None  # median
    startup_decode_s: float | None = None  # decoding the one-call run's recording
    unavailable: str | None = None
    # What the start-ups' CPU varies by, per call (their most less their least, over calls):
    # a cpu_ns within it is not told apart from nothing.
    cpu_noise_ns: float | None = None


def summarize(tracer: Tracer, runs: list[Run], startups: list[Run] | None, alone_ns: float,
              calls: int) -> Row:
    """`startups`: a one-call run of the tracer each round, beside `runs` (pair by pair)."""
    per_call = [r.loop_ns / calls for r in runs]
    added = [ns - alone_ns for ns in per_call]
    events = tracer.events
    is_tracer = tracer.kind != "alone"
    return Row(
        tracer,
        statistics.median(added) if is_tracer else None,
        min(added) if is_tracer else None,
        statistics.median(per_call),
        int(statistics.median(r.delivered for r in runs)) if events else None,
        int(statistics.median(r.lost for r in runs)) if events else None,
        max(r.lost for r in runs) if events else None,
        max(2 * calls - r.delivered - r.lost for r in runs) if events else None,
        statistics.median((r.tracer_cpu_s - s.tracer_cpu_s) / calls * 1e9
                          for r, s in zip(runs, startups)) if is_tracer else None,
        statistics.median(s.tracer_cpu_s for s in startups) if is_tracer else None,
        statistics.median(r.decode_s for r in runs) if tracer.record else None,
        statistics.median(s.decode_s for s in startups) if tracer.record else None,
        cpu_noise_ns=(max(s.tracer_cpu_s for s in startups) -
                      min(s.tracer_cpu_s for s in startups)) / calls * 1e9
        if is_tracer else None)


def table(rows: list[Row], calls: int) -> str:
    lines = ["| run | ns/call | added ns/call (median; best) | events delivered / made | "
             "lost (median; most) | unaccounted (most) | tracer CPU ns/call | "
             "tracer start-up CPU |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.unavailable:
            lines.append(f"| {row.tracer.label} | unavailable: {row.unavailable} ||||||| ")
            continue
        added = "" if row.added_ns is None else f"{row.added_ns:,.0f}; {row.best_added_ns:,.0f}"
        made = f"{row.delivered:,} / {2 * calls:,}" if row.delivered is not None else "-"
        lost = f"{row.lost:,}; {row.most_lost:,}" if row.lost is not None else "-"
        unsaid = f"{row.most_unsaid:,}" if row.most_unsaid is not None else "-"
        cpu = "" if row.cpu_ns is None else cpu_figure(row.cpu_ns, row.cpu_noise_ns or 0.0)
        start = "" if row.startup_cpu_s is None else f"{row.startup_cpu_s:.2f} s"
        lines.append(f"| {row.tracer.label} | {row.loop_ns:,.0f} | {added} | {made} | {lost} "
                     f"| {unsaid} | {cpu} | {start} |")
    return "\n".join(lines)


def cpu_figure(ns: float, noise: float) -> str:
    """A tracer's CPU per call, or, where it is within what its start-ups vary by (or below
    nothing: a start-up that cost more than a whole run), the bound that is all it shows."""
    if ns <= noise or ns <= 0:
        return f"≤ {max(noise, 0.0):,.0f} (within the start-ups' spread)"
    return f"{ns:,.0f}"


def targets(rows: dict[str, Row], calls: int) -> list[str]:
    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    out = []
    bt = [rows[k] for k in ("bpftrace-ptr", "bpftrace-str") if not rows[k].unavailable]
    for key in ("btfgen-text", "btfgen-record"):
        row = rows[key]
        if row.unavailable:
            out.append(f"{row.tracer.label}: unavailable ({row.unavailable})")
            continue
        for other in bt:
            out.append(f"added cost, {row.tracer.label} {row.added_ns:,.0f} ns <= "
                       f"{other.tracer.label} {other.added_ns:,.0f} ns: "
                       f"{met(row.added_ns <= other.added_ns)}")
    stack, ustack = rows.get("btfgen-stack"), rows.get("bpftrace-ustack")
    if stack and ustack and not stack.unavailable and not ustack.unavailable:
        text = rows["btfgen-text"]
        out.append(f"--stack's cost per call: {stack.added_ns - text.added_ns:,.0f} ns over "
                   f"btfgen without it; bpftrace's ustack "
                   f"{ustack.added_ns - rows['bpftrace-ptr'].added_ns:,.0f} ns over its "
                   "line without (frame pointers only: cut where the code keeps none)")
    rec = rows["btfgen-record"]
    if not rec.unavailable:
        out.append(f"--record loses nothing: {rec.most_lost:,} lost at most, "
                   f"{rec.delivered:,} of {2 * calls:,} decoded (median): "
                   f"{met(rec.most_lost == 0 and rec.delivered == 2 * calls)}")
        made_s = rec.loop_ns * calls / 1e9
        # Its start-up (the interpreter, the header) is no rate: taken out, and shown.
        decoding_s = max(rec.decode_s - rec.startup_decode_s, 1e-9)
        out.append(f"--record's decode keeps up: `btfgen decode --format jsonl` took "
                   f"{rec.decode_s:.2f} s ({rec.startup_decode_s:.2f} s of it start-up: "
                   f"{2 * calls / decoding_s:,.0f} events/s), the traced loop made them in "
                   f"{made_s:.2f} s ({2 * calls / made_s:,.0f} events/s): "
                   f"{met(decoding_s <= made_s)}")
    return out


def missing_tools() -> list[str]:
    """What building a traced program and its trace directory needs and this machine lacks
    (bench_reader.py asks too)."""
    missing = [t for t in ("gcc", "pahole") if shutil.which(t) is None]
    if shutil.which("clang-19") is None and shutil.which("clang") is None:
        missing.append("clang")
    return missing


def checks() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    if platform.machine() != "x86_64":
        return f"the bpftrace scripts read x86_64's stack argument; this is {platform.machine()}"
    missing = missing_tools()
    if missing:
        return f"not installed: {', '.join(missing)}"
    reason = features.bpf_programs().why
    if reason:
        return f"BPF unavailable: {reason}"
    try:
        tracefs.mount_tracefs()
    except Exception as e:  # noqa: BLE001 (any way the mount fails is a reason to stop)
        return f"tracefs unavailable: {e}"
    return None


def build(work: Path) -> tuple[Path, Path]:
    exe = work / "tracee"
    _check(["gcc", "-O2", "-g", str(TRACEE), "-o", str(exe)], "compiling tracee.c")
    trace_dir = work / "trace-dir"
    _check([sys.executable, "-m", "btfgen", "trace", "--build", str(trace_dir), str(exe),
            FUNCTION], "btfgen trace --build")
    _check([sys.executable, "-m", "btfgen", "trace", "--build", f"{trace_dir}-stack", "--stack",
            str(exe), FUNCTION], "btfgen trace --build --stack")
    return exe, trace_dir


def _check(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise Failed(f"{what}: {proc.stderr.strip().splitlines()[-1:]}")


def bpftrace_version() -> str | None:
    if shutil.which("bpftrace") is None:
        return None
    proc = subprocess.run(["bpftrace", "--version"], capture_output=True, text=True)
    return proc.stdout.strip() or proc.stderr.strip()


def measure(calls: int, rounds: int, work: Path, progress) -> dict:
    exe, trace_dir = build(work)
    bench = Bench(work, exe, trace_dir)
    version = bpftrace_version()
    all_tracers = tracers(exe)
    runnable = [t for t in all_tracers if t.kind != "bpftrace" or version]
    # The tracers' start-up (load, attach, exit) on a one-call run, taken out of their CPU: one
    # beside each run, in its round, so that both are measured alike (a single start-up
    # measured first, cold, once cost more than a whole --record run: a negative figure). The
    # first run of each is discarded (the trace directory's bytecode is written by it).
    failed: dict[str, str] = {}  # a fragile tracer's key -> why its row is unavailable

    def measured(tracer: Tracer, n: int) -> Run | None:
        try:
            return bench.run(tracer, n)
        except Failed as e:
            if not tracer.fragile:
                raise
            failed[tracer.key] = str(e)
            return None

    for t in runnable:
        if t.kind != "alone":
            measured(t, 1)
    startup: dict[str, list[Run]] = {t.key: [] for t in runnable if t.kind != "alone"}
    runs: dict[str, list[Run]] = {t.key: [] for t in runnable}
    for r in range(rounds):
        # Alternated, and each round in another order, so that a busy spell of the shared
        # machine falls on different rows.
        order = runnable if r % 2 == 0 else runnable[::-1]
        for tracer in order:
            if tracer.key in failed:
                continue
            run, startup_run = measured(tracer, calls), None
            if run is not None and tracer.kind != "alone":
                startup_run = measured(tracer, 1)
            if tracer.key not in failed:
                runs[tracer.key].append(run)
                if startup_run is not None:
                    startup[tracer.key].append(startup_run)
            progress(f"round {r + 1}/{rounds}: {tracer.label}")
    alone_ns = statistics.median(run.loop_ns / calls for run in runs["alone"])
    rows = {}
    for t in all_tracers:
        if t.key in failed:
            rows[t.key] = Row(t, None, None, 0, None, None, None, None, None, None,
                              unavailable=failed[t.key])
        elif t.key in runs:
            rows[t.key] = summarize(t, runs[t.key], startup.get(t.key), alone_ns, calls)
        else:
            rows[t.key] = Row(t, None, None, 0, None, None, None, None, None, None,
                              unavailable="bpftrace is not installed")
    return {"rows": rows, "bpftrace": version, "runs": runs}


def host() -> str:
    load = os.getloadavg()[0]
    return (f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}, {os.cpu_count()} CPUs, "
            f"load {load:.1f}, Linux {platform.release()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--calls", type=int, default=None, help=f"calls a run (default "
                    f"{DEFAULT_CALLS:,}; {QUICK_CALLS:,} with --quick)")
    ap.add_argument("--rounds", type=int, default=None,
                    help=f"runs of each row (default {DEFAULT_ROUNDS}; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a short run, for the tests")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = ap.parse_args()
    calls = args.calls or (QUICK_CALLS if args.quick else DEFAULT_CALLS)
    rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)
    if calls <= 0 or rounds <= 0:
        print("bench_tracers: --calls and --rounds must be positive", file=sys.stderr)
        return 2
    reason = checks()
    if reason:
        print(f"bench_tracers: unavailable, because {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench_tracers.") as tmp:
        try:
            result = measure(calls, rounds, Path(tmp),
                             lambda what: print(f"  {what}", file=sys.stderr, flush=True))
        except (Failed, subprocess.TimeoutExpired) as e:
            print(f"bench_tracers: {e}", file=sys.stderr)
            return 1
    rows = result["rows"]
    print(f"{host()}; {calls:,} calls a run, median of {rounds} alternating rounds; "
          f"bpftrace: {result['bpftrace'] or 'not installed'}")
    print()
    print(table(list(rows.values()), calls))
    print()
    for line in targets(rows, calls):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "calls": calls, "rounds": rounds, "bpftrace": result["bpftrace"], "host": host(),
            "rows": {k: {f: v for f, v in r._asdict().items() if f != "tracer"}
                     | {"label": r.tracer.label} for k, r in rows.items()},
            "runs": {k: [r._asdict() for r in v] for k, v in result["runs"].items()},
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
