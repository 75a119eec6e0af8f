"""Which BPF objects a trace directory holds: `--build DIR` (a run anywhere) every one; one
command (build and run here) only those its run may load, by the run side's own decision
(attach.objects_loaded): the one it takes first and each it falls back to; a `--run` of a
directory without the object it wants is one line and exit 2."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import live_needs
import pytest
import refusals

from btfgen.abi.arches import host_bpf_syscall, load_arch
from btfgen.probe import attach, bpf_object, features, run
from btfgen.probe.manifest import Manifest
from btfgen.trace import build, command

SIX = sorted([build.OBJECT, *build.SESSION_OBJECTS.values(), *build.SLEEPABLE_OBJECTS.values()])

TARGET = r"""
__attribute__((noipa)) int f(int a) { return a + 1; }
int main(void) { return f(41) != 42; }
"""

_WHY_NOT = live_needs.why_not(linux=None)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    if not shutil.which("gcc") or not (shutil.which("clang-19") or shutil.which("clang")):
        pytest.skip("no gcc or no clang")
    d = tmp_path_factory.mktemp("objects")
    (d / "p.c").write_text(TARGET)
    subprocess.run(["gcc", "-O1", "-g", str(d / "p.c"), "-o", str(d / "p")], check=True,
                   capture_output=True)
    return d / "p"


def _names() -> Manifest:
    """The object names a user trace directory of this machine's arch gives."""
    return build.user_objects("x86_64", load_arch("x86_64"))


def test_build_writes_every_object(program, tmp_path, capsys):
    out = tmp_path / "dir"
    assert command.main(["--build", str(out), str(program), "f"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.glob("*.bpf.o")) == SIX
    assert sorted(json.loads((out / "trace.json").read_text())["objects"]) == SIX


@pytest.fixture
def counted(monkeypatch):
    """(the .bpf.o files each build wrote, the objects each run opened, what it printed)"""
    written: list[list[str]] = []
    opened: list[str] = []
    printed = io.StringIO()
    compile_, run_ = build._compile, run.run

    def counting(out, *args, **kw):
        names = compile_(out, *args, **kw)
        written.append(sorted(p.name for p in Path(out).glob("*.bpf.o")))
        return names

    class Opened(bpf_object.BpfObject):
        def __init__(self, path, *args, **kw):
            opened.append(Path(path).name)
            super().__init__(path, *args, **kw)

    monkeypatch.setattr(build, "_compile", counting)
    monkeypatch.setattr(run, "BpfObject", Opened)
    monkeypatch.setattr(run, "run", lambda directory, opts: run_(directory, opts, out=printed))
    return written, opened, printed


@pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")
@pytest.mark.parametrize("options", [[], ["--attach", "single", "--no-sleepable"],
                                     ["--attach", "multi"]])
def test_one_command_compiles_the_objects_its_run_loads(program, counted, options, capfd):
    written, opened, printed = counted
    if options[1:2] == ["multi"] and (why := features.uprobe_multi_links(
            host_bpf_syscall()).why):
        pytest.skip(why)
    assert command.main([*options, str(program), "f"]) == 0, capfd.readouterr().err
    assert "f(a=41)" in printed.getvalue()
    wanted = attach.objects_loaded(options[1] if options else "auto", _names(),
                                   sleepable="--no-sleepable" not in options)
    assert written == [sorted(wanted)]
    assert opened == wanted[:1]  # the first: nothing refused here
    if options[1:2] == ["single"]:
        assert wanted == [build.OBJECT]
    assert len(wanted) < len(SIX)


@pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")
def test_one_command_keeps_the_fallback_of_a_refused_session(program, counted, capfd,
                                                             monkeypatch):
    # A kernel whose probe said yes but which refuses the session link: the run goes on with
    # the pair, whose object the one-command build compiled too.
    if why := features.session_links(host_bpf_syscall(), kernel=False).why:
        pytest.skip(why)
    written, opened, printed = counted
    refusals.refuse_session_links(monkeypatch)
    assert command.main([str(program), "f"]) == 0, capfd.readouterr().err
    err = capfd.readouterr().err
    assert "f(a=41)" in printed.getvalue() and "was refused" in err, err
    assert opened[-1] in (build.OBJECT, build.SLEEPABLE_OBJECTS["pair"]), opened
    assert set(opened) <= set(written[0]), (opened, written)
    assert len(written[0]) < len(SIX)


@pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")
def test_a_run_wanting_an_object_the_directory_lacks_is_one_line(program, tmp_path, capfd):
    # Built as one command with --attach single --no-sleepable builds it: trace.bpf.o alone.
    out = tmp_path / "dir"
    made = build.build(build.Request(functions=["f"], program=str(program),
                                     run_here=("single", False)), out)
    assert made.objects == [build.OBJECT]
    assert sorted(p.name for p in out.glob("*.bpf.o")) == [build.OBJECT]
    number = host_bpf_syscall()
    if not features.sleepable_uprobes(number, "single").why:
        asked, missing = ["--attach", "single"], build.SLEEPABLE_OBJECTS["pair"]
    elif not features.session_links(number, kernel=False).why:
        asked = ["--attach", "session", "--no-sleepable"]
        missing = build.SESSION_OBJECTS[features.session_links(number, kernel=False).variant]
    else:
        pytest.skip("no sleepable single uprobes nor uprobe.session here: every run this "
                    "kernel makes wants trace.bpf.o")
    capfd.readouterr()
    assert command.main(["--run", str(out), *asked, "--", str(program)]) == 2
    got, err = capfd.readouterr()
    assert got == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"btfgen trace: the trace directory holds no {missing} for the "), err
    assert err.endswith("(it has trace.bpf.o: built for another run's attach mode); build it "
                        "with --build DIR to have every one\n"), err
