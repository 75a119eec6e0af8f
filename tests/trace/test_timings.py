"""`btfgen trace --timings`: where the time goes, one line a stage, build and run; nothing of it
without the flag."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from btfgen.probe import features
from btfgen.probe.timings import Timings

TOOL = [sys.executable, "-m", "btfgen", "trace"]
LINE = re.compile(r"^btfgen trace: time: ([a-z]+: [A-Za-z ]+): (\d+\.\d{6}) s$")
# A user program's build: its functions' file offsets are its symbol resolution (before the
# placement: aliases of one function are placed once).
BUILD = ["build: BTF load", "build: selection", "build: symbol resolution", "build: placement",
         "build: generation", "build: compile", "build: spec table", "build: total"]
# A user program's run: no symbol check (that is available_filter_functions, kernel only).
RUN = ["run: decoders load", "run: output setup", "run: object load", "run: spec map fill",
       "run: attach", "run: tracing", "run: detach", "run: object close"]


def test_a_stage_is_said_with_its_seconds_only_when_asked(capsys):
    for on in (True, False):
        t = Timings(on)
        with t.stage("run: attach"):
            pass
        assert set(t.seconds) == {"run: attach"} and t.seconds["run: attach"] >= 0
        err = capsys.readouterr().err
        assert bool(LINE.match(err.strip())) == on, err


def test_a_failed_stage_is_not_timed(capsys):
    t = Timings(True)
    with pytest.raises(ValueError), t.stage("run: attach"):
        raise ValueError
    assert t.seconds == {} and capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("clang-19")
    if cc is None or not (shutil.which("clang-19") or shutil.which("clang")):
        pytest.skip("no C compiler or no clang")
    d = tmp_path_factory.mktemp("timings")
    (d / "f.h").write_text("int f(int a);\n")
    (d / "p.c").write_text('#include "f.h"\n__attribute__((noinline)) int f(int a) '
                           "{ return a + 1; }\nint main(void) { return f(41) != 42; }\n")
    subprocess.run([cc, "-O1", "-o", str(d / "p"), str(d / "p.c")], check=True)
    return d


def _stages(stderr: str) -> list[str]:
    return [m.group(1) for line in stderr.splitlines() if (m := LINE.match(line))]


def test_build_stages(program, tmp_path):
    argv = [*TOOL, "--header", str(program / "f.h"), "--build", str(tmp_path / "t"),
            str(program / "p"), "f"]
    quiet = subprocess.run(argv, capture_output=True, text=True)
    assert quiet.returncode == 0 and "time:" not in quiet.stderr, quiet.stderr
    said = subprocess.run([*argv[:4], "--timings", *argv[4:]], capture_output=True, text=True)
    assert said.returncode == 0, said.stderr
    assert _stages(said.stderr) == BUILD, said.stderr


def test_run_stages(program):
    why = features.bpf_programs().why
    if why:
        pytest.skip(f"BPF unavailable: {why}")
    proc = subprocess.run([*TOOL, "--timings", "--header", str(program / "f.h"),
                           str(program / "p"), "f"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("f(a=41)\nf -> 42 "), proc.stdout
    assert _stages(proc.stderr) == BUILD + RUN, proc.stderr
