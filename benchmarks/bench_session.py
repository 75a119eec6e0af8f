#!/usr/bin/env python3
"""`btfgen trace` on kernel functions: one kprobe.session link against the kprobe_multi pair, in
one QEMU guest (Debian unstable's amd64 kernel, through the live-kernel test harness): the time
to load and to attach each way, and what each adds to a traced call.

  python3 benchmarks/bench_session.py [--calls N] [--rounds R] [--json FILE]

The trace directory is built here for the guest kernel's BTF with __x64_sys_umask (the traced
call) and every vfs_* function (so that attaching has some work to do); in the guest, a child
Python process calls umask() N times and times its loop, once untraced and once under each
mode, round after round, the modes alternating. The tool's own run side (btfgen/probe) does the
loading and attaching, exactly as `btfgen_trace.py --run` does; the ring buffer is read after
the loop (64 MiB: room for every record), so the added cost is the probes' and the BPF program's,
not the reader's.

Under TCG (no KVM) every instruction is emulated: the per-call figures are many times a real
machine's and vary with the load on the host; compare the modes with each other, in the same
boot, not with other machines. The medians of the rounds are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# As pytest imports them (the live cache pickles their classes under these names).
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from live_kernel import conftest, python_guest  # noqa: E402 (after the path insert)

TARGET = "unstable-amd64"
FUNCTIONS = ["__x64_sys_umask", "vfs_*"]
MODES = ("session", "multi")

# Runs in the guest beside the trace directory's own modules; one JSON line a run.
GUEST = r'''
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, "/trace")
from btfgen_probe import attach, bpf_object, losses, manifest, processes, ringbuf, run, tracefs

calls, rounds = int(sys.argv[1]), int(sys.argv[2])
trace = manifest.load_manifest(Path("/trace"))
decoders = manifest.load_decoders(Path("/trace"), trace)
tracefs.mount_tracefs()
keep, _ = tracefs.traceable(trace.functions)
LOOP = ("import os, time\nn = int(os.environ['CALLS'])\nt = time.perf_counter_ns()\n"
        "for _ in range(n): os.umask(0o22)\n"
        "open('/tmp/loop', 'w').write(str(time.perf_counter_ns() - t))\n")
os.environ["CALLS"] = str(calls)
timed = {}
attach_functions = attach.attach_functions


def timed_attach(*args):
    start = time.perf_counter()
    attach_functions(*args)
    timed["attach_s"] = time.perf_counter() - start


attach.attach_functions = timed_attach


def once(kind):
    child = processes.Gated([sys.executable, "-c", LOOP])
    obj, events, row = None, [0], {"mode": kind}
    if kind != "none":
        mode = attach.attach_modes(kind, True, trace)[0]
        obj = bpf_object.BpfObject(f"/trace/{mode.object}", bpf_syscall=trace.bpf_syscall)
        the_run = run.Run(Path("/trace"), run.Options([], attach=kind, ring_mib=64))
        the_run.keep, the_run.only = keep, child.pid
        start = time.perf_counter()
        the_run.load_and_attach(obj, mode)
        row["load_and_attach_s"] = time.perf_counter() - start
        row["attach_s"] = timed["attach_s"]
        row["links"] = len(obj.links)
        rb = ringbuf.RingBuffer(obj.map_fd("events"),
                                lambda raw: events.__setitem__(0, events[0] + 1))
    child.start()
    os.waitpid(child.pid, 0)
    row["ns_per_call"] = int(Path("/tmp/loop").read_text()) / calls
    if obj:
        while rb.poll(100) > 0:
            pass
        rb.drain()
        rb.close()
        row["events"] = events[0]
        row["lost"] = losses.lost(obj)
        row["missed"] = obj.missed(mode.programs)
        start = time.perf_counter()
        obj.close()
        row["detach_s"] = time.perf_counter() - start
    print("BENCH " + json.dumps(row), flush=True)


for n in range(rounds):  # the modes' order alternates: neither always runs first
    for kind in ("none", "session", "multi") if n % 2 == 0 else ("none", "multi", "session"):
        once(kind)
'''


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--json", metavar="FILE", help="also write the runs and medians here")
    args = p.parse_args()
    kernel = conftest.kernel_for(TARGET)
    btf_path = conftest.btf_for(kernel)
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        out = Path(tmp) / "trace"
        proc = subprocess.run(
            [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", str(btf_path),
             "--arch", kernel.target.arch, "--build", str(out), *FUNCTIONS],
            capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            print(f"bench_session: building the trace directory failed: {proc.stderr.strip()}",
                  file=sys.stderr)
            return 1
        functions = len(json.loads((out / "trace.json").read_text())["functions"])
        (out / "bench_guest.py").write_text(GUEST)
        g, py = python_guest.trace_guest(kernel.target, out)
        g.step("bench", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(kernel.target)} "
                        f"{py.python} bench_guest.py {args.calls} {args.rounds} 2>&1")
        boot = g.run(kernel)
    text, rc = boot.section("bench")
    runs = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("BENCH ")]
    if rc or not runs:
        print(f"bench_session: the guest run failed (exit {rc}):\n{text[-3000:]}", file=sys.stderr)
        return 1
    alone = statistics.median(r["ns_per_call"] for r in runs if r["mode"] == "none")
    medians = {}
    print(f"{TARGET} ({kernel.release}, TCG), {functions} functions, {args.calls} calls, "
          f"{args.rounds} rounds; untraced loop {alone / 1000:.1f} us a call")
    print(f"{'mode':8} {'links':>5} {'load+attach':>12} {'attach':>8} {'detach':>8} "
          f"{'added/call':>11} {'events':>7} {'lost':>5} {'missed':>6}")
    for kind in MODES:
        rs = [r for r in runs if r["mode"] == kind]
        m = {key: statistics.median(r[key] for r in rs)
             for key in ("load_and_attach_s", "attach_s", "detach_s", "ns_per_call", "events",
                         "lost", "missed", "links")}
        m["added_us"] = (m["ns_per_call"] - alone) / 1000
        medians[kind] = m
        print(f"{kind:8} {m['links']:>5.0f} {m['load_and_attach_s']:>11.2f}s "
              f"{m['attach_s']:>7.3f}s {m['detach_s']:>7.3f}s {m['added_us']:>8.1f} us "
              f"{m['events']:>7.0f} {m['lost']:>5.0f} {m['missed']:>6.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "medians": medians,
                                               "release": kernel.release}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
