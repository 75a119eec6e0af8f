"""The progress line (btfgen/progress.py): drawn on a terminal only, a bar when the work is
counted, the file position of a watched file; and the long commands draw it on a terminal and
not into a pipe."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
import toolchains

from btfgen import progress as P

RECORDING_TESTS = Path(__file__).resolve().parent / "recordings"  # datasets.py


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal():
    out = io.StringIO()
    with P.Progress(True, stream=out) as p:
        p("working")
        p.total(10, "files")
        p.advance(3)
    assert out.getvalue() == "" and p._ticker is None


def test_silent_when_quiet():
    out = Terminal()
    with P.Progress(False, stream=out) as p:
        p("working")
    assert out.getvalue() == ""


def test_bar_and_stage_on_a_terminal():
    out = Terminal()
    with P.Progress(True, "btfgen decode", stream=out) as p:
        p("3 recordings")
        p.total(12, "files")
        p.advance(3)
        line = p.line()
        assert line.startswith("btfgen decode: ") and line.endswith(
            "s 3 recordings [######..................] 3/12 files (25%)"), line
        time.sleep(3 * P.TICK)  # the ticker redraws with no call from the work
    text = out.getvalue()
    assert text.count("\r\x1b[K") >= 3 and "3/12 files (25%)" in text
    assert text.endswith("\r\x1b[K")  # cleared, the next line starts clean


def test_watch_follows_the_file_position(tmp_path):
    data = tmp_path / "big"
    data.write_bytes(bytes(4 << 20))
    out = Terminal()
    with open(data, "rb") as f, P.Progress(True, stream=out) as p:
        p("reading")
        p.watch(str(data))
        f.read(1 << 20)
        assert P.read_offset(os.path.realpath(data)) == 1 << 20
        time.sleep(3 * P.TICK)
        assert "1/4 MB (25%)" in p.line()
    assert P.read_offset(str(tmp_path / "not-open")) is None


def _on_a_terminal(args, cwd=None) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal (stdout elsewhere): its exit status, stderr."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "btfgen", *args], stdout=subprocess.DEVNULL,
                            stderr=follower, cwd=cwd)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=300)
    os.close(leader)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


@pytest.fixture
def recordings(tmp_path):
    sys.path.insert(0, str(RECORDING_TESTS))
    try:
        import datasets
    finally:
        sys.path.remove(str(RECORDING_TESTS))
    paths = []
    for i, arch in enumerate(("x86_64", "arm64", "s390x")):
        paths.append(tmp_path / f"{arch}.btfrec")
        datasets.write(paths[-1], arch, 3000, i, host=f"h{i}")
    return paths


def test_decode_draws_on_a_terminal(tmp_path, recordings):
    pytest.importorskip("pyarrow")
    rc, err = _on_a_terminal(["decode", "--format", "parquet", "-o", str(tmp_path / "ds"),
                              *map(str, recordings)])
    assert rc == 0, err
    assert "\x1b[Kbtfgen decode: " in err and "3 recordings -> " in err
    assert "3 recordings added" in err
    rc, err = _on_a_terminal(["decode", "-q", "--format", "parquet", "-o",
                              str(tmp_path / "ds2"), *map(str, recordings)])
    assert rc == 0 and err == ""
    rc, err = _on_a_terminal(["decode", str(recordings[0])])  # stdout not the terminal: a bar
    assert rc == 0 and "\x1b[Kbtfgen decode: " in err and "decoding " in err


def test_check_draws_on_a_terminal():
    if not toolchains.TOOLCHAINS["x86_64"].available() or not toolchains.have("pahole"):
        pytest.skip("no x86_64 toolchain")
    obj = toolchains.compile_c("int f(int a, long b) { return a + b; }\n", "x86_64")
    rc, err = _on_a_terminal(["check", str(obj)])
    assert rc == 0, err
    assert "\x1b[Kbtfgen check: " in err and "reading BTF" in err and err.endswith("\r\x1b[K")
    assert "(100%)" in err and " MB (" in err  # the bar over .debug_info, read to its end
    proc = subprocess.run([sys.executable, "-m", "btfgen", "check", str(obj)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""


def test_generate_draws_on_a_terminal(tmp_path):
    if not toolchains.TOOLCHAINS["x86_64"].available() or not toolchains.have("pahole"):
        pytest.skip("no x86_64 toolchain")
    obj = toolchains.compile_c("int f(int a, long b) { return a + b; }\n", "x86_64")
    rc, err = _on_a_terminal([str(obj), "-o", str(tmp_path / "out"), "--lang",
                              "python"])
    assert rc == 0, err
    assert "\x1b[Kbtfgen: " in err and "reading BTF" in err and "generating python" in err
    assert "] 2/4 stages (50%)" in err
