"""`btfgen trace` on a user program in the guests (uprobes, the user build of trace.bpf.c):
each guest kernel's verifier takes it (6.1 and the 32-bit ones included), and every record the
BPF side sends is exactly spec_format.event_size bytes of its function's descriptor, for calls
of several shapes: no argument and a void return, six arguments, a struct by value, a struct
returned through memory (on arm64 through x8, which the callee does not hand back: the exit
carries the entry's pointer, in the session cookie or in the saved-args maps), two string
captures; from the main thread and from a second one. The program is tests/probe's
test_event_sizes.PROGRAM, built static with the target's cross gcc. In the 6.1 guest, the same
calls under `--stack=user` too (STACK_GUESTS: the strings captured beside each stack), and
test_errno_live's program under `--errors` (ERRNO_GUESTS: the raw_syscalls:sys_exit program
that names a -1's errno, on 6.1's verifier)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from . import python_guest
from .conftest import kernel_for, unavailable

pytestmark = pytest.mark.live

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "probe"))
sys.path.insert(0, str(HERE.parent / "trace"))
import errno_target  # noqa: E402
from test_event_sizes import FUNCTIONS, PROGRAM  # noqa: E402

# The attach modes each kernel has for uprobes: 6.1 only single ones; arm64's 7.2 the session
# link and the uprobe_multi pair; armhf's 7.2 no uprobe_multi links (EOPNOTSUPP).
MODES = {"bookworm-amd64": ("single",), "bookworm-i386": ("single",),
         "unstable-amd64": ("session", "multi"),
         "unstable-arm64": ("session", "multi"), "unstable-armhf": ("single",)}
# Guests whose boot also runs the program under `--stack=user` (the user build's stack part:
# 6.1's verifier refused it until trace.bpf.c's STACK_ROOM): each call's frames named down
# through calls and main (or the second thread's start) to the program's entry.
STACK_GUESTS = {"bookworm-amd64"}
# Guests whose boot also runs test_errno_live's program under `--errors`: every -1 or NULL
# named by the failed system call inside its call (trace.bpf.c's syscall_exit), or bare.
ERRNO_GUESTS = {"bookworm-amd64"}
MISSING = "/tmp/no-such-dir/file"
# armhf's gcc makes Thumb-2 code by default, where the uprobe refuses the functions' addresses
# (EINVAL, a matter of attaching, not of this test): ARM code.
FLAGS = {"unstable-armhf": ["-marm"]}


@pytest.mark.parametrize("name", sorted(MODES))
def test_user_build_sends_what_python_says(name, tmp_path):
    k = kernel_for(name)
    t = k.target
    if shutil.which(t.cc) is None:
        unavailable(f"{name}: no {t.cc} to build the program")
    exe = _compiled(t, PROGRAM, tmp_path / "shapes", *FLAGS.get(name, []), "-O1", "-pthread")
    # The manifest names the program by its path: the guest's /tmp is a fresh tmpfs, so the
    # program goes to /shapes there, and the manifest says so.
    out = _trace_dir(exe, tmp_path / "trace", FUNCTIONS, "/shapes")
    g, py = python_guest.trace_guest(t, out)
    if name in STACK_GUESTS:
        stacked = _trace_dir(exe, tmp_path / "stacked", FUNCTIONS, "/shapes", "--stack=user")
        _run_step(g, t, py, "stack", stacked, "stacked", "-- /shapes")
    if name in ERRNO_GUESTS:
        # test_errno_live's program, built static, traced under `--errors=negative,null`
        errno_exe = _compiled(t, errno_target.TARGET, tmp_path / "errno_target", "-O2")
        errnos = _trace_dir(errno_exe, tmp_path / "errno", errno_target.FUNCS, "/errno_target")
        g.file("errno_target", errno_exe.read_bytes(), 0o755)
        _run_step(g, t, py, "errno", errnos, "errno", f"--errors=negative,null -- {MISSING}")
    g.file("shapes", exe.read_bytes(), 0o755)
    g.file("event_sizes.py", (HERE / "guest" / "event_sizes.py").read_bytes(), 0o755)
    for mode in MODES[name]:
        g.step(mode, f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                     f"{py.python} /event_sizes.py /trace {mode} 2>&1")
    boot = g.run(k)
    for mode in MODES[name]:
        text, rc = boot.section(mode)
        assert rc == 0, f"{name} --attach {mode} (exit {rc}):\n{text[-3000:]}"
        said = re.search(r"^sizes: status 0, (\d+) records, all as said", text, re.M)
        assert said, f"{name} --attach {mode}:\n{text[-3000:]}"
        # Every function's entry and exit, from two threads.
        assert int(said.group(1)) == 4 * len(FUNCTIONS), text[-3000:]
        assert "0 records lost (ring buffer full)" in text, text[-3000:]
    if name in STACK_GUESTS:
        _stacks_named(boot.section("stack"), name)
    if name in ERRNO_GUESTS:
        _errnos_named(boot.section("errno"), name)


def _compiled(t, source: str, exe: Path, *flags: str) -> Path:
    """`source` built static by the target's gcc, with debug info, into `exe`."""
    c = exe.with_suffix(".c")
    c.write_text(source)
    proc = subprocess.run([t.cc, *flags, "-g", "-static", str(c), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def _trace_dir(exe: Path, out: Path, functions, program: str, *options: str) -> Path:
    """`btfgen trace --build out` for `functions` of `exe`, its manifest naming the program
    by `program`, its path in the guest."""
    proc = subprocess.run([sys.executable, "-m", "btfgen", "trace", *options, "--build",
                           str(out), str(exe), *functions], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "trace.json").read_text())
    (out / "trace.json").write_text(json.dumps(dict(manifest, program=program)))
    return out


def _run_step(g, t, py, step: str, directory: Path, at: str, args: str) -> None:
    """A guest step running the trace directory (put at /`at`) with `args` (after `--`, the
    program's: the manifest names the program)."""
    python_guest.add_directory(g, t, directory, at)
    g.step(step, f"cd /{at} && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                 f"{py.python} /{at}/btfgen_trace.py --run /{at} {args} 2>&1")


def _errnos_named(section, name: str) -> None:
    """What test_errno_live's test_errno_named_only_where_a_system_call_in_the_call_failed
    asks on the host: ENOENT where open's openat failed inside the call, bare elsewhere."""
    text, rc = section
    assert rc == 0, f"{name} --errors (exit {rc}):\n{text[-3000:]}"
    assert "raw_syscalls" not in text, text[-3000:]  # its program attached: no warning
    shown = [re.sub(r" \(\d+\.\d{3} us\)$", "", x) for x in text.splitlines() if " -> " in x]
    assert shown == [
        f'open_missing(path="{MISSING}") -> -1 ENOENT',
        f'fopen_missing(path="{MISSING}") -> 0x0 ENOENT',
        "bad_signal(sig=-5) -> -1",
        "plain_fail(x=-3) -> -1",
        "neg_fail(x=-3) -> -2",
        f'fail_then_ok(path="{MISSING}") -> -1',
    ], text[-3000:]
    assert "open_missing -1 2\n" in text and "plain_fail -1 22\n" in text, text[-3000:]


def _stacks_named(section, name: str) -> None:
    """Every entry line has its user stack under it: the function itself, its caller
    `calls`, then main's or the second thread's frames, ending at the program's start."""
    text, rc = section
    assert rc == 0, f"{name} --stack=user (exit {rc}):\n{text[-3000:]}"
    lines = text.splitlines()
    entries = [i for i, line in enumerate(lines) if line.split("(")[0] in FUNCTIONS
               and "->" not in line]
    assert len(entries) == 2 * len(FUNCTIONS), text[-3000:]
    # the strings captured, in the records that carry the stacks
    assert text.count('named(s="a string the capture reads", t="")') == 2, text[-3000:]
    for i in entries:
        frames = []
        for line in lines[i + 1:]:
            if not line.startswith("    "):
                break
            frames.append(line.split("+")[0].strip())
        function = lines[i].split("(")[0]
        assert frames[:2] == [function, "calls"], (lines[i], frames)
        assert frames[-1] in ("_start", "clone3", "clone"), (lines[i], frames)
        assert "main" in frames or "start_thread" in frames, (lines[i], frames)
