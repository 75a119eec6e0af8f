"""The traced command: started behind a gate before the probes are attached, run in the same
pid once they are, and never a copy of the tracer (whose exec would tear down the tracer's
address space in the command's pid, with every probe attached)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from btfgen.probe.errors import RunError
from btfgen.probe.processes import Gated, command_path


def _wait(gated: Gated, seconds: float = 60) -> int:
    end = time.monotonic() + seconds
    while (status := gated.poll()) is None:
        assert time.monotonic() < end, "the command did not end"
        time.sleep(0.01)
    return status


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def test_the_waiting_process_is_not_a_copy_of_the_tracer(tmp_path):
    # The tracer holds much (a whole kernel's decoders: ~550 MB); a forked child would hold
    # it too, resident, until its exec. 128 MiB of pages written here.
    held = bytes(range(256)) * (128 << 12)
    gated = Gated(["true"])
    try:
        rss_kib = int(_status(gated.pid)["VmRSS"].split()[0])
        assert rss_kib < 32 << 10, f"the gated process holds {rss_kib} KiB"
        assert os.path.realpath(f"/proc/{gated.pid}/exe") == os.path.realpath("/bin/sh")
    finally:
        gated.cancel()
    assert len(held) == 128 << 20


def test_start_runs_the_command_in_the_gated_pid_with_default_signals(tmp_path):
    out = tmp_path / "out"
    script = f'echo $$ > {out}; grep SigIgn /proc/self/status >> {out}; exit 7'
    gated = Gated(["sh", "-c", script])
    gated.start()
    assert _wait(gated) == 7
    pid, sig_ign = out.read_text().splitlines()
    assert int(pid) == gated.pid  # filtered on before it ran: the command's own pid
    ignored = int(sig_ign.split()[1], 16)
    # Python ignores SIGPIPE for itself; the command has the default again.
    assert not ignored & (1 << (signal.SIGPIPE - 1)), sig_ign


def test_cancel_runs_nothing(tmp_path):
    mark = tmp_path / "ran"
    gated = Gated(["sh", "-c", f"touch {mark}"])
    gated.cancel()
    assert not mark.exists()
    with pytest.raises(ChildProcessError):  # reaped by cancel
        os.waitpid(gated.pid, os.WNOHANG)


def test_arguments_reach_the_command_as_given(tmp_path):
    out = tmp_path / "args"
    words = ["a b", "$HOME", "'\"", "", "-c", ";exit 3"]
    gated = Gated(["sh", "-c", 'for w in "$@"; do printf "[%s]" "$w"; done > "$0"', str(out),
                   *words])
    gated.start()
    assert _wait(gated) == 0
    assert out.read_text() == "".join(f"[{w}]" for w in words)


@pytest.mark.parametrize("name, said", [
    ("btfgen-no-such-command", "cannot run btfgen-no-such-command: not found on PATH"),
    ("/nonexistent/cmd", "cannot run /nonexistent/cmd: no such file"),
    ("{tmp}/plain", "cannot run {tmp}/plain: not an executable file"),
    ("{tmp}", "cannot run {tmp}: not an executable file"),
])
def test_a_command_that_cannot_run_is_one_line(tmp_path, name, said):
    (tmp_path / "plain").write_text("echo not run\n")
    (tmp_path / "plain").chmod(0o644)
    name, said = name.format(tmp=tmp_path), said.format(tmp=tmp_path)
    with pytest.raises(RunError) as e:
        command_path(name)
    assert str(e.value) == said
    with pytest.raises(RunError):
        Gated([name])


def test_a_name_is_found_on_path_as_execvp_finds_it(tmp_path, monkeypatch):
    # The first file of that name on PATH that can run: one that cannot is passed over.
    first, second = tmp_path / "a", tmp_path / "b"
    for d, mode in ((first, 0o644), (second, 0o755)):
        d.mkdir()
        (d / "btfgen-demo").write_text("#!/bin/sh\nexit 0\n")
        (d / "btfgen-demo").chmod(mode)
    monkeypatch.setenv("PATH", f"{first}:{second}")
    assert command_path("btfgen-demo") == str(second / "btfgen-demo")
