"""SIGINT at every point of a `btfgen trace` run (uprobes on summary_target.c, a --count run):
never a traceback nor a hang. Before anything is attached, one line and 128 + the signal; once
something is, the run's usual end lines. Each point is reached by the tracer signalling itself
from inside the step (a wrapper around it: the step is where the signal lands, whatever the
machine's load), and the one signal from outside is sent once the traced command shows it runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_filter_live import _require_live

HERE = Path(__file__).parent
FUNCS = ["nap", "quick", "work"]
NOTHING = "btfgen trace: interrupted (SIGINT) before tracing began: nothing attached\n"

# Runs `btfgen trace ARGS...` in this process with one step wrapped: the tracer sends itself
# SIGINT just before (or, `after`, just after) the step runs, as a Ctrl-C landing there would.
DRIVER = textwrap.dedent("""\
    import os, signal, sys
    import importlib

    # SIGINT as a terminal's foreground job has it (a shell's background job, as CI's runner
    # may be, starts with it ignored, and Python then keeps it ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    module, name, attr, when = sys.argv[1:5]
    owner = importlib.import_module(module)
    if name != "-":
        owner = getattr(owner, name)
    real = getattr(owner, attr)

    def wrapped(*args, **kwargs):
        if when == "before":
            os.kill(os.getpid(), signal.SIGINT)
        out = real(*args, **kwargs)
        if when == "after":
            os.kill(os.getpid(), signal.SIGINT)
        return out

    setattr(owner, attr, wrapped)
    from btfgen.trace.command import main
    sys.exit(main(sys.argv[5:]))
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the target, a --count trace directory for it, the driver)."""
    _require_live()
    tmp = tmp_path_factory.mktemp("signals")
    exe = tmp / "summary_target"
    proc = subprocess.run(["gcc", "-O2", "-g", str(HERE / "summary_target.c"), "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    directory = tmp / "dir"
    subprocess.run([sys.executable, "-m", "btfgen", "trace", "--build", str(directory),
                    "--count", str(exe), *FUNCS], check=True, capture_output=True)
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    return exe, directory, driver


def drive(driver: Path, step: str, when: str, *args: str) -> subprocess.CompletedProcess:
    module, _, rest = step.partition(":")
    name, _, attr = rest.rpartition(".")
    return subprocess.run([sys.executable, str(driver), module, name or "-", attr, when, *args],
                          capture_output=True, text=True, timeout=300)


def command(tmp: Path, exe: Path) -> tuple[list[str], Path]:
    """The target's arguments: a mark it leaves once it ran."""
    mark = tmp / "ran"
    return ["--", str(mark)], mark


def test_while_building(built, tmp_path):
    exe, _, driver = built
    argv, mark = command(tmp_path, exe)
    proc = drive(driver, "btfgen.trace.build:_compile", "before", "--count", str(exe), *FUNCS,
                 *argv)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", NOTHING)
    assert not mark.exists()


@pytest.mark.parametrize("attach", ["session", "single"])
def test_while_loading(built, tmp_path, attach):
    exe, directory, driver = built
    argv, mark = command(tmp_path, exe)
    proc = drive(driver, "btfgen.probe.bpf_object:BpfObject.load", "before", "--run",
                 str(directory), "--attach", attach, *argv)
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.endswith("\n" + NOTHING) and proc.stderr.count("\n") == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not mark.exists()  # the command was never let run


@pytest.mark.parametrize("attach, step", [
    ("session", "btfgen.probe.bpf_object:BpfObject.attach_uprobe_multi"),
    ("multi", "btfgen.probe.bpf_object:BpfObject.attach_uprobe_multi"),
    # the first of the single uprobes: the others are not attached then
    ("single", "btfgen.probe.bpf_object:BpfObject.attach_uprobe"),
])
def test_while_attaching(built, tmp_path, attach, step):
    exe, directory, driver = built
    argv, mark = command(tmp_path, exe)
    proc = drive(driver, step, "after", "--run", str(directory), "--attach", attach, *argv)
    assert proc.returncode == 130, proc.stderr
    # the end lines: the (empty) table, what was lost
    assert proc.stdout == "FUNC  COUNT\n"
    assert proc.stderr.endswith("btfgen trace: 0 records lost (ring buffer full)\n"), proc.stderr
    assert "Traceback" not in proc.stderr and "tracing" not in proc.stderr
    assert not mark.exists()


def test_as_the_command_starts(built, tmp_path):
    # the signal lands as the command is let run: it runs (it was released), tracing ends at
    # once, with the end lines
    exe, directory, driver = built
    argv, mark = command(tmp_path, exe)
    proc = drive(driver, "btfgen.probe.processes:Gated.start", "before", "--run", str(directory),
                 *argv)
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout.startswith("FUNC")
    assert proc.stderr.endswith("btfgen trace: 0 records lost (ring buffer full)\n"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_from_outside_while_tracing(built, tmp_path):
    # Sent once the traced target has made its calls and says so (its mark, holding its pid;
    # it waits then).
    exe, directory, _ = built
    mark = tmp_path / "pid"
    # Files, not pipes: the target, which outlives the tracer, holds them open.
    out_file, err_file = tmp_path / "out", tmp_path / "err"
    with open(out_file, "w") as out_f, open(err_file, "w") as err_f:
        tracer = subprocess.Popen([sys.executable, "-m", "btfgen", "trace", "--run",
                                   str(directory), "--", str(mark), "hold"],
                                  stdout=out_f, stderr=err_f)
    try:
        while not mark.exists():
            assert tracer.poll() is None, err_file.read_text()
            time.sleep(0.01)  # a poll: the mark is what is waited for, not the time
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=300)
    finally:
        if mark.exists():
            os.kill(int(mark.read_text()), signal.SIGKILL)  # the target, waiting still
        tracer.kill()
        tracer.wait(timeout=60)
    out, err = out_file.read_text(), err_file.read_text()
    assert tracer.returncode == 130, err
    assert out == "FUNC   COUNT\nnap    3\nwork   7\nquick  1000\n"
    assert err.endswith("btfgen trace: 0 records lost (ring buffer full)\n"), err
    assert "Traceback" not in err
