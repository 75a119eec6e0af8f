"""The wheel carries templates/ and grammars/ and works from any directory, not the checkout."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy of what a clean clone has: in the checkout, setuptools would reuse the
    # build/ and *.egg-info an earlier build left (its SOURCES.txt listed summary.bpf.h, which
    # the package data did not name: the checkout's wheel had it, a clean clone's did not).
    src = tmp / "src"
    for name in ("pyproject.toml", "README.md"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, src / name)
    for name in ("btfgen", "templates", "grammars"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"),
         str(src)],
        check=True, capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("btfgen-*.whl")
    target = tmp / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True,
    )
    return target


def _run_installed(site: Path, code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_wheel_carries_data(installed):
    files = {p.relative_to(installed).as_posix() for p in (installed / "btfgen").rglob("*")}
    assert any(f.startswith("btfgen/templates/") and f.endswith(".j2") for f in files), files
    assert any(f.startswith("btfgen/grammars/") and f.endswith(".lark") for f in files), files
    assert any(f.startswith("btfgen/abi/arches/") and f.endswith(".abi") for f in files), files
    # every file a description includes (riscv.inc)
    shipped = {p.name for p in (Path(__file__).resolve().parents[1] / "btfgen/abi/arches").iterdir()}
    assert {f"btfgen/abi/arches/{n}" for n in shipped if n.endswith((".abi", ".inc"))} <= files
    assert "btfgen/trace/trace.bpf.c" in files, files
    # every header the BPF source includes from beside it (summary.bpf.h: --count, --latency)
    source = (ROOT / "btfgen/trace/trace.bpf.c").read_text()
    beside = {n for n in re.findall(r'^#include "([^"]+)"', source, re.M)
              if (ROOT / "btfgen/trace" / n).exists()}
    assert "summary.bpf.h" in beside, beside
    assert {f"btfgen/trace/{n}" for n in beside} <= files, beside - files
    assert "btfgen/trace/deny.txt" in files, files  # the kernel deny list the build reads
    # What a trace directory gets: the run side whole, and its launcher.
    probe = {p.name for p in (ROOT / "btfgen/probe").glob("*.py")}
    assert {f"btfgen/probe/{n}" for n in probe} <= files, files
    assert "btfgen/trace/launcher.py" in files, files


def test_wheel_carries_the_line_extension(installed):
    """The C half of probe/lines.py (the exports' texts) is built into the wheel where a
    compiler and Python's headers are (CI installs both), and the installed btfgen uses it."""
    built = sorted(installed.glob("_btfgen_lines*.so"))
    if not built and not os.environ.get("CI"):
        pytest.skip("no _btfgen_lines built here (optional: needs gcc and python3-dev)")
    assert built, sorted(p.name for p in installed.iterdir())
    out = _run_installed(installed, "from btfgen.probe import lines; "
                         "print(lines.EXTENSION.__file__)")
    assert out.strip() == str(built[0]), out


def test_installed_package_finds_its_data_from_elsewhere(installed):
    out = _run_installed(
        installed,
        "import btfgen, btfgen.resources as r;"
        "print(btfgen.__file__); print(r.data_dir('templates')); print(r.data_dir('grammars'))",
    )
    lines = out.split()
    assert all(line.startswith(str(installed)) for line in lines), lines


def test_installed_cli_reports_bad_input_in_one_line(installed):
    env = dict(os.environ, PYTHONPATH=str(installed))
    out = subprocess.run(
        [sys.executable, "-m", "btfgen", "dump", "/etc/hostname"],
        cwd="/", env=env, capture_output=True, text=True,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr


def test_every_package_is_in_the_wheel(installed):
    source = {
        p.parent.relative_to(ROOT).as_posix()
        for p in (ROOT / "btfgen").rglob("__init__.py")
    }
    missing = sorted(d for d in source if not (installed / d / "__init__.py").exists())
    assert not missing, f"not in pyproject.toml [tool.setuptools] packages: {missing}"


def test_installed_trace_command(installed):
    """`btfgen trace` from the wheel, elsewhere: its help, and a trace directory built from the
    installed package's BPF source (needs clang; the BTF is a tiny hand-made one)."""
    env = dict(os.environ, PYTHONPATH=str(installed))
    out = subprocess.run([sys.executable, "-m", "btfgen", "trace", "--help"], cwd="/", env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "--kernel" in out.stdout and "--run DIR" in out.stdout
    out = subprocess.run([sys.executable, "-m", "btfgen", "trace", "--kernel"], cwd="/",
                         env=env, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("btfgen trace: name the kernel functions"), out.stderr


def test_installed_run_side_runs_alone(installed, tmp_path):
    """The run side the installed package copies into a trace directory starts in a Python
    that cannot import btfgen (-I -S)."""
    _run_installed(installed, "from pathlib import Path; from btfgen.trace import build; "
                              f"build._copy_run_side(Path({str(tmp_path)!r}))")
    out = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "btfgen_trace.py"),
                          "--help"], cwd="/", capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: btfgen_trace ") and "--run DIR" in out.stdout


def test_installed_decode_reads_a_recording(installed, tmp_path):
    """A recording made with this tree decodes with the installed package, from elsewhere and
    with no BTF or BPF at hand, to what the live tracer prints (text and JSON lines)."""
    sys.path.insert(0, str(ROOT / "tests" / "recordings"))
    try:
        import synth
    finally:
        sys.path.pop(0)
    import io

    from btfgen.decoder.runtime import Function
    from btfgen.probe import output

    for arch in ("x86_64", "s390x"):  # both byte orders
        mod = synth.module(arch)
        evs = synth.events(synth.descriptors(mod), 40, seed=7, order=mod.BYTE_ORDER)
        path = tmp_path / f"{arch}.btfrec"
        synth.write(path, mod, evs)
        live = io.StringIO()
        p = output.Printer([Function(d) for d in synth.descriptors(mod)], mod.BYTE_ORDER, live,
                           flush=False)
        for e in evs:
            p.event(e)
        env = dict(os.environ, PYTHONPATH=str(installed))
        out = subprocess.run([sys.executable, "-m", "btfgen", "decode", str(path)], cwd="/",
                             env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout == live.getvalue() and out.stdout.count("\n") >= 40
        out = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "jsonl",
                              str(path)], cwd="/", env=env, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.count("\n") == 40, out.stderr
