#!/usr/bin/env python3
"""Mass attach at the kernel's floor: `btfgen trace --kernel` attaching and detaching 10, 100,
1,000 and every attachable kernel function, beside an empty BPF program on the same functions,
in the same guest (QEMU, TCG) in the same run.

  python3 benchmarks/bench_mass_attach.py [--targets unstable-amd64,unstable-arm64,bookworm-i386]
                                          [--sizes 10,100,1000,all] [--rounds 3] [--json FILE]

Attachable: the guest's available_filter_functions that its BTF has (asked of the guest once,
kept in the live cache), less btfgen's deny list (btfgen/trace/deny.txt), less what the build
leaves out (static functions of one name with different prototypes). Each size is spread over
that list. The floor is an empty program on one kprobe_multi link ("floor"), and on an entry
and a return link ("pair": what btfgen attaches with --attach multi, one kprobe.multi and one
kretprobe.multi); btfgen runs as `--attach auto` chooses: one kprobe.session link on 7.2;
without kprobe_multi (bookworm's 6.1: no CONFIG_FPROBE) one kprobe each, as btfgen then does,
and no "all" (tens of thousands of single kprobes take longer than a guest is given). btfgen's
figures are its run side's own `--timings` lines (attach: both links; detach: both links, not
the fork tracepoint's nor the object); the table says where the rest of its start goes. Floor
and btfgen run one after the other, size by size, `--rounds` times (the whole kernel once);
the table gives medians. Then events per second through the generic decoder with every function attached, while
`ls`, `cat` and a shell loop run. Needs QEMU and the network once (the live tests' cache).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # as pytest imports it (the cache pickles its classes)

from btfgen.trace import deny  # noqa: E402
from live_kernel import btf as live_btf  # noqa: E402
from live_kernel import debian, mass, python_guest  # noqa: E402
from live_kernel import kernel as kernels  # noqa: E402
from live_kernel.targets import TARGETS  # noqa: E402

WORKLOAD = "ls -l /usr/lib >/dev/null; cat /proc/version /trace-all/trace.json >/dev/null; " \
           "i=0; while [ $i -lt 200 ]; do i=$((i+1)); done"
# Where btfgen's start goes, in the order it happens.
STAGES = ["decoders load", "symbol check", "output setup", "object load", "spec map fill"]
SINGLE = {"bookworm-i386", "bookworm-amd64"}  # Debian's 6.1: no kprobe_multi


def measure(name: str, sizes: list[str], work: Path, rounds: int) -> dict:
    target = TARGETS[name]
    if not target.qemu_available():
        return {"target": name, "skipped": f"{target.qemu[0]} is not installed"}
    try:
        k = kernels.fetch(target)
        kernels.busybox(target)
        btf = live_btf.vmlinux_btf(k)
        python_guest.files(target)
    except debian.PackageError as e:
        return {"target": name, "skipped": f"packages cannot be had: {e}"}
    # What `--attach auto` takes there: one kprobe.session link on 7.2 (the floor's one link),
    # one kprobe each on 6.1. (`--attach multi`, the pair, is the floor's "pair" column's.)
    mode = "single" if name in SINGLE else "session"
    if mode == "single" and "all" in sizes:
        sizes = [s for s in sizes if s != "all"]
    # One kprobe each takes a name by itself only where one function has it.
    attachable = mass.attachable(k, btf, unique=mode == "single")
    candidates = deny.split(attachable, deny.patterns()).kept
    out = work / name
    out.mkdir(parents=True)
    build_stages: dict[str, float] = {}
    everything = mass.build_trace(btf, target.arch, candidates, out / "trace-all",
                                  stages=build_stages)
    counts = [len(everything) if s == "all" else int(s) for s in sizes]
    dirs = {"trace-all": out / "trace-all"}
    files = {}
    for n in counts:
        chosen = mass.spread(everything, n)
        if n != len(everything):
            mass.build_trace(btf, target.arch, chosen, out / f"trace-{n}")
            dirs[f"trace-{n}"] = out / f"trace-{n}"
        files[f"names-{n}"] = "\n".join(chosen).encode()
    g, py = mass.guest_with(k, dirs)
    for path, data in files.items():
        g.file(path, data)
    g.file("empty.bpf.o", mass.empty_object(out).read_bytes())
    # One kprobe each is a perf event file each (two for btfgen: entry and return): past the
    # default 1,024 open files both would fail with EMFILE.
    env = f"cd / && ulimit -n 65536 && export LD_LIBRARY_PATH={python_guest.library_path(target)};"
    syscall = json.loads((out / "trace-all" / "trace.json").read_text())["bpf_syscall"]
    # Floor and btfgen one after the other, size by size: the host's load drifts (TCG on a
    # shared machine), and what is compared should see the same.
    # The whole kernel once: a round of it is minutes under TCG.
    plan = {n: 1 if n == len(everything) else rounds for n in counts}
    for n in counts:
        d = "trace-all" if n == len(everything) else f"trace-{n}"
        for r in range(plan[n]):
            floor = "single" if mode == "single" else "multi"  # an empty program's links
            g.step(f"floor-{n}-{r}", f"{env} {py.python} floor.py {floor} {syscall} {n} 2>&1")
            g.step(f"btfgen-{n}-{r}", f"{env} {py.python} /{d}/btfgen_trace.py --run /{d} "
                                      f"--timings --attach {mode} -- true 2>&1 >/dev/null")
    if "all" in sizes:
        g.step("events", f"{env} {py.python} /trace-all/btfgen_trace.py --run /trace-all "
                         f"--timings -- sh -c '{WORKLOAD}' >/tmp/out 2>/tmp/err; rc=$?; "
                         "cat /tmp/err; echo \"lines $(wc -l </tmp/out)\"; exit $rc")
    boot = g.run(k, timeout=3000)
    rows = []
    for n in counts:
        floors, times = [], []
        for r in range(plan[n]):
            text, rc = boot.section(f"floor-{n}-{r}")
            assert rc == 0, f"{name}: the floor with {n} functions failed:\n{text[-2000:]}"
            floors.append(mass.floors(text))
            text, rc = boot.section(f"btfgen-{n}-{r}")
            assert rc == 0, f"{name}: btfgen with {n} functions failed:\n{text[-2000:]}"
            times.append(mass.timings(text))
        rows.append({"functions": n, "rounds": plan[n],
                     "floor": _median([f[("floor", n)] for f in floors]),
                     "pair": _median([f[("pair", n)] for f in floors if ("pair", n) in f]),
                     "btfgen": _median([(t["run: attach"], t["run: detach"]) for t in times]),
                     "start": {s: _median([(t.get(f"run: {s}", 0.0),) for t in times])[0]
                               for s in STAGES}})
    result = {"target": name, "kernel": k.release, "attach": mode, "boot_s": boot.seconds,
              "build": build_stages, "attachable": len(attachable),
              "candidates": len(candidates),
              "date": datetime.date.today().isoformat(), "rows": rows}
    if "all" in sizes:
        text, rc = boot.section("events")
        lines = int(re.search(r"^lines (\d+)$", text, re.M).group(1))
        lost = re.search(r"^btfgen_trace: (\d+) records lost", text, re.M)
        tracing = mass.timings(text).get("run: tracing")
        result["events"] = {"rc": rc, "lines": lines, "seconds": tracing,
                            "per_second": lines / tracing if tracing else None,
                            "lost": int(lost.group(1)) if lost else None}
    return result


def _median(pairs: list[tuple]) -> tuple | None:
    """Each column's median over the rounds."""
    return tuple(statistics.median(col) for col in zip(*pairs)) if pairs else None


def table(result: dict) -> str:
    if "skipped" in result:
        return f"{result['target']}: skipped ({result['skipped']})"
    out = [f"{result['target']} ({result['kernel']}, {result['attach']}, {result['date']}, "
           f"boot {result['boot_s']:.0f} s; seconds, medians of the rounds)",
           f"{'functions':>9} {'floor att':>9} {'pair att':>9} {'btfgen':>9} {'x floor':>7} "
           f"{'x pair':>6} | {'floor det':>9} {'pair det':>9} {'btfgen':>9} {'x floor':>7} | "
           "btfgen's start: " + ", ".join(STAGES)]
    for r in result["rows"]:
        (fa, fd), (ba, bd) = r["floor"], r["btfgen"]
        pa, pd = r["pair"] or (None, None)

        def s(v):
            return f"{v:9.3f}" if v is not None else f"{'-':>9}"

        def x(a, b):
            return f"{a / b:.2f}" if a is not None and b else "-"
        out.append(f"{r['functions']:>9} {s(fa)} {s(pa)} {s(ba)} {x(ba, fa):>7} {x(ba, pa):>6} | "
                   f"{s(fd)} {s(pd)} {s(bd)} {x(bd, fd):>7} | "
                   + ", ".join(f"{v:.3f}" if v is not None else "-"
                               for v in r["start"].values()))
    out.append(f"attachable {result['attachable']}, less the deny list {result['candidates']}, "
               f"traced {result['rows'][-1]['functions']}; the whole kernel's build (host): "
               + ", ".join(f"{k} {v:.2f}" for k, v in result["build"].items()))
    ev = result.get("events")
    if ev:
        rate = f"{ev['per_second']:.0f}/s" if ev["per_second"] else "-"
        out.append(f"events through the generic decoder, every function attached: {ev['lines']} "
                   f"in {ev['seconds']:.2f} s ({rate}), {ev['lost']} lost, exit {ev['rc']}")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="unstable-amd64,unstable-arm64,bookworm-i386")
    p.add_argument("--sizes", default="10,100,1000,all")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of each size but the whole kernel's (once); medians shown")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    sizes = args.sizes.split(",")
    if any(s != "all" and not s.isdigit() for s in sizes):
        p.error("--sizes: numbers or 'all'")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-mass-") as tmp:
        for name in args.targets.split(","):
            if name not in TARGETS:
                p.error(f"no target {name!r}")
            result = measure(name, sizes, Path(tmp), args.rounds)
            print(table(result), flush=True)
            results.append(result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
