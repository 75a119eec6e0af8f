"""The guests' bytecode (pyc.py): made by the suite's own interpreter, and what it loads.

A .pyc the guest's Python could not use would be ignored, not refused: the guest would compile
again, only slower. So the test has the suite's interpreter import a module whose source changed
after it was compiled: an unchecked-hash .pyc is loaded as it is, so the old value says the
bytecode, not the source, was run.
"""

from __future__ import annotations

import re

import pytest

from . import debian, pyc, python_guest
from .conftest import unavailable
from .targets import TARGETS

pytestmark = pytest.mark.live


@pytest.mark.skipif(not pyc.available(), reason="the suites' amd64 interpreters run only on x86_64")
@pytest.mark.parametrize("name", ["unstable-amd64", "bookworm-i386"])
def test_the_guest_python_runs_the_bytecode_made_here(name, tmp_path):
    target = TARGETS[name]
    try:
        files = python_guest.files(target)
    except debian.PackageError as e:
        unavailable(f"{name}: Debian's python3 cannot be had: {e}")
    compiler = python_guest.compiler(target)
    assert compiler is not None and compiler.python == files.python
    version = re.search(r"python(\d)\.(\d+)$", files.python)
    tag = f"cpython-{version.group(1)}{version.group(2)}"
    # The standard library's bytecode is in the guest's files, named for its version.
    stdlib = f"usr/lib/python{version.group(1)}.{version.group(2)}"
    for module in ("os", "json/__init__", "ctypes/__init__", "argparse"):
        head, _, base = f"{stdlib}/{module}".rpartition("/")
        assert f"{head}/__pycache__/{base}.{tag}.pyc" in files.files, module

    made = pyc.compiled(compiler, {"m/probe.py": b"VALUE = 'compiled'\n"})
    bytecode = f"m/__pycache__/probe.{tag}.pyc"
    assert list(made) == [bytecode]
    (tmp_path / bytecode).parent.mkdir(parents=True)
    (tmp_path / bytecode).write_bytes(made[bytecode])
    (tmp_path / "m" / "probe.py").write_text("VALUE = 'source'\n")
    out = compiler.run(["-B", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'm')!r}); "
                                    "import probe; print(probe.VALUE, probe.__cached__)"])
    assert out.split()[0] == "compiled", out


@pytest.mark.skipif(not pyc.available(), reason="the suites' amd64 interpreters run only on x86_64")
def test_a_trace_directorys_run_side_is_compiled_as_a_package(tmp_path):
    """The trace directory's run side is a package (btfgen_probe/): its bytecode goes in the
    package's own __pycache__, and the guest's Python imports it, relative imports and all,
    with the standard library it has."""
    from btfgen.trace import build

    target = TARGETS["unstable-amd64"]
    try:
        files = python_guest.files(target)
    except debian.PackageError as e:
        unavailable(f"{target.name}: Debian's python3 cannot be had: {e}")
    compiler = python_guest.compiler(target)
    version = re.search(r"python(\d)\.(\d+)$", files.python)
    tag = f"cpython-{version.group(1)}{version.group(2)}"
    trace = tmp_path / "trace"
    build._copy_run_side(trace)
    sources = {f"trace/{rel}": f.read_bytes() for rel, f in python_guest.directory_files(trace)
               if f.suffix == ".py"}
    made = pyc.compiled(compiler, sources)
    package = f"trace/{build.PROBE_COPY}"
    modules = sorted(p.rsplit("/", 1)[1][:-3] for p in sources if p.startswith(package + "/"))
    assert modules and {f"{package}/__pycache__/{m}.{tag}.pyc" for m in modules} <= set(made)
    for path, data in made.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    out = compiler.run(["-B", "-c", f"import sys; sys.path.insert(0, {str(trace)!r}); "
                                    f"from {build.PROBE_COPY} import tool; "
                                    "print(tool.__cached__)"])
    assert out.strip() == str(trace / build.PROBE_COPY / "__pycache__" / f"tool.{tag}.pyc")
