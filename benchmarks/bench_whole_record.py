#!/usr/bin/env python3
"""The whole kernel recorded: `btfgen trace --record` with every attachable function of the
unstable-amd64 guest (Debian's 7.2, QEMU TCG) attached, while `ls`, `cat` and a shell loop
run; the events the BPF side made and those the recording kept, both as the tool says them
(its last lines: "N events made by the BPF side, K kept", then the losses by why), and the
recording read back in the guest (its spans' checks, its events counted).

  python3 benchmarks/bench_whole_record.py [--target unstable-amd64] [--ring-size MIB]
                                           [--smp N] [--memory MIB] [--attach MODE]
                                           [--rounds N] [--breakdown] [--profile]

The functions: the guest's available_filter_functions that its BTF has, less btfgen's deny
list, as bench_mass_attach.py's "all" (its WORKLOAD too, --rounds N times over: ~90,000 events a
round, made in about a second). The tracer's own CPU time (user and
system, its children's apart) is said at its end. The guest has one vCPU as the live tests'
have (the reader then runs only when the traced workload does not); --smp N gives it N (QEMU's
TCG runs them on as many host threads). The guest has 2 GiB (--memory): the recording is
written to its memory (its root is a RAM file system), and with 1 GiB, as the live tests'
guests have, a run that kept 2 M events (~200 MB) beside the tracer (~550 MB resident with a
whole kernel's decoders) was killed by the guest's OOM killer. --breakdown reads the recording
back in the guest and prints its events a quarter second at a time: how many, whose (comm),
which functions most. Needs QEMU and the network once (the live tests' cache).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # as pytest imports it (the cache pickles its classes)

from btfgen.trace import deny  # noqa: E402
from live_kernel import btf as live_btf  # noqa: E402
from live_kernel import kernel as kernels  # noqa: E402
from live_kernel import mass, python_guest  # noqa: E402
from live_kernel.targets import TARGETS  # noqa: E402

WORKLOAD = "ls -l /usr/lib >/dev/null; cat /proc/version /trace-all/trace.json >/dev/null; " \
           "i=0; while [ $i -lt 200 ]; do i=$((i+1)); done"

# Run in the guest on the recording: its events a quarter second at a time (by their time
# stamps), each line the count, the commands that made most, the functions entered most.
BREAKDOWN = """\
import collections, sys
sys.path.insert(0, '/host')
from btfgen.probe import spec_format
from btfgen.recordings.reader import Reader
reader = Reader(sys.argv[1])
names = {d[1]: d[0] for d in reader.descriptors}
head = spec_format.structs(spec_format.EVENT_HEAD + spec_format.RECORD_HEAD)[reader.order]
events = []
for batch in reader.batches():
    for raw in batch.events():
        _tgid, _pid, comm, ns, _cpu, _flags, btf_id, kind, _failed = head.unpack_from(raw, 0)
        events.append((ns, comm.split(b'\\0')[0].decode(errors='replace'), btf_id, kind))
events.sort()
step = 250_000_000
print('seconds  events  commands (most events)  functions (most entries)')
if events:
    by_step = collections.defaultdict(list)
    for e in events:
        by_step[(e[0] - events[0][0]) // step].append(e)
    for n in sorted(by_step):
        these = by_step[n]
        comms = collections.Counter(e[1] for e in these).most_common(3)
        fns = collections.Counter(names.get(e[2], e[2]) for e in these if e[3] == 0)
        print(f'{n * step / 1e9:7.2f} {len(these):7d}  '
              + ', '.join(f'{c} {k}' for c, k in comms) + '  '
              + ', '.join(f'{f} {k}' for f, k in fns.most_common(4)))
"""


# The host's recording reader, copied into the guest at /host/btfgen (the standard library
# only, as the run side).
HOST_READER = [ROOT / "btfgen" / "__init__.py", *sorted((ROOT / "btfgen" / "probe").glob("*.py")),
               *(ROOT / "btfgen" / "recordings" / f for f in ("__init__.py", "reader.py",
                                                              "grouping.py"))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--target", default="unstable-amd64")
    ap.add_argument("--ring-size", type=int, default=0, help="MiB (0: the tool's default)")
    ap.add_argument("--smp", type=int, default=1, help="the guest's vCPUs (default 1)")
    ap.add_argument("--attach", default="auto",
                    help="the tracer's --attach (default auto: the trampoline in this guest)")
    ap.add_argument("--memory", type=int, default=2048, help="the guest's MiB (default 2048)")
    ap.add_argument("--rounds", type=int, default=1, help="the workload this many times over")
    ap.add_argument("--breakdown", action="store_true",
                    help="the recording's events a quarter second at a time: whose, which")
    ap.add_argument("--profile", action="store_true",
                    help="run the tracer under cProfile and print where its time went (the "
                         "profiler's own cost slows the reader: not for the figures)")
    args = ap.parse_args()
    target = TARGETS[args.target]
    if args.smp < 1 or args.rounds < 1:
        print("bench_whole_record: --smp and --rounds must be at least 1", file=sys.stderr)
        return 2
    if not target.qemu_available():
        print(f"skipped: {target.qemu[0]} is not installed")
        return 0
    k = kernels.fetch(target)
    qemu = list(target.qemu)
    if "-m" not in qemu:
        print("bench_whole_record: the target's QEMU command has no -m to set", file=sys.stderr)
        return 2
    qemu[qemu.index("-m") + 1] = str(args.memory)
    if args.smp > 1:
        qemu += ["-smp", str(args.smp)]
    k = dataclasses.replace(k, target=dataclasses.replace(target, qemu=tuple(qemu)))
    kernels.busybox(target)
    btf = live_btf.vmlinux_btf(k)
    python_guest.files(target)
    candidates = deny.split(mass.attachable(k, btf), deny.patterns()).kept
    with tempfile.TemporaryDirectory(prefix="bench-whole-record-") as tmp:
        out = Path(tmp) / "trace-all"
        functions = mass.build_trace(btf, target.arch, candidates, out)
        (out / "breakdown.py").write_text(BREAKDOWN)
        g, py = mass.guest_with(k, {"trace-all": out})
        # The recording is read back in the guest by the host's reader (no target has one).
        for f in HOST_READER:
            g.file(f"host/{f.relative_to(ROOT)}", f.read_bytes())
        env = f"cd / && export LD_LIBRARY_PATH={python_guest.library_path(target)};"
        ring = f"--ring-size {args.ring_size} " if args.ring_size else ""
        # The tracer run in a process that says its own CPU time at its end (os.times: its
        # own user and system, the workload's apart as its children's).
        tracer = ("-c \"import atexit, os, runpy, sys; atexit.register(lambda: print("
                  "'tracer cpu: user %.2f s, system %.2f s; children %.2f s, %.2f s' % "
                  "os.times()[:4], file=sys.stderr)); sys.argv = sys.argv[1:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')\"")
        if args.profile:
            tracer = "-m cProfile -o /tmp/prof"
        g.step("record", f"{env} {py.python} {tracer} /trace-all/btfgen_trace.py --run /trace-all "
                         f"--timings {ring}--attach {args.attach} --record /tmp/all.btfrec "
                         f"-- sh -c 'n=0; while [ $n -lt {args.rounds} ]; do n=$((n+1)); "
                         f"{WORKLOAD}; done' "
                         ">/dev/null 2>/tmp/err; rc=$?; cat /tmp/err; "
                         "echo \"bytes $(wc -c </tmp/all.btfrec)\"; exit $rc")
        g.step("check", f"{env} {py.python} -c \"import sys; sys.path.insert(0, '/host'); "
                        "from btfgen.recordings.reader import Reader; r = Reader("
                        "'/tmp/all.btfrec'); n = sum(b.count for b in r.batches()); "
                        "print('the recording holds', n, 'events; its end says', r.events, "
                        "'events,', r.lost, 'lost; cut:', r.cut)\" 2>&1")
        if args.breakdown:
            g.step("breakdown", f"{env} {py.python} /trace-all/breakdown.py /tmp/all.btfrec 2>&1")
        if args.profile:
            g.step("profile", f"{env} {py.python} -c \"import pstats; pstats.Stats('/tmp/prof')"
                              ".sort_stats('tottime').print_stats(30)\" 2>&1")
        started = time.time()
        boot = g.run(k, timeout=3000)
        text, rc = boot.section("record")
        print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {k.release}, {args.smp} vCPU, "
              f"{args.memory} MiB, {len(functions)} functions,"
              f" guest boot and run {time.time() - started:.0f} s, host load "
              f"{__import__('os').getloadavg()[0]:.1f}")
        said = [line for line in text.splitlines() if re.match(
            r"btfgen_trace: (\d+ events made|\d+ records lost|\d+ calls missed|recorded|"
            r"attaching|tracing)|"
            r"bytes |tracer cpu: |btfgen_trace: time: |btfgen_trace: the reader", line)]
        print("\n".join(said))
        if rc:
            print(f"bench_whole_record: the tool failed (exit {rc}):\n{text[-3000:]}",
                  file=sys.stderr)
            return 1
        print(boot.section("check")[0].strip())
        if args.breakdown:
            print(boot.section("breakdown")[0].rstrip())
        if args.profile:
            print(boot.section("profile")[0].strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
