"""The fprobe module's values (examples/fprobe, btfgen's kernel C over a real struct ftrace_regs)
against the kernel's own BTF fetcher and against `btfgen trace`, on the same calls.

In one guest: `btfgen trace` finds which of the fetcher workload's ~1,000 functions it calls
(test_fetcher.py's first step), those get the kernel's fprobe events (`$arg*`, `$retval`), the
module is attached to every function of the list ftrace can attach to (written to
/proc/btfgen_fprobe_functions: one fprobe, a list of names), and then, while the module's
reader records, `btfgen trace --record` traces the workload (unpaced) with the kernel's events
limited to it: three tracers on the same calls. On the host each of the module's calls is
paired with the kernel's event of the same call (fetcher.pair) and compared value by value
(fetcher.compare: where the kernel's fetcher is right, every value must agree; elsewhere the
kinds are counted), and paired by time with `btfgen trace`'s calls (_pair_by_time), where every
value both hold must be equal (arguments and return values, stack arguments and structs).

Only amd64 and arm64 by default (minutes of fprobe registration under TCG);
BTFGEN_LIVE_FETCHER_ALL=1 adds riscv64, s390x and ppc64el (there `btfgen trace` on the BPF
trampoline, one fsession program a function, on a few of the functions: see FSESSION).

The amd64 guest runs test_fetcher.py's steps too once the module is unloaded (test_fetcher.SHARED:
its recorded and printing runs, on the same called functions' events, set up once for both), and
test_fetcher's checks on them: each test's failures are reported, neither hiding the other's.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import btfgen
from btfgen.btf.reader import open_btf

from . import cache, fetcher, kbuild, modules, python_guest, test_fetcher
from .conftest import btf_for, kernel_for, unavailable
from .test_fetcher import JIT, TRACING, _dump, _undump

pytestmark = pytest.mark.live

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLE = ROOT / "examples" / "fprobe"
GUESTS = ["unstable-amd64", "unstable-arm64", "unstable-riscv64", "unstable-s390x",
          "unstable-ppc64el"]
DEFAULT = {"unstable-amd64", "unstable-arm64"}
# Guests whose kernel's fprobe events are kept off (and the step that finds the functions the
# workload calls, which only chooses the events' functions): ppc64el, where the events are
# fprobes too and btfgen trace runs beside them on the trampoline only (FSESSION).
NO_EVENTS = {"unstable-ppc64el"}
# Where btfgen trace runs with `--attach fsession` on these functions alone (at most
# attach.FSESSION_MAX: one program a function, each verified), not on the whole list. On
# Debian's 7.2.13 ppc64el kernel a BPF kretprobe does not run on a function while an fprobe is
# on it (the module is one; targets.py's multi_broken), and its kprobe.session links (auto's
# choice there) are kprobe_multi links, whose cookie names the list's first function in every
# call (an earlier run here recorded 17,760 of btfgen trace's 18,006 entries as
# __arch_override_mprotect_pkey's). The trampoline runs beside the fprobe: in a ppc64el guest,
# on 10 functions, fsession programs saw 487 entries and 487 exits with the module attached as
# without it, single kprobes 487 entries and no exit; tracing_multi links are refused there
# (EOPNOTSUPP). The functions: 12 of the list's that the workload calls most (handle_mm_fault,
# ...; counted in an earlier ppc64el run of the module), and four with arguments on the stack
# (do_mmap's ninth, inet_lhash2_lookup's, ...; ppc64le passes eight in registers), every one
# taken by the trampoline.
FSESSION = {"unstable-ppc64el": (
    "handle_mm_fault", "__handle_mm_fault", "do_anonymous_page", "filemap_get_entry",
    "shmem_get_folio_gfp", "vfs_read", "ksys_read", "shmem_write_begin", "shmem_write_end",
    "getname_flags", "vfs_statx", "path_lookupat", "do_mmap", "inet_lhash2_lookup",
    "inet_lookup_reuseport", "tcp_v4_send_ack")}
ROUNDS = 4


def _guests():
    every = os.environ.get("BTFGEN_LIVE_FETCHER_ALL") == "1"
    return [pytest.param(n, marks=() if every or n in DEFAULT else pytest.mark.skip(
        reason="BTFGEN_LIVE_FETCHER_ALL=1 runs it (minutes of fprobe registration under TCG)"))
        for n in GUESTS]


def _decode(path: Path) -> list[fetcher.Call]:
    p = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "jsonl", str(path)],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    return fetcher.calls([json.loads(line) for line in p.stdout.splitlines()])


# Two tracers' stamps of one return (the module's exit handler, btfgen trace's exit program)
# are microseconds apart (median 3 us in the amd64 guest); a thread's next return of the same
# function is further.
WINDOW_NS = 1_000_000


def _pair_by_time(ours: list[fetcher.Call], theirs: list[fetcher.Call]):
    """(module call, btfgen trace call) pairs: per thread and function, each return with the
    other side's nearest in time where each is the other's nearest, within WINDOW_NS and in
    the order the two handlers run. The walk by order that pairs the kernel's events
    (fetcher.pair) misaligns in bursts of one function (page faults) where a side lacks a
    return; two recordings both stamped with the monotonic clock need no walk."""
    by: dict = defaultdict(list)
    for c in theirs:
        if c.args is not None:
            by[c.tid, c.function].append(c)
    mine: dict = defaultdict(list)
    for c in ours:
        if c.args is not None and (c.tid, c.function) in by:
            mine[c.tid, c.function].append(c)
    pairs = []
    for key, ms in mine.items():
        ts = sorted(by[key], key=lambda c: c.ns)
        ms.sort(key=lambda c: c.ns)
        tns, mns = [c.ns for c in ts], [c.ns for c in ms]
        for i, m in enumerate(ms):
            j = _nearest(tns, m.ns)
            if abs(tns[j] - m.ns) <= WINDOW_NS and _nearest(mns, tns[j]) == i:
                pairs.append((m, ts[j]))
    # One call's two exit handlers run in the order the kernel's return path calls them, the
    # same for every call (btfgen trace's first in the amd64 and arm64 guests). A pair in the
    # other order is two calls: the nearest where one side lacks the call (amd64, under load:
    # the module's handle_mm_fault paired with the trace's next one, 525 us later).
    if not pairs:
        return pairs
    order = statistics.median(t.ns - m.ns for m, t in pairs) >= 0
    return [(m, t) for m, t in pairs if (t.ns - m.ns >= 0) == order]


def _nearest(stamps: list[int], x: int) -> int:
    i = bisect.bisect_left(stamps, x)
    return min((j for j in (i - 1, i) if 0 <= j < len(stamps)), key=lambda j: abs(stamps[j] - x))


@pytest.mark.parametrize("name", _guests())
def test_module_against_the_kernels_fetcher_and_btfgen_trace(name, tmp_path):
    k = kernel_for(name)
    t = k.target
    btf_path = btf_for(k)
    names = fetcher.select(open_btf(str(btf_path)).funcs(), t.arch)
    trace_dir = tmp_path / "trace"
    proc = subprocess.run(
        [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", str(btf_path), "--arch",
         t.arch, "--build", str(trace_dir), *names], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    # The module's header and decoders, from the same BTF and list, beside the trace directory.
    files = btfgen.open(str(btf_path), arch=t.arch, ctx="ftrace_regs").generate(
        names, ("kernel", "python"))
    gen = trace_dir / "gen"
    gen.mkdir()
    for n, text in files.items():
        (gen / n).write_text(text)
    shutil.copy(EXAMPLE / "btfgen_fprobe_record.py", trace_dir / "btfgen_fprobe_record.py")
    try:
        ko = kbuild.build_module(name, modules.sources("fprobe", files["btfgen.kernel.h"].encode()),
                                 "btfgen_fprobe", extra_cflags=("-Werror",))
    except kbuild.debian.PackageError as e:
        unavailable(f"{name}: the module's toolchain cannot be had: {e}")

    g, py = python_guest.trace_guest(t, trace_dir)
    run_dir, attach = "/trace", ""
    if name in FSESSION:
        picked = FSESSION[name]
        assert set(picked) <= set(names), sorted(set(picked) - set(names))
        fs_dir = tmp_path / "fsession"
        proc = subprocess.run(
            [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", str(btf_path),
             "--arch", t.arch, "--build", str(fs_dir), *picked],
            capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        python_guest.add_directory(g, t, fs_dir, "fsession")
        run_dir, attach = "/fsession", " --attach fsession"
    g.file("btfgen_fprobe.ko", ko.read_bytes())
    g.file("functions.txt", ("\n".join(names) + "\n").encode())
    for script in ("fetcher_probes.py", "fetcher_workload.py"):
        g.file(script, (HERE / script).read_bytes(), 0o755)
    env = f"LD_LIBRARY_PATH={python_guest.library_path(t)}"
    events = name not in NO_EVENTS
    g.step("prepare", f"ifconfig lo 127.0.0.1 up; [ -e {JIT} ] && echo 1 > {JIT}; true")
    if events:
        g.step("called", f"cd /trace && {env} {py.python} btfgen_trace.py --run /trace -- "
                         f"{py.python} /fetcher_workload.py 2 >/tmp/called.out "
                         "2>/tmp/called.err; rc=$?; "
                         "sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)(.*/\\1/p' /tmp/called.out "
                         "| sort -u >/tmp/called; tail -3 /tmp/called.err; "
                         "echo \"$(grep -c . /tmp/called) called\"; exit $rc")
        g.step("setup", f"cd {TRACING} && echo mono > trace_clock && echo 65536 > buffer_size_kb "
                        "&& echo 1 > options/event-fork && "
                        "{ sleep 100000 & echo $! >> set_event_pid; } && "
                        f"{env} {py.python} /fetcher_probes.py {fetcher.GROUP} /functions.txt "
                        "/tmp/called")
    # Every function of the list ftrace can attach to (a name twice in the list of attachable
    # functions: once), by name; the module's own count of what it probes.
    g.step("load", "insmod /btfgen_fprobe.ko && "
                   f"sort -u {TRACING}/available_filter_functions | grep -xFf /functions.txt "
                   "> /tmp/attach; cat /tmp/attach > /proc/btfgen_fprobe_functions; "
                   "echo \"$(grep -c . /tmp/attach) attachable\"; cat /proc/btfgen_fprobe_stats; "
                   "grep -q '^probing [1-9]' /proc/btfgen_fprobe_stats")
    g.step("record", f"echo > {TRACING}/trace; echo 1 > {TRACING}/tracing_on; cd /trace && "
                     f"{{ {env} {py.python} btfgen_fprobe_record.py gen /tmp/m.btfrec & }}; "
                     f"R=$!; sleep 8; cd {run_dir} && {env} {py.python} btfgen_trace.py "
                     f"--run {run_dir}{attach} --record /tmp/b.btfrec -- "
                     f"sh -c 'echo $$ >> {TRACING}/set_event_pid; exec {py.python} "
                     f"/fetcher_workload.py {ROUNDS}' 2>&1; rc=$?; kill $R; wait $R; "
                     f"echo 0 > {TRACING}/tracing_on; cat /proc/btfgen_fprobe_stats; exit $rc")
    g.step("stats", f"cat {TRACING}/per_cpu/cpu*/stats")
    g.step("dump", f"{_dump('trace', TRACING + '/trace')}; {_dump('module', '/tmp/m.btfrec')}; "
                   f"{_dump('btfgen', '/tmp/b.btfrec')}")
    g.step("unload", "rmmod btfgen_fprobe && ! grep -q btfgen_fprobe /proc/modules")
    shared = events and name in test_fetcher.SHARED
    if shared:
        test_fetcher.add_steps(g, name, py, env, test_fetcher.SHARED_PREFIX)
    boot = g.run(k, timeout=3000)
    checks = [("the module's checks",
               lambda: _checked(name, k, boot, names, btf_path, tmp_path, events))]
    if shared:
        checks.append(("test_fetcher.py's checks (in this guest: test_fetcher.SHARED)",
                       lambda: test_fetcher.checked(name, k, boot, names, btf_path,
                                                    test_fetcher.SHARED_PREFIX)))
    failures = []
    for what, check in checks:
        try:
            check()
        except AssertionError as e:
            failures.append(f"{what} failed: {e}")
    assert not failures, "\n\n".join(failures)


def _checked(name: str, k, boot, names: list[str], btf_path: Path, tmp_path: Path,
             events: bool) -> None:
    """The module's values against the kernel's fetcher (where its events are on) and against
    btfgen trace, on a boot that ran this test's steps."""
    t = k.target
    for step in ("prepare", *(("called", "setup") if events else ()), "load", "record", "unload"):
        out, rc = boot.section(step)
        assert rc == 0, f"{name}: step {step} failed (exit {rc}):\n{out[-3000:]}"
    said, _ = boot.section("record")
    module_stats = dict(m for m in re.findall(r"^(\w+) (-?\d+)$", said, re.M))
    dump, _ = boot.section("dump")
    module_rec = tmp_path / "m.btfrec"
    module_rec.write_bytes(_undump(dump, "module"))
    btfgen_rec = tmp_path / "b.btfrec"
    btfgen_rec.write_bytes(_undump(dump, "btfgen"))
    cache.write_atomic(cache.ROOT / "results" / f"module-{name}.btfrec", module_rec.read_bytes())
    cache.write_atomic(cache.ROOT / "results" / f"module-{name}-trace.btfrec",
                       btfgen_rec.read_bytes())
    ours = _decode(module_rec)
    theirs = _decode(btfgen_rec)
    placed = btfgen.open(str(btf_path), arch=t.arch, ctx="ftrace_regs")
    layouts = {n: placed.layout(n) for n in names}
    summary = {"kernel": k.release, "traced": len(names), "module": module_stats,
               "module_calls": len(ours), "btfgen_calls": len(theirs),
               "boot_s": round(boot.seconds, 1)}
    if events:
        kernel_events = fetcher.parse_trace(_undump(dump, "trace").decode(errors="replace"))
        lacking: set = set()
        pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel_events, ours, names,
                                                        lacking=lacking)
        pairs, aside = fetcher.undecided(pairs, lone_kernel, lone_ours, names, lacking)
        result = fetcher.compare(pairs, layouts, t.arch)
        stats, _ = boot.section("stats")
        summary["kernel_fetcher"] = {
            "kernel_calls": len(kernel_events), "paired": len(pairs),
            "kernel_only": len(lone_kernel), "undecided": len(aside),
            "compared": result.compared,
            "overrun": sum(int(n) for n in re.findall(r"^overrun: (\d+)", stats, re.M)),
            "kinds": {kind: vars(tally) for kind, tally in sorted(result.kinds.items())},
            "failures": result.failures[:50]}
    # Against btfgen trace: the same calls paired the same way, every value both hold equal.
    pairs_b = _pair_by_time(ours, theirs)
    equal = differ = 0
    stack_equal = 0
    differences = []
    for c, other in pairs_b:
        fn = layouts[c.function]
        for a in fn.args:
            mine, its = c.args.get(a.name), other.args.get(a.name)
            if _unavailable(mine) or _unavailable(its):
                continue
            if mine == its:
                equal += 1
                stack_equal += any(type(p).__name__ == "StackPiece" for p in a.pieces)
            else:
                differ += 1
                differences.append(f"{c.function} {a.name}: module {mine!r}, trace {its!r}")
        if fn.ret is not None and not _unavailable(c.ret) and not _unavailable(other.ret):
            if c.ret == other.ret:
                equal += 1
            else:
                differ += 1
                differences.append(f"{c.function} return: module {c.ret!r}, trace {other.ret!r}")
    attached = re.search(r"^btfgen_trace: attaching (.*)$", said, re.M)
    summary["btfgen_trace"] = {"attached": attached.group(1) if attached else None,
                               "calls": sum(c.args is not None for c in theirs),
                               "paired": len(pairs_b), "equal": equal, "differ": differ,
                               "stack_values_equal": stack_equal,
                               "differences": differences[:50]}
    text = json.dumps(summary, indent=1, default=str)
    cache.write_atomic(cache.ROOT / "results" / f"module-fetcher-{name}.json", text.encode())
    assert int(module_stats["lost"]) == 0, text
    assert not differences, f"{name}: the module and btfgen trace disagree:\n" + \
        "\n".join(differences[:40])
    # Nearly every call btfgen trace saw whole is one the module saw (a call either tracer's
    # recursion check skipped is the other's alone).
    assert len(pairs_b) >= 0.95 * summary["btfgen_trace"]["calls"], text
    assert len(pairs_b) >= 1000 and equal >= 3000, text
    if events:
        kf = summary["kernel_fetcher"]
        assert not kf["failures"], f"{name}: the kernel's fetcher is right and the module " \
            "disagrees:\n" + "\n".join(kf["failures"][:40])
        assert kf["kinds"][fetcher.RIGHT]["agree"] >= 1000, text
        assert kf["overrun"] == 0, text


def _unavailable(v) -> bool:
    """A value a side could not give ({"unavailable": why}, {"unread": address}): not
    compared (a value inside a struct likewise makes the struct not compared)."""
    if isinstance(v, dict):
        return "unavailable" in v or "unread" in v or any(_unavailable(x) for x in v.values())
    if isinstance(v, list):
        return any(_unavailable(x) for x in v)
    return v is None
