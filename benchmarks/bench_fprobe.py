#!/usr/bin/env python3
"""What btfgen's generated decode adds to an fprobe handler, against a hand-written handler
reading the same arguments with the kernel's accessors, and the example module's cost per call
beside `btfgen trace`'s, in one QEMU guest (Debian unstable's amd64 7.2 kernel, TCG).

  python3 benchmarks/bench_fprobe.py [--calls N] [--rounds R] [--trace-rounds T] [--json FILE]

Built here for the guest kernel (its compiler and headers, -Werror, tests/live_kernel/kbuild.py):
benchmarks/fprobe_bench/btfgen_fprobe_bench.c (one fprobe, entry only, on one function; its
`handler` parameter, switched while it is loaded: 0 empty, 1 hand-written with
ftrace_regs_get_argument() and ftrace_regs_get_kernel_stack_nth(), 2 btfgen's per-function
decoder, 3 btfgen's generic decoder) and examples/fprobe/btfgen_fprobe.c (the example: entry and
exit, each call a record in its ring), both over the header generated for __sys_sendto and
do_mmap; `btfgen trace --build` for the same two functions; benchmarks/fprobe_loop.c, static
(a run: the least of its three loops of N calls, timed with clock_gettime). The functions:
__sys_sendto (six register arguments), reached by sendto(-1, ...), and do_mmap (nine, three on
the stack on x86_64), reached by a zero-length anonymous mmap; both fail at once.

In the guest, for each function, R rounds of the handlers: the untraced loop, the module loaded,
each handler switched in and run (the order reversed every other round), unloaded, the untraced
loop again; a handler's added cost is its run less the lesser untraced run of its round, the
decode's its run less the empty handler's. Then T rounds of the untraced loop, the example
module, and `btfgen trace`'s kprobe.session and fsession.multi links (loaded and attached as
`btfgen_trace.py --run` does, the ring read after the loop), each less the untraced loop of its
round. Each run checks the handler ran for every call (the module's `hits`, no decode fault),
the example module sent a record at entry and at exit of each call and lost none, btfgen
trace's ring got as many.

Under TCG every instruction is emulated: the times are the emulator's, many times a CPU's, and
move with the host's load (other guests on the same two CPUs). Compare ways with each other in
the same round; the least of the rounds is the figure least disturbed by the host.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# As pytest imports them (the live cache pickles their classes under these names).
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from live_kernel import conftest, kbuild, modules, python_guest  # noqa: E402

import btfgen  # noqa: E402

TARGET = "unstable-amd64"
CALLS = {"sendto": "__sys_sendto", "mmap": "do_mmap"}
HANDLERS = {0: "empty handler", 1: "hand-written", 2: "generated, per function",
            3: "generated, generic"}
REPS = 3  # fprobe_loop.c's: its loop runs so many times, the least time is taken
EXTRA_CALLS = 16  # calls of the function besides the loop's (do_mmap: the exec's mappings)
TRACERS = {"example": "example module (entry+exit, ring)",
           "session": "btfgen trace, kprobe.session", "tracing-multi": "btfgen trace, fsession.multi"}

# Runs in the guest beside the trace directory's modules; one JSON line a run.
GUEST = r'''
import json, os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "/trace")
from btfgen_probe import attach, bpf_object, losses, manifest, processes, ringbuf, run, tracefs

calls, rounds, trace_rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
CALLS = {"sendto": "__sys_sendto", "mmap": "do_mmap"}
LOOP = "/trace/fprobe_loop"
os.chmod(LOOP, 0o755)  # the guest's files are made 0644 but for Python's
trace = manifest.load_manifest(Path("/trace"))
tracefs.mount_tracefs()
keep_all, _ = tracefs.traceable(trace.functions)


def sh(*cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{cmd}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def loop(call):
    return float(sh(LOOP, call, str(calls)).split()[1])  # the least of its REPS loops'


PARAMS = Path("/sys/module/btfgen_fprobe_bench/parameters")


def hist():
    return [int(n) for n in (PARAMS / "hist").read_text().split(",")]


def handlers(call, order):
    """The untraced loop, then the module loaded once and each handler in `order` switched in,
    then the untraced loop again: one row each."""
    rows = [{"way": "none", "ns_per_call": loop(call)}]
    sh("insmod", "/trace/btfgen_fprobe_bench.ko", f"func={CALLS[call]}")
    try:
        for h in order:
            for name, value in (("handler", h), ("hits", 0), ("faults", 0)):
                (PARAMS / name).write_text(str(value))
            row = {"way": f"h{h}", "ns_per_call": loop(call)}
            for name in ("hits", "faults"):
                row[name] = int((PARAMS / name).read_text())
            rows.append(row)
        # each call's handler timed in the kernel (the empty one: the clock's own time)
        (PARAMS / "timed").write_text("1")
        for h in order:
            (PARAMS / "handler").write_text(str(h))
            before = hist()
            loop(call)
            rows.append({"way": f"t{h}", "hist": [b - a for a, b in zip(before, hist())]})
    finally:
        sh("rmmod", "btfgen_fprobe_bench")
    rows.append({"way": "none", "ns_per_call": loop(call)})
    return rows


def example(call):
    sh("insmod", "/trace/btfgen_fprobe.ko", f"filter={CALLS[call]}", "ring_kb=32768")
    try:
        row = {"ns_per_call": loop(call)}
        for line in Path("/proc/btfgen_fprobe_stats").read_text().splitlines():
            k, v = line.split()
            if k in ("events", "lost", "missed"):
                row[k] = int(v)
    finally:
        sh("rmmod", "btfgen_fprobe")
    return row


def btfgen_trace(call, kind):
    keep = [i for i in keep_all if trace.functions[i] == CALLS[call]]
    child = processes.Gated([LOOP, call, str(calls), "/tmp/loop"])
    events = [0]
    mode = attach.attach_modes(kind, True, trace, keep)[0]
    obj = bpf_object.BpfObject(f"/trace/{mode.object}", bpf_syscall=trace.bpf_syscall)
    the_run = run.Run(Path("/trace"), run.Options([], attach=kind, ring_mib=64))
    the_run.keep, the_run.only = keep, child.pid
    the_run.load_and_attach(obj, mode)
    rb = ringbuf.RingBuffer(obj.map_fd("events"), lambda raw: events.__setitem__(0, events[0] + 1))
    child.start()
    _, status = os.waitpid(child.pid, 0)
    if status:
        raise SystemExit(f"the loop under {kind}: status {status}")
    row = {"ns_per_call": float(Path("/tmp/loop").read_text().split()[1]), "mode": mode.kind}
    while True:  # a poll or drain hands over at most RingBuffer.BATCH records
        got = events[0]
        rb.drain()
        if events[0] == got:
            break
    rb.close()
    row["events"] = events[0]
    row["lost"] = losses.lost(obj)
    row["missed"] = obj.missed(mode.programs)
    obj.close()
    return row


for call in CALLS:  # a first, untimed run of each loop: the emulator translates its code once
    loop(call)
for n in range(rounds):
    for call in CALLS:
        for row in handlers(call, [0, 1, 2, 3] if n % 2 == 0 else [3, 2, 1, 0]):
            row.update({"round": n, "call": call, "part": "handlers"})
            print("BENCH " + json.dumps(row), flush=True)
WAYS = ["none", "example", "session", "tracing-multi"]
for n in range(trace_rounds):
    for call in CALLS:
        for way in WAYS if n % 2 == 0 else WAYS[::-1]:
            if way == "none":
                row = {"ns_per_call": loop(call)}
            elif way == "example":
                row = example(call)
            else:
                row = btfgen_trace(call, way)
            row.update({"round": n, "call": call, "way": way, "part": "tracers"})
            print("BENCH " + json.dumps(row), flush=True)
'''



def build(kernel, btf_path: Path, out: Path) -> None:
    """The two modules, the loop and the trace directory, into `out` (the guest's /trace)."""
    arch = kernel.target.arch
    proc = subprocess.run(
        [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", str(btf_path),
         "--arch", arch, "--build", str(out), *CALLS.values()],
        capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"bench_fprobe: building the trace directory failed: {proc.stderr}")
    t = btfgen.open(str(btf_path), arch=arch, ctx="ftrace_regs")
    header = t.generate(list(CALLS.values()), ("kernel",))["btfgen.kernel.h"].encode()
    bench = kbuild.build_module(TARGET, {
        "btfgen_fprobe_bench.c": (ROOT / "benchmarks/fprobe_bench/btfgen_fprobe_bench.c").read_bytes(),
        "btfgen.kernel.h": header}, "btfgen_fprobe_bench", extra_cflags=("-Werror",))
    example = kbuild.build_module(TARGET, modules.sources("fprobe", header), "btfgen_fprobe",
                                  extra_cflags=("-Werror",))
    shutil.copy(bench, out / "btfgen_fprobe_bench.ko")
    shutil.copy(example, out / "btfgen_fprobe.ko")
    subprocess.run(["gcc", "-O2", "-static", "-Wall", "-Werror", "-o", str(out / "fprobe_loop"),
                    str(ROOT / "benchmarks/fprobe_loop.c")], check=True)
    (out / "bench_guest.py").write_text(GUEST)


HIST_NS = 4  # the module's bucket


def median_ns(hist: list[int]) -> int:
    """The median call's time of a histogram of HIST_NS-wide buckets (a bucket's middle)."""
    total, seen = sum(hist), 0
    for i, n in enumerate(hist):
        seen += n
        if total and seen * 2 >= total:
            return i * HIST_NS + HIST_NS // 2
    return -1


def spread(values: list[float]) -> str:
    return f"{min(values):.0f}–{max(values):.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=15, help="rounds of the handlers")
    p.add_argument("--trace-rounds", type=int, default=5,
                   help="rounds of the example module and btfgen trace")
    p.add_argument("--json", metavar="FILE", help="also write every run here")
    p.add_argument("--from-json", metavar="FILE",
                   help="print the figures of runs --json wrote (no guest)")
    args = p.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        return report(saved["runs"], saved["calls"], saved["release"])
    kernel = conftest.kernel_for(TARGET)
    btf_path = conftest.btf_for(kernel)
    with tempfile.TemporaryDirectory(prefix="bench-fprobe-") as tmp:
        out = Path(tmp) / "trace"
        build(kernel, btf_path, out)
        g, py = python_guest.trace_guest(kernel.target, out)
        g.step("bench", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(kernel.target)} "
                        f"{py.python} bench_guest.py {args.calls} {args.rounds} "
                        f"{args.trace_rounds} 2>&1")
        boot = g.run(kernel, timeout=1800)
    text, rc = boot.section("bench")
    runs = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("BENCH ")]
    if rc or not runs:
        print(f"bench_fprobe: the guest run failed (exit {rc}):\n{text[-3000:]}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "release": kernel.release,
                                               "calls": args.calls}, indent=1) + "\n")
    return report(runs, args.calls, kernel.release)


def report(runs: list[dict], calls: int, release: str) -> int:
    bad = []

    def counted(n: int, per_call: int) -> bool:
        # do_mmap is also called by the loop's own exec (a few mappings): a few more are fine
        return per_call * REPS * calls <= n <= per_call * (REPS * calls + EXTRA_CALLS)

    for r in runs:
        if "hist" in r and not counted(sum(r["hist"]), 1):
            bad.append({**r, "hist": sum(r["hist"])})
        if r["way"].startswith("h") and (not counted(r["hits"], 1) or r["faults"]):
            bad.append(r)
        if r["way"] == "example" and (not counted(r["events"], 2) or r["lost"] or r["missed"]):
            bad.append(r)
        if r["way"] in ("session", "tracing-multi") and (not counted(r["events"], 2)
                                                         or r["lost"]):
            bad.append(r)
    print(f"{TARGET} ({release}, QEMU TCG), a run: the least of {REPS} loops of {calls} calls; "
          "ns a call")
    for call, fn in CALLS.items():
        rows = [r for r in runs if r["call"] == call and r["part"] == "handlers"]
        rounds = sorted({r["round"] for r in rows})
        added: dict[str, list[float]] = {}
        for n in rounds:
            row = [r for r in rows if r["round"] == n]
            base = min(r["ns_per_call"] for r in row if r["way"] == "none")  # before and after
            by = {r["way"]: r["ns_per_call"] for r in row if r["way"] != "none" and "hist" not in r}
            added.setdefault("none", []).append(base)
            for h in HANDLERS:
                added.setdefault(f"h{h}", []).append(by[f"h{h}"] - base)
                added.setdefault(f"d{h}", []).append(by[f"h{h}"] - by["h0"])
        if not rounds:
            continue
        med = {k: statistics.median(v) for k, v in added.items()}
        low = {k: min(v) for k, v in added.items()}
        print(f"\n{fn}: {len(rounds)} rounds, the untraced loop {med['none']:.0f} ns a call "
              f"(rounds {spread(added['none'])})")
        print(f"  {'handler':26} {'added: median':>14} {'least':>6} {'rounds':>11}   "
              f"{'over the empty handler: median':>31} {'least':>6}")
        for h, name in HANDLERS.items():
            print(f"  {name:26} {med[f'h{h}']:>14.0f} {low[f'h{h}']:>6.0f} "
                  f"{spread(added[f'h{h}']):>11}   {med[f'd{h}']:>31.0f} {low[f'd{h}']:>6.0f}")
        # in the kernel: each call's handler, its time's median over every round's calls
        timed = {}
        for h in HANDLERS:
            hs = [r["hist"] for r in rows if r["way"] == f"t{h}"]
            total = [sum(col) for col in zip(*hs)]
            timed[h] = (median_ns(total), [median_ns(x) for x in hs], sum(total))
        print(f"  in the kernel, each call's handler timed (ktime_get_ns around it, "
              f"{HIST_NS} ns buckets; the empty handler's: the clock's own):")
        for h, name in HANDLERS.items():
            m, per, n = timed[h]
            print(f"    {name:26} median {m:>5} ns (rounds {min(per)}–{max(per)}), "
                  f"the decode {m - timed[0][0]:>5} ns; {n} calls")
        dh = timed[1][0] - timed[0][0]
        for h in (2, 3):
            dg = timed[h][0] - timed[0][0]
            print(f"    {HANDLERS[h]} / hand-written, the decode: "
                  + (f"{dg / dh:.2f}×" if dh > 0 else f"{dg} ns against {dh} ns"))
        for h in (2, 3):
            per_round = sorted(a / b for a, b in zip(added[f"h{h}"], added["h1"]) if b > 0)
            print(f"  {HANDLERS[h]} / hand-written, the handler's added cost: "
                  f"{med[f'h{h}'] / med['h1']:.2f}× (medians), {low[f'h{h}'] / low['h1']:.2f}× "
                  f"(leasts); round by round "
                  f"{statistics.median(per_round):.2f}× median, {per_round[0]:.2f}–"
                  f"{per_round[-1]:.2f}×")
    for call, fn in CALLS.items():
        rows = [r for r in runs if r["call"] == call and r["part"] == "tracers"]
        rounds = sorted({r["round"] for r in rows})
        if not rounds:
            continue
        added = {}
        for n in rounds:
            by = {r["way"]: r["ns_per_call"] for r in rows if r["round"] == n}
            for way in TRACERS:
                added.setdefault(way, []).append(by[way] - by["none"])
            added.setdefault("none", []).append(by["none"])
        med = {k: statistics.median(v) for k, v in added.items()}
        print(f"\n{fn}, entry and exit recorded: {len(rounds)} rounds, the untraced loop "
              f"{med['none']:.0f} ns a call (rounds {spread(added['none'])})")
        for way, name in TRACERS.items():
            print(f"  {name:36} added {med[way]:>7.0f} (rounds {spread(added[way])})"
                  + ("" if way == "example" else
                     f"; the example module {med['example'] / med[way]:.2f}× this"))
    if bad:
        print(f"\nbench_fprobe: {len(bad)} runs did not trace every call as expected:",
              file=sys.stderr)
        for r in bad:
            print("  " + json.dumps(r), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
