"""libc's own open/openat traced live (root, uprobe_multi: Linux 6.6+), with prototypes from
<fcntl.h> since Debian's libc has no BTF: in a command (`-- cat FILE FILE`), in a running
process (--pid), and in every process that maps libc (a process started after attach is seen,
the tracer is not). The run side is the trace directory's own copy, as on a target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import live_needs
import pytest

from btfgen.probe import tracefs
from btfgen.trace import command, symbols

FCNTL = "/usr/include/fcntl.h"
O_RDWR_CREAT = 0o102  # what the shell's `<>` opens with


def _library_missing() -> str:
    if not os.path.exists(FCNTL):
        return f"no {FCNTL}"
    if symbols.locate("libc.so.6")[1] is None:
        return "no libc.so.6 in ldconfig's cache"
    return ""


_WHY_NOT = live_needs.why_not(tools=(), more=_library_missing)
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")


@pytest.fixture(scope="module")
def directory(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("libc") / "trace"
    # a bare name, found as bpftrace finds it
    assert command.main(["--build", str(out), "--header", FCNTL, "libc.so.6", "open",
                      "openat"]) == 0
    tracefs.mount_tracefs()
    return out


def _tool(directory: Path) -> list[str]:
    return [sys.executable, str(directory / "btfgen_trace.py"), "--run", str(directory),
            "--json"]


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _opens(events: list[dict], flags: int | None = None) -> list[dict]:
    return [e for e in events if e["function"] == "open" and e["kind"] == "entry"
            and (flags is None or e["args"]["__oflag"] == flags)]


def test_libc_open_in_a_command(directory, tmp_path):
    first, second = tmp_path / "first-file", tmp_path / "second"
    first.write_text("one\n")
    second.write_text("two\n")
    proc = subprocess.run([*_tool(directory), "--", "cat", str(first), str(second)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, LC_ALL="C"))
    assert proc.returncode == 0, proc.stderr
    # cat ran, not libc.so.6 (which prints its banner)
    assert [line for line in proc.stdout.splitlines() if not line.startswith("{")] == \
        ["one", "two"]
    events = _events(proc.stdout)
    assert {(e["comm"], e["pid"]) for e in events} == {("cat", events[0]["pid"])}
    opened = _opens(events)[-2:]
    assert [e["args"]["__oflag"] for e in opened] == [0, 0]  # O_RDONLY
    # The file names, captured by default from libc's `const char *__file`.
    assert [e["captures"]["__file"] for e in opened] == [str(first), str(second)]
    returns = [e["return"] for e in events if e["function"] == "open" and e["kind"] == "exit"]
    assert len(returns) >= 2 and all(fd >= 0 for fd in returns[-2:])


def test_libc_open_in_a_running_process(directory, tmp_path):
    target = tmp_path / "touched"
    loop = subprocess.Popen(["sh", "-c", f"while :; do : <> {target}; sleep 0.05; done"])
    try:
        proc = subprocess.run([*_tool(directory), "--pid", str(loop.pid), "--duration", "2"],
                              capture_output=True, text=True, timeout=120)
    finally:
        loop.kill()
        loop.wait()
    assert proc.returncode == 0, proc.stderr
    assert f"tracing 2 functions of libc.so.6 in process {loop.pid}" in proc.stderr
    events = _events(proc.stdout)
    ours = _opens(events, O_RDWR_CREAT)
    assert len(ours) >= 5 and {e["pid"] for e in ours} == {loop.pid}
    assert {e["comm"] for e in events} <= {"sh", "sleep"}  # the process and its children


def test_libc_open_in_every_process(directory, tmp_path):
    target = tmp_path / "late"
    tracer = subprocess.Popen([*_tool(directory), "--duration", "5"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    said = []
    try:
        while not said or "tracing" not in said[-1]:
            said.append(tracer.stderr.readline())
            assert said[-1], f"the tracer ended: {''.join(said)}"
        assert said[-1].strip() == ("btfgen_trace: tracing 2 functions of libc.so.6 in every "
                                    "process that maps it (this one excepted) for 5s")
        late = subprocess.run(["sh", "-c", f": <> {target}; echo $$"], capture_output=True,
                              text=True, check=True)
        out, err = tracer.communicate(timeout=120)
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()
    assert tracer.returncode == 0, err
    events = _events(out)
    late_pid = int(late.stdout)
    assert [e["pid"] for e in _opens(events, O_RDWR_CREAT) if e["pid"] == late_pid] \
        == [late_pid]
    assert tracer.pid not in {e["pid"] for e in events}
