#!/usr/bin/env python3
"""Mass attach at the kernel's floor: `btfgen trace --kernel` attaching and detaching 10, 100,
1,000 and every attachable kernel function, beside empty BPF programs on the same functions,
in the same guest (QEMU, TCG) in the same boot.

  python3 benchmarks/bench_mass_attach.py [--targets unstable-amd64,unstable-arm64,bookworm-i386]
          [--sizes 10,100,1000,all] [--rounds 3] [--phases] [--per-call ROUNDS] [--json FILE]

Attachable: the guest's available_filter_functions that its BTF has (asked of the guest once,
kept in the live cache), less btfgen's deny list (btfgen/trace/deny.txt), less what the build
leaves out (static functions of one name with different prototypes). Each size is spread over
that list. The floors, an empty program each: on one kprobe_multi link ("floor"), on an entry
and a return link ("pair": what --attach multi attaches), on one kprobe.session link
("session": the link kind btfgen's kprobe path takes on 7.2, which registers return hooks an
entry-only link does not: the fair floor for it), and where the build made the trampoline's
programs (x86_64 7.2) on one tracing_multi link of an fsession.multi program ("tramp", beside
`--attach tracing-multi`); with the memory each floor's links took (MemAvailable). btfgen runs
`--attach session` (on 6.1, no kprobe_multi: one kprobe each, and no "all"). btfgen's figures
are its run side's own `--timings` lines (attach: its links; detach: the same, not the fork
tracepoint's nor the object). Floors and btfgen run one after the other, size by size, round
by round; the table gives each column's median and each ratio's median over the rounds (a
round's btfgen over the same round's floor). --phases takes btfgen's attach stage apart in one
guest process (the cookies; btfgen's link against the empty program's, alternately; as forked
as the run side is before it attaches). --per-call: a getppid() loop's cost a call with an
empty program on __task_pid_nr_ns by each way of attaching. Then events per second through the
generic decoder with every function attached, while `ls`, `cat` and a shell loop run. Needs
QEMU and the network once (the live tests' cache).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # as pytest imports it (the cache pickles its classes)

from btfgen.btf.reader import open_btf  # noqa: E402
from btfgen.trace import build as trace_build  # noqa: E402
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

# --phases: btfgen's attach stage taken apart in one process of the guest. The trace object is
# loaded as the run side loads it (its own _load_and_attach, the link creation held back); then,
# alternately, the empty session program and btfgen's (each a kprobe.session link on the same
# functions), timing the cookies' computation, the link's creation and its destruction apart.
PHASES_PY = """\
import sys, time
sys.path.insert(0, "/")
from btfgen_probe import attach, manifest as mf, run
from btfgen_probe.bpf_object import BpfObject
from btfgen_probe.options import Options
d = run.Path(sys.argv[1])
t = time.perf_counter
def say(what, took):
    print(f"phase {what} {took:.6f}", flush=True)
a = t()
m = mf.load_manifest(d)
dec = mf.load_decoders(d, m)
say("decoders", t() - a)
if sys.argv[2:] == ["fork"]:  # as the run side forks the command it will trace
    from btfgen_probe.processes import Gated
    child = Gated(["true"])
keep = list(range(len(m.functions)))
names = [m.functions[i] for i in keep]
specs = (d / m.specs).read_bytes()
a = t()
cookie = mf.cookies(dec, specs, len(m.functions), m.byte_order)
say("cookies", t() - a)
held = []
attach.attach_functions = lambda *args: held.append(args)
mode = attach.attach_modes("session", True, m)[0]
obj = BpfObject(str(d / mode.object), bpf_syscall=m.bpf_syscall)
the_run = run.Run(d, Options(command=[]))
the_run.keep = keep
a = t()
the_run.load_and_attach(obj, mode)
say("load", t() - a)
empty = BpfObject("/empty.bpf.o", bpf_syscall=m.bpf_syscall)
empty.expect_kprobe_multi("empty_session", session=True)
empty.load()
cooks = [cookie[i] for i in keep]
for r in range(2):
    for who, o, p, c in (("empty", empty, "empty_session", list(range(len(keep)))),
                         ("btfgen", obj, "trace_session", cooks))[::1 if r == 0 else -1]:
        a = t()
        link = o.attach_kprobe_multi(p, names, c, session=True)
        b = t()
        link.destroy()
        o.links.remove(link)
        say(f"{who}-attach", b - a)
        say(f"{who}-detach", t() - b)
obj.close()
empty.close()
if sys.argv[2:] == ["fork"]:
    child.cancel()
"""
# --per-call: what a call of one function costs under each way of attaching an empty program,
# by a loop of getppid() (which calls __task_pid_nr_ns once) in a static C program, timed bare
# and with the program attached, round after round in one boot. The trampoline's programs are
# their own object: each names its function at load.
CALL_FUNCTION = "__task_pid_nr_ns"
CALL_LOOP_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv)
{
	long n = atol(argv[1]);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.3f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
"""
CALL_BPF = """\
#define SEC(name) __attribute__((section(name), used))
SEC("kprobe") int k(void *ctx) { return 0; }
SEC("kprobe") int k_multi(void *ctx) { return 0; }
SEC("kprobe") int k_session(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
"""
CALL_TRAMPOLINE_BPF = """\
#define SEC(name) __attribute__((section(name), used))
SEC("fentry/FUNCTION") int fentry(void *ctx) { return 0; }
SEC("fexit/FUNCTION") int fexit(void *ctx) { return 0; }
SEC("kprobe") int fsession(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
""".replace("FUNCTION", CALL_FUNCTION)
CALL_PY = """\
import subprocess, sys
from btfgen_probe import bpf_object, syscall as sc
syscall, calls, rounds, f = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
btf_id = int(sys.argv[5])  # f's in the kernel's BTF, for a tracing_multi link; 0: none here
obj = bpf_object.BpfObject("/call.bpf.o", bpf_syscall=syscall)
obj.expect_kprobe_multi("k_multi")
obj.expect_kprobe_multi("k_session", session=True)
obj.load()
tramp = bpf_object.BpfObject("/call-tramp.bpf.o", bpf_syscall=syscall)
if btf_id:
    tramp.expect_tracing("fsession", sc.BPF_TRACE_FSESSION, f)
else:
    tramp.set_autoload("fsession", False)
tramp.load()
multi = bpf_object.BpfObject("/empty-tramp.bpf.o", bpf_syscall=syscall)
if btf_id:
    multi.expect_tracing("empty_fsession_multi", sc.BPF_TRACE_FSESSION_MULTI)
    multi.expect_tracing("empty_fentry_multi", sc.BPF_TRACE_FENTRY_MULTI)
    multi.load()
def loop():
    return float(subprocess.run(["/loop", calls], capture_output=True, check=True).stdout)
modes = {
    "kprobe": lambda: obj.attach_kprobe("k", f, 0),
    "kprobe+kretprobe": lambda: (obj.attach_kprobe("k", f, 0),
                                 obj.attach_kprobe("k", f, 0, retprobe=True)),
    "kprobe_multi": lambda: obj.attach_kprobe_multi("k_multi", [f], [0]),
    "kprobe_multi pair": lambda: (obj.attach_kprobe_multi("k_multi", [f], [0]),
                                  obj.attach_kprobe_multi("k_multi", [f], [0], retprobe=True)),
    "kprobe.session": lambda: obj.attach_kprobe_multi("k_session", [f], [0], session=True),
    "fentry": lambda: tramp.attach("fentry"),
    "fentry+fexit": lambda: (tramp.attach("fentry"), tramp.attach("fexit")),
}
if btf_id:
    modes.update({
        "fsession": lambda: tramp.attach_tracing("fsession", sc.BPF_TRACE_FSESSION, 0, "f"),
        "fentry.multi": lambda: multi.attach_tracing_multi(
            "empty_fentry_multi", [btf_id], [0], sc.BPF_TRACE_FENTRY_MULTI, "fentry.multi"),
        "fsession.multi": lambda: multi.attach_tracing_multi(
            "empty_fsession_multi", [btf_id], [0], sc.BPF_TRACE_FSESSION_MULTI, "fs.multi"),
    })
for r in range(rounds):
    for name, attach in modes.items():
        bare = loop()
        attach()
        on = loop()
        for o in (obj, tramp, multi):
            for link in reversed(o.links):
                link.destroy()
            o.links.clear()
        print(f"call {name}|{bare:.3f}|{on:.3f}", flush=True)
"""
CALL_LINE = re.compile(r"^call ([^|]+)\|(\d+\.\d+)\|(\d+\.\d+)$", re.M)
CALLS = 300_000  # getppid() calls a loop


def call_files(out: Path) -> dict[str, bytes]:
    """The guest's files for --per-call: the loop (static, the guest has no C library of the
    host's), the programs, the script."""
    clang = shutil.which("clang-19") or shutil.which("clang")
    (out / "loop.c").write_text(CALL_LOOP_C)
    subprocess.run(["gcc", "-O2", "-static", "-o", str(out / "loop"), str(out / "loop.c")],
                   check=True)
    files = {"loop": (out / "loop").read_bytes(), "call.py": CALL_PY.encode()}
    for name, text in (("call", CALL_BPF), ("call-tramp", CALL_TRAMPOLINE_BPF)):
        (out / f"{name}.bpf.c").write_text(text)
        subprocess.run([clang, "-O2", "-target", "bpfel", "-c", str(out / f"{name}.bpf.c"),
                        "-o", str(out / f"{name}.bpf.o")], check=True)
        files[f"{name}.bpf.o"] = (out / f"{name}.bpf.o").read_bytes()
    return files


PHASE_LINE = re.compile(r"^phase (\S+) (\d+\.\d+)$", re.M)


def measure(name: str, sizes: list[str], work: Path, rounds: int, phases: bool,
            per_call: int) -> dict:
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
    try:
        everything = mass.build_trace(btf, target.arch, candidates, out / "trace-all",
                                      stages=build_stages)
        no_trampoline = ""
    except trace_build.BuildError as e:
        # The trampoline's program for every function may not build (said in the table);
        # the kprobe path's rows need the directory still.
        no_trampoline = str(e).splitlines()[0][:200]
        shutil.rmtree(out / "trace-all")
        everything = mass.build_trace(btf, target.arch, candidates, out / "trace-all",
                                      stages=build_stages, trampoline=False)
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
    g.file("empty-tramp.bpf.o", mass.empty_object(out, "empty-tramp",
                                                  mass.EMPTY_TRAMPOLINE_BPF).read_bytes())
    # The trampoline's rows where the build made its fsession.multi program (x86_64 7.2): an
    # empty program on one tracing_multi link of the functions it takes, beside btfgen's
    # --attach tracing-multi (which puts the rest on a kprobe.session link of the same run).
    tramp = {}
    for n in counts:
        d = out / ("trace-all" if n == len(everything) else f"trace-{n}")
        m = json.loads((d / "trace.json").read_text())
        t = m.get("trampoline") or {}
        if mode == "session" and "fsession_multi" in t.get("objects", {}):
            # keyed by the function's index (a string: JSON), as the run side splits them
            refused = t.get("refused", {})
            ids = [i for j, i in enumerate(m["btf_ids"]) if str(j) not in refused]
            g.file(f"tramp-ids-{n}", " ".join(map(str, ids)).encode())
            tramp[n] = (len(ids), len(refused))
    g.file("phases.py", PHASES_PY.encode(), 0o755)
    if per_call and mode == "session":
        for path, data in call_files(out).items():
            g.file(path, data, 0o755)
    # One kprobe each is a perf event file each (two for btfgen: entry and return): past the
    # default 1,024 open files both would fail with EMFILE.
    env = f"cd / && ulimit -n 65536 && export LD_LIBRARY_PATH={python_guest.library_path(target)};"
    syscall = json.loads((out / "trace-all" / "trace.json").read_text())["bpf_syscall"]
    # Floors and btfgen one after the other, size by size, round by round: the host's load
    # drifts (TCG on a shared machine), and what is compared should see the same. Ratios are
    # taken round by round (btfgen's over the floors' just before), then their median.
    for n in counts:
        d = "trace-all" if n == len(everything) else f"trace-{n}"
        for r in range(rounds):
            # an empty program's links
            floor = "single" if mode == "single" else "multi+tramp" if n in tramp else "multi"
            g.step(f"floor-{n}-{r}", f"{env} {py.python} floor.py {floor} {syscall} {n} 2>&1")
            g.step(f"btfgen-{n}-{r}", f"{env} {py.python} /{d}/btfgen_trace.py --run /{d} "
                                      f"--timings --attach {mode} -- true 2>&1 >/dev/null")
            if n in tramp:
                g.step(f"btfgent-{n}-{r}", f"{env} {py.python} /{d}/btfgen_trace.py --run /{d} "
                                           "--timings --attach tracing-multi -- true 2>&1 "
                                           ">/dev/null")
            if phases and mode == "session":
                g.step(f"phases-{n}-{r}", f"{env} {py.python} phases.py /{d} 2>&1")
                g.step(f"phasesf-{n}-{r}", f"{env} {py.python} phases.py /{d} fork 2>&1")
    if per_call and mode == "session":
        ids = {f.name: f.id for f in open_btf(str(btf)).funcs()}
        g.step("per-call", f"{env} {py.python} call.py {syscall} {CALLS} {per_call} "
                           f"{CALL_FUNCTION} {ids[CALL_FUNCTION] if tramp else 0} 2>&1")
    if "all" in sizes:
        g.step("events", f"{env} {py.python} /trace-all/btfgen_trace.py --run /trace-all "
                         f"--timings -- sh -c '{WORKLOAD}' >/tmp/out 2>/tmp/err; rc=$?; "
                         "cat /tmp/err; echo \"lines $(wc -l </tmp/out)\"; exit $rc")
    load_before = os.getloadavg()
    boot = g.run(k, timeout=6000)
    load_after = os.getloadavg()
    rows = []
    tramp_failed: dict[int, str] = {}  # btfgen's (n) or the empty link's (-n) refusal
    for n in counts:
        floors, times, parts, ttimes = [], [], [], []
        for r in range(rounds):
            text, rc = boot.section(f"floor-{n}-{r}")
            assert rc == 0, f"{name}: the floor with {n} functions failed:\n{text[-2000:]}"
            floors.append(mass.floors(text))
            floor_text = text
            text, rc = boot.section(f"btfgen-{n}-{r}")
            assert rc == 0, f"{name}: btfgen with {n} functions failed:\n{text[-2000:]}"
            times.append(mass.timings(text))
            if n in tramp:
                text, rc = boot.section(f"btfgent-{n}-{r}")
                if rc == 0:
                    ttimes.append(mass.timings(text))
                else:  # said in the table, the kprobe rows kept
                    tramp_failed.setdefault(n, text.strip().splitlines()[-1][:300])
            if f"tramp {tramp[n][0] if n in tramp else 0} refused" in floor_text:
                tramp_failed.setdefault(
                    -n, re.search(r"^tramp \d+ refused: (.*)$", floor_text, re.M).group(1))
            if phases and mode == "session":
                seen: dict[str, list[float]] = {}
                for step, tag in (("phases", ""), ("phasesf", "forked ")):
                    text, rc = boot.section(f"{step}-{n}-{r}")
                    assert rc == 0, f"{name}: {step} with {n} functions failed:\n{text[-2000:]}"
                    for m in PHASE_LINE.finditer(text):
                        seen.setdefault(tag + m.group(1), []).append(float(m.group(2)))
                parts.append({k: statistics.median(v) for k, v in seen.items()})
        btfgen = [(t["run: attach"], t["run: detach"]) for t in times]
        sess = [f.get(("session", n)) for f in floors]
        row = {"functions": n, "rounds": rounds,
               "floor": _median([f[("floor", n)] for f in floors]),
               "pair": _median([f[("pair", n)] for f in floors if ("pair", n) in f]),
               "session": _median([s for s in sess if s]),
               "btfgen": _median(btfgen),
               "x_session": _median([(b[0] / s[0], b[1] / s[1])
                                     for b, s in zip(btfgen, sess) if s]),
               "x_floor": _median([(b[0] / f[("floor", n)][0], b[1] / f[("floor", n)][1])
                                   for b, f in zip(btfgen, floors)]),
               "start": {s: _median([(t.get(f"run: {s}", 0.0),) for t in times])[0]
                         for s in STAGES}}
        fl = [f[("tramp", tramp[n][0])] for f in floors if ("tramp", tramp.get(n, (0,))[0]) in f]
        if ttimes and len(fl) == len(ttimes):
            bt = [(t["run: attach"], t["run: detach"]) for t in ttimes]
            row.update(tramp=_median(fl), btfgen_tramp=_median(bt), taken=tramp[n],
                       x_tramp=_median([(b[0] / f[0], b[1] / f[1]) for b, f in zip(bt, fl)]))
        if parts:
            row["phases"] = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
            row["phases_x"] = [statistics.median(p[f"{tag}btfgen-attach"] /
                                                 p[f"{tag}empty-attach"] for p in parts)
                               for tag in ("", "forked ")]
        rows.append(row)
    result = {"target": name, "kernel": k.release, "attach": mode, "boot_s": boot.seconds,
              "build": build_stages, "attachable": len(attachable),
              "candidates": len(candidates), "no_trampoline": no_trampoline,
              "tramp_failed": {str(k): v for k, v in tramp_failed.items()},
              "load": [load_before[0], load_after[0]],
              "date": datetime.date.today().isoformat(), "rows": rows}
    if per_call and mode == "session":
        text, rc = boot.section("per-call")
        assert rc == 0, f"{name}: per-call failed:\n{text[-2000:]}"
        seen: dict[str, list[tuple[float, float]]] = {}
        for m in CALL_LINE.finditer(text):
            seen.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3))))
        result["per_call"] = {k: {"bare": statistics.median(b for b, _ in v),
                                  "added": statistics.median(o - b for b, o in v),
                                  "rounds": len(v)} for k, v in seen.items()}
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
    load = result["load"]
    out = [f"{result['target']} ({result['kernel']}, {result['attach']}, {result['date']}, "
           f"boot {result['boot_s']:.0f} s, host load {load[0]:.1f} before, {load[1]:.1f} "
           "after; seconds, medians of the rounds; x: median of each round's ratio)",
           f"{'functions':>9} {'floor':>8} {'pair':>8} {'session':>8} {'btfgen':>8} "
           f"{'x sess':>6} {'x floor':>7} | {'floor':>8} {'pair':>8} {'session':>8} "
           f"{'btfgen':>8} {'x sess':>6} | btfgen's start: " + ", ".join(STAGES)]

    def s(v):
        return f"{v:8.3f}" if v is not None else f"{'-':>8}"

    def x(v, i):
        return f"{v[i]:.2f}" if v else "-"
    for r in result["rows"]:
        (fa, fd, _), (ba, bd) = r["floor"], r["btfgen"]
        pa, pd, _ = r["pair"] or (None, None, None)
        sa, sd, _ = r["session"] or (None, None, None)
        out.append(f"{r['functions']:>9} {s(fa)} {s(pa)} {s(sa)} {s(ba)} "
                   f"{x(r['x_session'], 0):>6} {x(r['x_floor'], 0):>7} | {s(fd)} {s(pd)} "
                   f"{s(sd)} {s(bd)} {x(r['x_session'], 1):>6} | "
                   + ", ".join(f"{v:.3f}" if v is not None else "-"
                               for v in r["start"].values()))
    for r in result["rows"]:
        if "tramp" in r:
            (ta, td, tk), (ba, bd) = r["tramp"], r["btfgen_tramp"]
            out.append(f"trampoline, {r['functions']} functions ({r['taken'][0]} on one "
                       f"tracing_multi link, {r['taken'][1]} refused, on a kprobe link): empty "
                       f"fsession.multi attach {ta:.3f}, detach {td:.3f}, {tk / 1024:.1f} MiB; "
                       f"btfgen --attach tracing-multi attach {ba:.3f} "
                       f"({r['x_tramp'][0]:.2f}x), detach {bd:.3f} ({r['x_tramp'][1]:.2f}x)")
        mem = [(k, r[k][2]) for k in ("floor", "pair", "session") if r.get(k)]
        out.append(f"memory the empty links took, {r['functions']} functions (MemAvailable "
                   "before and after, median): "
                   + ", ".join(f"{k} {v / 1024:.1f} MiB" for k, v in mem))
        if "phases" in r:
            out.append(f"phases, {r['functions']} functions (one process; medians): "
                       + ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items())
                       + "; btfgen's link / the empty one's {:.2f}, forked {:.2f}".format(
                           *r["phases_x"]))
    traced = result["rows"][-1]["functions"] if result["rows"] else 0
    out.append(f"attachable {result['attachable']}, less the deny list {result['candidates']}, "
               f"traced {traced}; the whole kernel's build (host): "
               + ", ".join(f"{k} {v:.2f}" for k, v in result["build"].items()))
    if result.get("no_trampoline"):
        out.append("the whole kernel's trace directory was built without the trampoline's "
                   f"programs: {result['no_trampoline']}")
    for n, why in result.get("tramp_failed", {}).items():
        who = "the empty fsession.multi link" if int(n) < 0 else "btfgen --attach tracing-multi"
        out.append(f"trampoline, {abs(int(n))} functions: {who} failed: {why}")
    calls = result.get("per_call")
    if calls:
        out.append(f"per call of {CALL_FUNCTION} (getppid() in a loop; ns a call, medians of "
                   f"{max(c['rounds'] for c in calls.values())} rounds, each against the bare "
                   "loop just before): " + ", ".join(
                       f"{k} +{c['added']:.0f}" for k, c in calls.items())
                   + f"; the bare loop {statistics.median(c['bare'] for c in calls.values()):.0f}")
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
                   help="rounds of each size; medians shown")
    p.add_argument("--phases", action="store_true",
                   help="also btfgen's attach stage taken apart, in the session guests")
    p.add_argument("--per-call", type=int, default=0, metavar="ROUNDS",
                   help="also each attach mode's cost a call of one function, in the session "
                        "guests, this many rounds")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    sizes = args.sizes.split(",") if args.sizes else []
    if any(s != "all" and not s.isdigit() for s in sizes):
        p.error("--sizes: numbers or 'all'")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-mass-") as tmp:
        for name in args.targets.split(","):
            if name not in TARGETS:
                p.error(f"no target {name!r}")
            result = measure(name, sizes, Path(tmp), args.rounds, args.phases, args.per_call)
            print(table(result), flush=True)
            results.append(result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
