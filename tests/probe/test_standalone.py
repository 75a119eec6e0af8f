"""The run side (btfgen/probe) stands alone: every module imports only the standard library and
its own package (relatively), read from the source, and every module imports in a Python that
cannot import btfgen, from a copy made as the build makes it. The one exception is an optional
module built beside btfgen (OPTIONAL), imported only where its absence is caught."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.trace import build

PROBE = Path(__file__).resolve().parents[2] / "btfgen" / "probe"
MODULES = sorted(p.stem for p in PROBE.glob("*.py") if p.stem != "__init__")
# lines.py's C half (pyproject.toml's ext-modules): used where the target's Python has it.
OPTIONAL = {"_btfgen_lines"}


def _caught(tree) -> set[int]:
    """The lines of imports inside a `try` whose handlers catch ImportError."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError",
                                                               "ModuleNotFoundError")
                for h in node.handlers):
            lines |= {n.lineno for stmt in node.body for n in ast.walk(stmt)
                      if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def _imports(path: Path) -> list[tuple[int, str, int]]:
    """(line, module, level) of every import in `path`, wherever it is (in a function too),
    but an OPTIONAL module's where its absence is caught."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    caught = _caught(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, 0) for alias in node.names
                      if not (alias.name in OPTIONAL and node.lineno in caught)]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.module or "", node.level))
    return found


def outside(path: Path) -> list[str]:
    """The imports of `path` that are neither the standard library nor its own package."""
    bad = []
    for line, module, level in _imports(path):
        if level > 1:
            bad.append(f"{path.name}:{line}: from {'.' * level}{module} (outside the package)")
        elif level == 0 and module.split(".")[0] not in sys.stdlib_module_names | {"__future__"}:
            bad.append(f"{path.name}:{line}: import {module}")
    return bad


def test_every_module_imports_only_the_standard_library_and_its_own_package():
    assert MODULES and (PROBE / "__init__.py").exists()
    bad = [line for p in sorted(PROBE.glob("*.py")) for line in outside(p)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source, why", [
    ("import numpy\n", "import numpy"),
    ("from btfgen.trace import symbols\n", "import btfgen.trace"),
    ("def f():\n    from btfgen.trace import symbols\n", "import btfgen.trace"),
    ("from ..decoder import spec_format\n", "from ..decoder (outside the package)"),
    ("import _btfgen_lines\n", "import _btfgen_lines"),  # optional, but not caught
    ("try:\n    import _btfgen_lines\nexcept KeyError:\n    pass\n", "import _btfgen_lines"),
])
def test_the_check_sees_a_leak(tmp_path, source, why):
    # The check itself, on the ways a module could leak (a deferred import included).
    (tmp_path / "leaky.py").write_text("from __future__ import annotations\nimport os\n"
                                       "from . import errors\n" + source)
    assert [line.split(": ", 1)[1] for line in outside(tmp_path / "leaky.py")] == [why]


# Run with -I -S: no site-packages (where an installed btfgen would be), no PYTHONPATH, no
# current directory; only the copy's directory on sys.path.
_IMPORT_ALL = """
import importlib, importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
assert importlib.util.find_spec("btfgen") is None, "btfgen is importable here"
before = set(sys.modules)
for name in json.loads(sys.argv[2]):
    importlib.import_module(f"{sys.argv[3]}.{name}")
new = sorted(m for m in set(sys.modules) - before
             if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != sys.argv[3])
print(json.dumps(new))
"""


def test_every_module_imports_without_btfgen(tmp_path):
    build._copy_run_side(tmp_path)
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", _IMPORT_ALL, str(tmp_path),
                           json.dumps(MODULES), build.PROBE_COPY],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []  # nothing loaded but the standard library and itself


def test_the_copy_is_the_whole_package(tmp_path):
    build._copy_run_side(tmp_path)
    copied = sorted(p.name for p in (tmp_path / build.PROBE_COPY).iterdir())
    assert copied == sorted(p.name for p in PROBE.glob("*.py"))
    assert (tmp_path / "btfgen_trace.py").read_text() == \
        (PROBE.parent / "trace" / "launcher.py").read_text()


def test_the_package_map_names_every_module():
    """The package's docstring says which module holds which concept: it names them all."""
    listed = set(re.findall(r"^ {4}(\w+)\.py ", (PROBE / "__init__.py").read_text(), re.M))
    assert listed == set(MODULES)
