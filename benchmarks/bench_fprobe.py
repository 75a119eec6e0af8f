#!/usr/bin/env python3
"""What btfgen's generated decode adds to an fprobe handler, against a hand-written handler
reading the same arguments with the kernel's accessors, and the example module's cost per call
beside `btfgen trace`'s, in one QEMU guest (Debian unstable's amd64 7.2 kernel, TCG).

  python3 benchmarks/bench_fprobe.py [--calls N] [--rounds R] [--json FILE]

Built here for the guest kernel (its compiler and headers, -Werror, tests/live_kernel/kbuild.py):
benchmarks/fprobe_bench/btfgen_fprobe_bench.c (one fprobe, entry only, on one function; its
`handler` parameter: 0 empty, 1 hand-written with ftrace_regs_get_argument() and
ftrace_regs_get_kernel_stack_nth(), 2 btfgen's per-function decoder, 3 btfgen's generic decoder)
and examples/fprobe/btfgen_fprobe.c (the example: entry and exit, each call a record in its
ring), both over the header generated for __sys_sendto and do_mmap; `btfgen trace --build` for
the same two functions; benchmarks/fprobe_loop.c, static. In the guest, for each function
(__sys_sendto: six register arguments, reached by sendto(-1, ...); do_mmap: nine, three on the
stack, reached by a zero-length anonymous mmap), round after round, the loop of N calls is timed
untraced, under each handler, under the example module, and under `btfgen trace`'s
kprobe.session and fsession.multi links (loaded and attached as `btfgen_trace.py --run` does,
the ring read after the loop); the order of the ways reverses every other round. Each run checks
the handler ran N times (the module's `hits`), the example module sent 2N records and lost none,
btfgen trace's ring got 2N events.

Under TCG every instruction is emulated: the times are the emulator's, many times a CPU's, and
move with the host's load. Compare ways with each other in the same round: each way's added cost
is its loop's time less the untraced loop's of that round; the ratios are of medians of those.
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

import btfgen  # noqa: E402
from live_kernel import conftest, kbuild, python_guest  # noqa: E402

TARGET = "unstable-amd64"
CALLS = {"sendto": "__sys_sendto", "mmap": "do_mmap"}
HANDLERS = {0: "empty handler", 1: "hand-written", 2: "generated, per function",
            3: "generated, generic"}
EXTRA_CALLS = 16  # calls of the function besides the loop's (do_mmap: the exec's mappings)
WAYS = ["none", "h0", "h1", "h2", "h3", "example", "session", "tracing-multi"]

# Runs in the guest beside the trace directory's modules; one JSON line a run.
GUEST = r'''
import json, os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "/trace")
from btfgen_probe import attach, bpf_object, losses, manifest, processes, ringbuf, run, tracefs

calls, rounds = int(sys.argv[1]), int(sys.argv[2])
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
    return float(sh(LOOP, call, str(calls)).split()[1])


def bench_module(call, handler):
    sh("insmod", "/trace/btfgen_fprobe_bench.ko", f"func={CALLS[call]}", f"handler={handler}")
    try:
        row = {"ns_per_call": loop(call)}
        for p in ("hits", "faults"):
            row[p] = int(Path(f"/sys/module/btfgen_fprobe_bench/parameters/{p}").read_text())
    finally:
        sh("rmmod", "btfgen_fprobe_bench")
    return row


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
    while rb.poll(100) > 0:
        pass
    rb.drain()
    rb.close()
    row["events"] = events[0]
    row["lost"] = losses.lost(obj)
    row["missed"] = obj.missed(mode.programs)
    obj.close()
    return row


WAYS = ["none", "h0", "h1", "h2", "h3", "example", "session", "tracing-multi"]
for call in CALLS:  # a first, untimed run of each loop: the emulator translates its code once
    loop(call)
for n in range(rounds):
    for call in ("sendto", "mmap"):
        for way in WAYS if n % 2 == 0 else WAYS[::-1]:
            if way == "none":
                row = {"ns_per_call": loop(call)}
            elif way.startswith("h"):
                row = bench_module(call, int(way[1:]))
            elif way == "example":
                row = example(call)
            else:
                row = btfgen_trace(call, way)
            row.update({"round": n, "call": call, "way": way})
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
    example = kbuild.build_module(TARGET, {
        "btfgen_fprobe.c": (ROOT / "examples/fprobe/btfgen_fprobe.c").read_bytes(),
        "btfgen.kernel.h": header}, "btfgen_fprobe", extra_cflags=("-Werror",))
    shutil.copy(bench, out / "btfgen_fprobe_bench.ko")
    shutil.copy(example, out / "btfgen_fprobe.ko")
    subprocess.run(["gcc", "-O2", "-static", "-Wall", "-Werror", "-o", str(out / "fprobe_loop"),
                    str(ROOT / "benchmarks/fprobe_loop.c")], check=True)
    (out / "bench_guest.py").write_text(GUEST)


def spread(values: list[float]) -> str:
    return f"{min(values):.0f}–{max(values):.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", metavar="FILE", help="also write every run here")
    args = p.parse_args()
    kernel = conftest.kernel_for(TARGET)
    btf_path = conftest.btf_for(kernel)
    with tempfile.TemporaryDirectory(prefix="bench-fprobe-") as tmp:
        out = Path(tmp) / "trace"
        build(kernel, btf_path, out)
        g, py = python_guest.trace_guest(kernel.target, out)
        g.step("bench", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(kernel.target)} "
                        f"{py.python} bench_guest.py {args.calls} {args.rounds} 2>&1")
        boot = g.run(kernel, timeout=1800)
    text, rc = boot.section("bench")
    runs = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("BENCH ")]
    if rc or not runs:
        print(f"bench_fprobe: the guest run failed (exit {rc}):\n{text[-3000:]}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "release": kernel.release},
                                              indent=1) + "\n")
    return report(runs, args.calls, args.rounds, kernel.release)


def report(runs: list[dict], calls: int, rounds: int, release: str) -> int:
    bad = []

    def counted(n: int, per_call: int) -> bool:
        # do_mmap is also called by the loop's own exec (a few mappings): a few more are fine
        return per_call * calls <= n <= per_call * (calls + EXTRA_CALLS)

    for r in runs:
        if r["way"].startswith("h") and (not counted(r["hits"], 1) or r["faults"]):
            bad.append(r)
        if r["way"] == "example" and (not counted(r["events"], 2) or r["lost"] or r["missed"]):
            bad.append(r)
        if r["way"] in ("session", "tracing-multi") and (not counted(r["events"], 2)
                                                         or r["lost"]):
            bad.append(r)
    print(f"{TARGET} ({release}, QEMU TCG), {calls} calls a run, {rounds} rounds; "
          "added: ns a call over the untraced loop of the same round (median, and the rounds' "
          "least and most)")
    for call, fn in CALLS.items():
        added: dict[str, list[float]] = {}
        for n in range(rounds):
            row = {r["way"]: r for r in runs if r["round"] == n and r["call"] == call}
            if len(row) != len(WAYS):
                continue
            base = row["none"]["ns_per_call"]
            for way in WAYS[1:]:
                added.setdefault(way, []).append(row[way]["ns_per_call"] - base)
            added.setdefault("none", []).append(base)
            # the decode alone: each handler over the empty handler of the same round
            for h in ("h1", "h2", "h3"):
                added.setdefault(h + "-h0", []).append(
                    row[h]["ns_per_call"] - row["h0"]["ns_per_call"])
        if not added:
            continue
        med = {k: statistics.median(v) for k, v in added.items()}
        print(f"\n{fn} (untraced loop {med['none']:.0f} ns a call, rounds {spread(added['none'])})")
        print(f"  {'way':40} {'added':>8} {'rounds':>12} {'decode':>8} {'× hand':>7}")
        names = {**{f"h{h}": f"module: {d}" for h, d in HANDLERS.items()},
                 "example": "example module (entry+exit, ring)",
                 "session": "btfgen trace, kprobe.session",
                 "tracing-multi": "btfgen trace, fsession.multi"}
        for way in WAYS[1:]:
            extra = ""
            if way in ("h1", "h2", "h3"):
                d = med[way + "-h0"]
                extra = f" {d:>7.0f}"
                if way != "h1":
                    extra += f" {med[way] / med['h1']:>6.2f}×"
            print(f"  {names[way]:40} {med[way]:>8.0f} {spread(added[way]):>12}{extra}")
        print(f"  generated per function / hand-written, whole handler: "
              f"{med['h2'] / med['h1']:.2f}× (rounds "
              f"{min(a / b for a, b in zip(added['h2'], added['h1'])):.2f}–"
              f"{max(a / b for a, b in zip(added['h2'], added['h1'])):.2f}); "
              f"generic: {med['h3'] / med['h1']:.2f}×")
        print(f"  example module / btfgen trace: {med['example'] / med['session']:.2f}× "
              f"kprobe.session, {med['example'] / med['tracing-multi']:.2f}× fsession.multi")
    if bad:
        print(f"\nbench_fprobe: {len(bad)} runs did not trace every call as expected:",
              file=sys.stderr)
        for r in bad:
            print("  " + json.dumps(r), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
