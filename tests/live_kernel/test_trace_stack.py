"""`btfgen trace --kernel --stack` in Debian's amd64 7.2 guest (issue 48, item 1): the kernel
stack of each call of shmem_file_llseek (a loop of lseek on a tmpfs file), taken by
bpf_get_stack and named by the guest's /proc/kallsyms, under the entry line in JSON, through
the kprobe path (one kprobe.session link, a pair of kprobe_multi links) and the BPF
trampoline (tracing_multi). Every call at the loop's offset has a stack, and it is the system
call's path: lseek's own functions, then do_syscall_64, outermost last.

With `--stack kernel,user`, the same function called from a static program whose call chain is
known (guest/stack_chain.c: main -> a -> b -> lseek) has also the user stack of its task, from
its registers where the system call entered the kernel (bpf_task_pt_regs) and its user stack
copied, unwound offline from the program's .eh_frame: lseek's wrapper, b, a, main, down to
_start, whole, through each attach mode, in the amd64 and arm64 guests, and in Debian 12's 6.1
amd64 guest through its one mode (a kprobe and a kretprobe each; its verifier refused the
stack part's buffers until trace.bpf.c's STACK_ROOM). Recorded (`--record`)
and decoded here, where the guest's /chain is not: the kernel frames named from the
recording's notes, the user stack's first frame said to be in an object not found here, never
named otherwise."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.trace import build as trace_build

from . import cache, mass, python_guest, scenario
from . import test_summary_kernel as summary
from .conftest import kernel_with_python
from .test_fetcher import _dump, _undump

pytestmark = pytest.mark.live

LOOPS = 50
LOOP = (f"import os\nfd = os.open('/tmp/seek', os.O_RDWR | os.O_CREAT)\n"
        f"for _ in range({LOOPS}):\n"
        f"    os.lseek(fd, {scenario.SEEK_TO}, os.SEEK_SET)\n")
# Run in the guest on the JSON events: the loop's calls' stacks, as names, counted.
DIGEST = r"""import collections, json
stacks = collections.Counter()
for line in open('/tmp/out'):
    if not line.startswith('{'):
        continue
    e = json.loads(line)
    if e['kind'] == 'entry' and (e.get('args') or {}).get('offset') == SEEK_TO:
        names = [f['symbol'] or '?' for f in e.get('stack', {}).get('kstack', [])]
        stacks[' '.join(names)] += 1
print('digest', json.dumps(stacks))
""".replace("SEEK_TO", str(scenario.SEEK_TO))
# The user side's: each call's kernel and user frames, as names, counted; and why a stack was
# likely cut, or had no user side.
DIGEST_USER = r"""import collections, json
stacks = collections.Counter()
for line in open('/tmp/out'):
    if not line.startswith('{'):
        continue
    e = json.loads(line)
    if e['kind'] == 'entry' and (e.get('args') or {}).get('offset') == SEEK_TO:
        s = e.get('stack', {})
        k = [f['symbol'] or '?' for f in s.get('kstack', [])]
        u = [f['symbol'] or '?' for f in s.get('ustack', [])]
        stacks[json.dumps([k, u, s.get('ustack_cut'), s.get('ustack_none')])] += 1
print('digest', json.dumps(stacks))
""".replace("SEEK_TO", str(scenario.SEEK_TO))
CHAIN = Path(__file__).parent / "guest" / "stack_chain.c"
CHAIN_CALLS = 5  # its CALLS
# The chain's calls on the loop's file; it then stays until the tracer's output names the
# function (its first stack printed, the chain's maps read: see stack_chain.c).
CHAIN_RUN = "/chain /tmp/seek /tmp/out shmem_file_llseek"
RUNS = {"session": "attaching one kprobe.session link (as asked",
        "multi": "attaching kprobe_multi links",
        "tracing-multi": "attaching one fsession.multi link (as asked"}
# A kernel function's user stack on arm64 too, its system calls entered through el0_svc; its
# kprobe paths (7.2's arm64 refuses tracing_multi: "Operation not supported").
# Debian 12's 6.1 has neither kprobe_multi nor kprobe.session (no CONFIG_FPROBE): a kprobe and
# a kretprobe each.
USER_STACK_GUESTS = {"unstable-amd64": RUNS,
                     "unstable-arm64": {r: RUNS[r] for r in ("session", "multi")},
                     "bookworm-amd64": {"single": "attaching one kprobe and kretprobe per "
                                                  "function (as asked"}}
# Guests where the same boot also counts and times the seeks by their kernel and by their user
# stack (--count --latency --by kstack / ustack: test_summary_kernel's steps and checks, which
# run in the 7.2 guests there): Debian 12's 6.1, through its one attach mode.
SUMMARY_STACK_GUESTS = {"bookworm-amd64": "single"}
# lseek's own functions in its kernel stack (those its arch does not inline)
LSEEK_FRAMES = {"vfs_llseek", "ksys_lseek", "__x64_sys_lseek", "__arm64_sys_lseek"}
# the frame every system call's kernel stack passes through, by btfgen's arch name
SYSCALL_ENTRY = {"x86_64": "do_syscall_64", "arm64": "el0_svc"}


def test_kernel_stacks_named_by_kallsyms(tmp_path):
    name = "unstable-amd64"
    k, btf = kernel_with_python(name)
    req = trace_build.Request(functions=["shmem_file_llseek"], kernel=True, btf=str(btf),
                              arch=k.target.arch, strings=False, stack=("kernel",))
    manifest = trace_build.build(req, tmp_path / "trace")
    assert manifest.stack == ["kernel"] and manifest.trampoline

    g, py = mass.guest_with(k, {"trace": tmp_path / "trace"})
    g.file("loop.py", LOOP.encode())
    g.file("digest.py", DIGEST.encode())
    libs = f"export LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    for run in RUNS:
        g.step(run, f"cd / && {libs}; {py.python} /trace/btfgen_trace.py --run /trace --json "
                    f"--attach {run} -- {py.python} /loop.py >/tmp/out 2>/tmp/err; rc=$?; "
                    f"cat /tmp/err; head -c 1500 /tmp/out; echo; {py.python} /digest.py; "
                    "exit $rc")
    boot = g.run(k, timeout=1200)
    for run, stacks in _digests(boot, LOOPS).items():
        for names in stacks:
            frames = names.split()
            # the system call's path, outermost last: lseek's functions (those not inlined)
            # under do_syscall_64
            lseek = [i for i, f in enumerate(frames) if f in LSEEK_FRAMES]
            assert lseek and "do_syscall_64" in frames, f"{run}: {names}"
            assert max(lseek) < frames.index("do_syscall_64"), f"{run}: {names}"


def _digests(boot, calls: int, runs: dict = RUNS) -> dict[str, dict]:
    """Each `runs` step's digest (its stacks counted), after checking the step ran, attached
    as said and saw `calls` calls."""
    digests = {}
    for run, said in runs.items():
        text, rc = boot.section(run)
        assert rc == 0, f"{run}: the tool failed (exit {rc}):\n{text[-3000:]}"
        assert said in text, text[-3000:]
        got = re.search(r"^digest (.+)$", text, re.M)
        assert got, text[-3000:]
        digests[run] = json.loads(got.group(1))
        assert sum(digests[run].values()) == calls, f"{run}: {digests[run]}\n{text[-3000:]}"
    return digests


def _chain(target) -> bytes:
    """guest/stack_chain.c built static, with its symbols (its frames are named by them)."""
    src = CHAIN.read_bytes()
    cmd = [target.cc, "-O2", "-static", "-Wall", "-Werror", f"-DSEEK_TO={scenario.SEEK_TO}L"]
    dest = cache.ROOT / "stack-chain" / f"{target.deb_arch}-{cache.digest(src, *cmd)}"
    if not dest.exists():
        out = dest.with_suffix(".tmp")
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*cmd, "-o", str(out), str(CHAIN)], check=True)
        out.rename(dest)
    return dest.read_bytes()


@pytest.mark.parametrize("name", sorted(USER_STACK_GUESTS))
def test_kernel_calls_user_stack_unwound(tmp_path, name):
    k, btf = kernel_with_python(name)
    runs, entry = USER_STACK_GUESTS[name], SYSCALL_ENTRY[k.target.arch]
    req = trace_build.Request(functions=["shmem_file_llseek"], kernel=True, btf=str(btf),
                              arch=k.target.arch, strings=False, stack=("kernel", "user"))
    manifest = trace_build.build(req, tmp_path / "trace")
    # the trampoline's program is built where a run takes it (6.1's BTF has no fsession)
    assert manifest.stack == ["kernel", "user"]
    assert manifest.trampoline or "tracing-multi" not in runs

    summary_mode = SUMMARY_STACK_GUESTS.get(name)
    dirs = {"trace": tmp_path / "trace"}
    if summary_mode:
        dirs.update(_summary_dirs(k, btf, tmp_path))
    g, py = mass.guest_with(k, dirs)
    g.file("chain", _chain(k.target), 0o755)
    g.file("digest.py", DIGEST_USER.encode())
    libs = f"export LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    for run in runs:
        g.step(run, f"cd / && {libs}; {py.python} /trace/btfgen_trace.py --run /trace --json "
                    f"--attach {run} -- {CHAIN_RUN} >/tmp/out 2>/tmp/err; rc=$?; "
                    f"cat /tmp/err; head -c 3000 /tmp/out; echo; {py.python} /digest.py; "
                    "exit $rc")
    # the text form, once: the frames under the entry line, the user's after the kernel's
    g.step("text", f"cd / && {libs}; {py.python} /trace/btfgen_trace.py --run /trace "
                   f"-- {CHAIN_RUN} >/tmp/out 2>/tmp/err; rc=$?; cat /tmp/err; "
                   "head -n 40 /tmp/out; exit $rc")
    record_run = "session" if "session" in runs else next(iter(runs))
    # recorded: the chain waits its 30 s (its file never holds the word), the tracer's notes
    # (the chain's maps, the kernel symbols) written meanwhile
    g.step("record", f"cd / && {libs}; {py.python} /trace/btfgen_trace.py --run /trace "
                     f"--attach {record_run} --record /tmp/r.btfrec "
                     "-- /chain /tmp/seek /tmp/none x "
                     f">/tmp/out 2>/tmp/err; rc=$?; cat /tmp/err; "
                     f"{_dump('recording', '/tmp/r.btfrec')}; exit $rc")
    if summary_mode:
        _summary_steps(g, py, libs, summary_mode)
    boot = g.run(k, timeout=1200)
    if summary_mode:
        _summary_checked(boot, py.python, summary_mode)
    _recorded_stacks_decoded_here(boot, tmp_path, entry)
    for run, stacks in _digests(boot, CHAIN_CALLS, runs).items():
        for key in stacks:
            kernel, user, cut, none = json.loads(key)
            assert entry in kernel, f"{run}: {key}"
            # the system call's user side, innermost first: the C library's lseek (whatever
            # its symbol's alias), then the chain, whole down to _start
            assert none is None and cut is None, f"{run}: {key}\n{boot.section(run)[0][-3000:]}"
            assert "lseek" in user[0], f"{run}: {key}"
            assert user[1:4] == ["b", "a", "main"], f"{run}: {key}"
            assert user[-1] == "_start", f"{run}: {key}"
    text, rc = boot.section("text")
    assert rc == 0, text[-3000:]
    print(text)  # seen with -rP: docs/trace.md's example is such a run's
    lines = text.splitlines()
    # the chain's only calls of it are its lseeks (the tracer follows the command alone)
    first = next((i for i, line in enumerate(lines) if line.startswith("shmem_file_llseek(")),
                 None)
    assert first is not None, text[-3000:]
    frames = []
    for line in lines[first + 1:]:
        if not line.startswith("    "):
            break
        frames.append(line.strip())
    names = [f.split("+")[0] for f in frames]
    assert names.index(entry) < names.index("b"), frames
    assert names[names.index("b"):names.index("b") + 3] == ["b", "a", "main"], frames
    assert all(f.endswith("(chain)") for f in frames[names.index("b"):]), frames


def _summary_dirs(k, btf, tmp_path) -> dict:
    """The trace directories counting and timing the loop's seeks (picked out by a filter on
    the offset) by their kernel stack and by their user stack."""
    dirs = {}
    for by, stack in (("kstack", "kernel"), ("ustack", "user")):
        req = trace_build.Request(
            functions=["shmem_file_llseek"], kernel=True, btf=str(btf), arch=k.target.arch,
            strings=False, stack=(stack,),
            filters=[f"shmem_file_llseek: offset == {scenario.SEEK_TO}"],
            stack_keys={"count": True, "latency": True, "by": by})
        trace_build.build(req, tmp_path / by)
        dirs[by] = tmp_path / by
    return dirs


def _summary_steps(g, py, libs: str, mode: str) -> None:
    """The steps of _summary_dirs' directories, each through `mode`."""
    g.file("loop.py", summary.LOOP.encode())
    g.file("loop_ustack.py", summary.LOOP_USTACK.encode())
    g.file("digest_kstack.py", summary.DIGEST_KSTACK.encode())
    g.file("digest_ustack.py", summary.DIGEST_USTACK.encode())
    g.step("kstack", f"cd / && {libs}; {py.python} /kstack/btfgen_trace.py --run /kstack "
                     f"--json --attach {mode} -- {py.python} /loop.py >/tmp/out 2>/tmp/err; "
                     f"rc=$?; cat /tmp/err; {py.python} /digest_kstack.py; exit $rc")
    g.step("ustack", f"cd / && {libs}; {py.python} /ustack/btfgen_trace.py --run /ustack "
                     f"--json --interval 1 --attach {mode} -- {py.python} /loop_ustack.py "
                     f">/tmp/out 2>/tmp/err; rc=$?; cat /tmp/err; "
                     f"{py.python} /digest_ustack.py; exit $rc")


def _summary_checked(boot, python: str, mode: str) -> None:
    """test_summary_kernel's checks of the kstack and ustack steps: every seek counted and
    timed, each under a stack through lseek."""
    text, rc = boot.section("kstack")
    assert rc == 0, f"kstack: the tool failed (exit {rc}):\n{text[-3000:]}"
    assert mode != "single" or "attaching one kprobe and kretprobe per function" in text, \
        text[-3000:]
    got = dict(re.findall(r"^([a-z-]+) (.+)$", text, re.M))
    loops = str(summary.LOOPS)
    assert (got["kstack-count"], got["kstack-timed"]) == (loops, loops), text
    assert (got["kstack-unstacked"], got["kstack-lost"]) == ("0", "0"), text
    assert any("lseek" in f for f in json.loads(got["kstack-callers"])), text
    summary._ustack_counted(boot, python)


def _recorded_stacks_decoded_here(boot, tmp_path, entry: str) -> None:
    text, rc = boot.section("record")
    assert rc == 0, f"record: the tool failed (exit {rc}):\n{text[-3000:]}"
    rec = tmp_path / "r.btfrec"
    rec.write_bytes(_undump(text, "recording"))
    p = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "jsonl", str(rec)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    entries = [e for e in map(json.loads, p.stdout.splitlines())
               if e.get("kind") == "entry" and (e.get("args") or {}).get("offset") ==
               scenario.SEEK_TO]
    assert len(entries) == CHAIN_CALLS, p.stdout[-3000:]
    for e in entries:
        kernel = [f["symbol"] for f in e["stack"]["kstack"]]
        # lseek's own functions, those not inlined (arm64's ksys_lseek is)
        assert entry in kernel and set(kernel) & LSEEK_FRAMES, e["stack"]
        first = e["stack"]["ustack"][0]
        # /chain is the guest's: its frames cannot be named here, and say so
        assert first["symbol"] is None and "/chain: not found here" in first["why"], e["stack"]
