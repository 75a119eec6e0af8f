"""`btfgen trace --count --latency` on the whole kernel in Debian's 7.2 guests: every function
the guest's ftrace can attach to that its BTF has (less the deny list) on one kprobe.session
link, counted and timed in the kernel, with one of them keyed by an argument, so a known loop
of system calls is counted exactly however many other calls the kernel makes.

The loop seeks a tmpfs file to SEEK_TO, LOOPS times: shmem_file_llseek keyed by its offset has
exactly LOOPS calls at that offset (other seeks, the interpreter's own, are other keys), each
timed. Nothing is sent per call, so nothing is lost, at any rate; the totals and the rate the
kernel sustained are kept in the live cache (benchmarks/bench_summary.py reads them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from btfgen.trace import build as trace_build
from btfgen.trace import deny

from . import cache, mass, python_guest, scenario
from .conftest import kernel_with_python

pytestmark = pytest.mark.live

LOOPS = 1000
# The whole kernel on the trampoline too, where the kernel has tracing_multi (7.2 x86_64)
WHOLE_TRAMPOLINE = ("unstable-amd64",)
MODES = ("multi", "single")  # a pair of kprobe_multi links; a kprobe and a kretprobe
LOOP = (f"import os; fd = os.open('/tmp/seek', os.O_RDWR | os.O_CREAT)\n"
        f"for _ in range({LOOPS}): os.lseek(fd, {scenario.SEEK_TO}, os.SEEK_SET)\n")
# Run in the guest on the JSON summary: the few numbers the test needs (40,000 functions' rows
# would be megabytes over the serial console).
DIGEST = r"""import json, sys
doc = json.load(open('/tmp/out'))
counts, lats = doc['counts'], doc['latencies']
key = json.loads(sys.argv[1])
def keyed(rows):
    return sum(r['count'] for r in rows if r['function'] == 'shmem_file_llseek'
               and r.get('key') == key)
print('functions-counted', len({r['function'] for r in counts}))
print('calls', sum(r['count'] for r in counts))
print('keyed-count', keyed(counts))
print('keyed-timed', keyed(lats))
print('timed', sum(r['count'] for r in lats))
print('not-counted', doc['not_counted'])
print('not-timed', json.dumps(doc['not_timed']))
print('do-exit', sum(r['count'] for r in counts if r['function'] == 'do_exit'))
"""
# shmem_file_llseek's keys: its offset argument on the whole kernel, its file's name (a capture
# path, read through three pointers) on the one function.
BY_OFFSET = "'" + json.dumps({"offset": scenario.SEEK_TO}) + "'"
NAME = "file->f_path.dentry->d_name.name"
BY_NAME = "'" + json.dumps({NAME: "seek"}) + "'"
# --by kstack (counted by the tracer from each call's event): the loop's seeks, picked out by a
# filter on the offset, counted and timed by their kernel stack
DIGEST_KSTACK = r"""import json
doc = json.load(open('/tmp/out'))
rows = [r for r in doc['counts'] if r['function'] == 'shmem_file_llseek']
print('kstack-count', sum(r['count'] for r in rows))
print('kstack-timed', sum(r['count'] for r in doc['latencies']
                          if r['function'] == 'shmem_file_llseek'))
print('kstack-unstacked', sum(r['count'] for r in rows if r['key']['kstack'] is None))
print('kstack-callers', json.dumps(sorted({f['symbol'] for r in rows
                                           for f in (r['key']['kstack'] or [])[1:3]})))
print('kstack-lost', doc['lost_records'] + doc['missed_by_kernel'])
"""
# --by ustack on the kernel function (each seek keyed by its task's user stack, unwound from the
# event by the tracer): the loop's seeks under keys of the interpreter's and libc's frames. The
# loop stays until the tracer has named its frames (its maps are read at its first stack): the
# --interval print naming the function says so; a process gone by then has unnamed frames.
LOOP_USTACK = LOOP + (
    "import time\n"
    "until = time.monotonic() + 120\n"
    "while time.monotonic() < until and 'shmem_file_llseek' not in open('/tmp/out').read():\n"
    "    time.sleep(0.2)\n")
DIGEST_USTACK = r"""import json, os
docs = [json.loads(line) for line in open('/tmp/out') if line.startswith('{')]
rows = [r for d in docs for r in d['counts'] if r['function'] == 'shmem_file_llseek']
print('ustack-count', sum(r['count'] for r in rows))
print('ustack-timed', sum(r['count'] for d in docs for r in d['latencies']
                          if r['function'] == 'shmem_file_llseek'))
print('ustack-unstacked', sum(r['count'] for r in rows if r['key']['ustack'] is None))
print('ustack-lost', sum(d['lost_records'] + d['missed_by_kernel'] for d in docs))
keys = [[r['count'], [[f['symbol'], os.path.basename(f['object'] or '?')]
                      for f in r['key']['ustack'] or []], r['key'].get('ustack_cut')]
        for r in rows]
print('ustack-keys', json.dumps(keys))
"""
# the amd64 guest's alone (arm64's kernel user stacks are test_trace_stack's)
USTACK_GUESTS = ("unstable-amd64",)
# keyed by its file's name and its return value (the new offset) together, the $retval part
# made at the exit (no errno name: the offset is positive)
BY_RETVAL = "'" + json.dumps({NAME: "seek", "$retval": scenario.SEEK_TO}) + "'"


def _ustack_counted(boot, python: str) -> None:
    """The loop's seeks counted and timed exactly by its user stack: every key's leaf the C
    library's lseek (where the system call entered the kernel), under the interpreter's own
    frames, named."""
    text, rc = boot.section("ustack")
    assert rc == 0, f"ustack: the tool failed (exit {rc}):\n{text[-3000:]}"
    got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
    assert (got["ustack-count"], got["ustack-timed"]) == (str(LOOPS), str(LOOPS)), text
    assert (got["ustack-unstacked"], got["ustack-lost"]) == ("0", "0"), text
    keys = json.loads(got["ustack-keys"])
    print(json.dumps(keys, indent=1))  # seen with -rP: the keys as the guest counted them
    interpreter = Path(python).name
    for _count, frames, _cut in keys:
        (leaf, leaf_object), *callers = frames
        assert "lseek" in (leaf or "") and leaf_object.startswith("libc."), keys
        assert any(obj == interpreter and sym for sym, obj in callers), keys
    assert sum(count for count, _frames, _cut in keys) == LOOPS, keys


@pytest.mark.parametrize("name", ["unstable-amd64", "unstable-arm64"])
def test_whole_kernel_counted_and_timed(tmp_path, name):
    k, btf = kernel_with_python(name)
    candidates = deny.split(mass.attachable(k, btf), deny.patterns()).kept
    req = trace_build.Request(functions=candidates, kernel=True, btf=str(btf),
                              arch=k.target.arch, count=True, latency=True, strings=False,
                              by=["shmem_file_llseek: offset"])
    functions = trace_build.build(req, tmp_path / "trace").functions
    assert len(functions) > 0.97 * len(candidates) > 20000, (len(functions), len(candidates))
    assert "shmem_file_llseek" in functions

    # The other attach modes on the one function, keyed by its file's name: the entry's time
    # and key on the stack map.
    small = trace_build.Request(functions=["shmem_file_llseek"], kernel=True, btf=str(btf),
                                arch=k.target.arch, count=True, latency=True, strings=False,
                                by=[f"shmem_file_llseek: {NAME}"])
    trace_build.build(small, tmp_path / "small")
    ret = trace_build.Request(functions=["shmem_file_llseek"], kernel=True, btf=str(btf),
                              arch=k.target.arch, count=True, latency=True, strings=False,
                              by=[f"shmem_file_llseek: {NAME}, $retval"])
    trace_build.build(ret, tmp_path / "ret")
    kstack = trace_build.Request(functions=["shmem_file_llseek"], kernel=True, btf=str(btf),
                                 arch=k.target.arch, strings=False, stack=("kernel",),
                                 filters=[f"shmem_file_llseek: offset == {scenario.SEEK_TO}"],
                                 stack_keys={"count": True, "latency": True, "by": "kstack"})
    trace_build.build(kstack, tmp_path / "kstack")
    dirs = {"trace": tmp_path / "trace", "small": tmp_path / "small", "ret": tmp_path / "ret",
            "kstack": tmp_path / "kstack"}
    if name in USTACK_GUESTS:
        ustack = trace_build.Request(
            functions=["shmem_file_llseek"], kernel=True, btf=str(btf), arch=k.target.arch,
            strings=False, stack=("user",),
            filters=[f"shmem_file_llseek: offset == {scenario.SEEK_TO}"],
            stack_keys={"count": True, "latency": True, "by": "ustack"})
        trace_build.build(ustack, tmp_path / "ustack")
        dirs["ustack"] = tmp_path / "ustack"

    g, py = mass.guest_with(k, dirs)
    g.file("loop.py", LOOP.encode())
    g.file("loop_ustack.py", LOOP_USTACK.encode())
    g.file("digest.py", DIGEST.encode())
    g.file("digest_kstack.py", DIGEST_KSTACK.encode())
    g.file("digest_ustack.py", DIGEST_USTACK.encode())
    libs = f"export LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    g.step("summary", f"cd / && {libs}; "
                      # the kprobe path as asked (auto takes the trampoline: the step below)
                      f"{py.python} /trace/btfgen_trace.py --run /trace --timings --json "
                      "--attach session -- "
                      f"{py.python} /loop.py >/tmp/out 2>/tmp/err; rc=$?; "
                      f"cat /tmp/err; {py.python} /digest.py {BY_OFFSET}; exit $rc")
    if name in WHOLE_TRAMPOLINE:
        g.step("tramp", f"cd / && {libs}; "
                        f"{py.python} /trace/btfgen_trace.py --run /trace --json "
                        f"--attach tracing-multi -- {py.python} /loop.py >/tmp/out 2>/tmp/err; "
                        f"rc=$?; cat /tmp/err; {py.python} /digest.py {BY_OFFSET}; exit $rc")
    for mode in MODES:
        g.step(mode, f"cd / && {libs}; {py.python} /small/btfgen_trace.py --run /small --json "
                     f"--attach {mode} -- {py.python} /loop.py >/tmp/out 2>/tmp/err; rc=$?; "
                     f"cat /tmp/err; {py.python} /digest.py {BY_NAME}; exit $rc")
    g.step("retval", f"cd / && {libs}; {py.python} /ret/btfgen_trace.py --run /ret --json "
                     f"--attach session -- {py.python} /loop.py >/tmp/out 2>/tmp/err; rc=$?; "
                     f"cat /tmp/err; {py.python} /digest.py {BY_RETVAL}; exit $rc")
    g.step("kstack", f"cd / && {libs}; {py.python} /kstack/btfgen_trace.py --run /kstack "
                     f"--json --attach session -- {py.python} /loop.py >/tmp/out 2>/tmp/err; "
                     f"rc=$?; cat /tmp/err; {py.python} /digest_kstack.py; exit $rc")
    if name in USTACK_GUESTS:
        g.step("ustack", f"cd / && {libs}; {py.python} /ustack/btfgen_trace.py --run /ustack "
                         f"--json --interval 1 --attach session -- {py.python} /loop_ustack.py "
                         f">/tmp/out 2>/tmp/err; rc=$?; cat /tmp/err; "
                         f"{py.python} /digest_ustack.py; exit $rc")
    boot = g.run(k, timeout=1200)
    # (first run in a guest on 2026-11-29, passed) the loop's seeks counted and timed exactly
    # by their kernel stack, each stack through the lseek system call
    text, rc = boot.section("kstack")
    assert rc == 0, f"kstack: the tool failed (exit {rc}):\n{text[-3000:]}"
    got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
    assert (got["kstack-count"], got["kstack-timed"]) == (str(LOOPS), str(LOOPS)), text
    assert (got["kstack-unstacked"], got["kstack-lost"]) == ("0", "0"), text
    assert any("lseek" in f for f in json.loads(got["kstack-callers"])), text
    if name in USTACK_GUESTS:
        _ustack_counted(boot, py.python)
    text, rc = boot.section("retval")
    assert rc == 0, f"retval: the tool failed (exit {rc}):\n{text[-3000:]}"
    got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
    assert (got["keyed-count"], got["keyed-timed"]) == (str(LOOPS), str(LOOPS)), text
    for mode in MODES:
        text, rc = boot.section(mode)
        assert rc == 0, f"{mode}: the tool failed (exit {rc}):\n{text[-3000:]}"
        assert f"attaching {'kprobe_multi links' if mode == 'multi' else 'one kprobe'}" in text, \
            text[-3000:]
        got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
        assert (got["keyed-count"], got["keyed-timed"]) == (str(LOOPS), str(LOOPS)), text
        assert json.loads(got["not-timed"]) == {"map_full": 0, "no_entry": 0, "no_room": 0}, text
    if name in WHOLE_TRAMPOLINE:
        text, rc = boot.section("tramp")
        cache.write_atomic(cache.ROOT / "results" / f"summary-tramp-{name}.txt",
                           f"{k.release}, {len(functions)} functions\n{text}".encode())
        assert rc == 0, f"tracing-multi: the tool failed (exit {rc}):\n{text[-3000:]}"
        assert "attaching one fsession.multi link (as asked" in text, text[-3000:]
        got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
        # The kernel skips a trampoline program on a CPU where it is already running, and on a
        # whole kernel with one vCPU a task preempted inside the trampoline can make it skip
        # every call there for a time slice (the loop's seeks included: seen once, 0 of 1,000
        # counted, 530,510 runs skipped, said). So the loop's count is exact where the kernel
        # says it skipped nothing, and short by no more than what it says it skipped.
        said = re.search(r"^btfgen_trace: (\d+) calls missed by the kernel", text, re.M)
        missed = int(said[1]) if said else 0
        count, timed = int(got["keyed-count"]), int(got["keyed-timed"])
        assert timed <= count <= LOOPS and LOOPS - timed <= missed, text[-3000:]
        if not missed:
            assert count == timed == LOOPS, text[-3000:]
        assert int(got["calls"]) > 50000 and int(got["not-counted"]) == 0, text[-3000:]
    text, rc = boot.section("summary")
    # Kept for reading (docs/benchmarks.md's whole-kernel figure comes from here).
    cache.write_atomic(cache.ROOT / "results" / f"summary-{name}.txt",
                       f"{k.release}, {len(functions)} functions, boot {boot.seconds:.1f}s\n"
                       f"{text}".encode())
    assert rc == 0, f"the tool failed (exit {rc}):\n{text[-3000:]}"
    assert "btfgen_trace: attaching one kprobe.session link" in text, text[-3000:]
    assert "was refused" not in text and "not traceable here" not in text, text[-3000:]
    got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
    assert int(got["keyed-count"]) == LOOPS, text[-3000:]
    assert int(got["keyed-timed"]) == LOOPS, text[-3000:]
    # The interpreter's start alone is over 100,000 calls over a thousand functions (amd64
    # 123,646 and arm64 153,493 on 2026-11-28, since the command is no fork of the tracer,
    # whose teardown made up most of them before); every one of them counted, none sent.
    assert int(got["calls"]) > 50000 and int(got["functions-counted"]) > 500, text[-3000:]
    assert int(got["not-counted"]) == 0, text[-3000:]
    assert json.loads(got["not-timed"])["map_full"] == 0, text[-3000:]
    assert re.search(r"^btfgen_trace: 0 records lost", text, re.M), text[-3000:]


# The BPF trampoline (Linux 7.2 x86_64: tracing_multi and fsession) keeping the same summaries:
# the entry's time in the fsession's cookie where the key is not in the record, else on the
# thread's stack; keyed by the file's name, and unkeyed with a filter on the offset (so the loop's
# seeks are exactly what is counted); do_exit, which the trampoline refuses (__noreturn), on the
# kprobe link of the same run, its counts in the same maps.
TRAMPOLINE_RUNS = {"tracing-multi": "one fsession.multi link",
                   "fsession": "one fsession program per function (1)"}


def test_trampoline_counted_and_timed(tmp_path):
    name = "unstable-amd64"
    k, btf = kernel_with_python(name)
    keyed = trace_build.Request(functions=["shmem_file_llseek"], kernel=True, btf=str(btf),
                                arch=k.target.arch, count=True, latency=True, strings=False,
                                by=[f"shmem_file_llseek: {NAME}"])
    plain = trace_build.Request(functions=["shmem_file_llseek", "do_exit"], kernel=True,
                                btf=str(btf), arch=k.target.arch, count=True, latency=True,
                                strings=False, filters=[
                                    f"shmem_file_llseek: offset == {scenario.SEEK_TO}"])
    for req, d in ((keyed, "keyed"), (plain, "plain")):
        assert trace_build.build(req, tmp_path / d).trampoline, d
    g, py = mass.guest_with(k, {"keyed": tmp_path / "keyed", "plain": tmp_path / "plain"})
    g.file("loop.py", LOOP.encode())
    g.file("digest.py", DIGEST.encode())
    libs = f"export LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    for attach in TRAMPOLINE_RUNS:
        for d, key in (("keyed", BY_NAME), ("plain", "null")):
            g.step(f"{d}-{attach}",
                   f"cd / && {libs}; {py.python} /{d}/btfgen_trace.py --run /{d} --json "
                   f"--attach {attach} -- {py.python} /loop.py >/tmp/out 2>/tmp/err; rc=$?; "
                   f"cat /tmp/err; {py.python} /digest.py {key}; exit $rc")
    boot = g.run(k, timeout=1200)
    for attach, said in TRAMPOLINE_RUNS.items():
        for d in ("keyed", "plain"):
            text, rc = boot.section(f"{d}-{attach}")
            assert rc == 0, f"{d} {attach}: the tool failed (exit {rc}):\n{text[-3000:]}"
            assert f"attaching {said} (as asked" in text, text[-3000:]
            got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
            assert (got["keyed-count"], got["keyed-timed"]) == (str(LOOPS), str(LOOPS)), text
            assert json.loads(got["not-timed"]) == {"map_full": 0, "no_entry": 0,
                                                    "no_room": 0}, text
            assert int(got["not-counted"]) == 0, text
            if d == "plain":
                # the python processes' exits, on the kprobe link: at least the loop's own
                assert "1 functions the trampoline cannot take" in text, text[-3000:]
                assert int(got["do-exit"]) >= 1, text
