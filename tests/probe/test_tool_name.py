"""The tool names itself by the copy of the run side that runs, decided once as prog.py is
imported: `btfgen trace` from btfgen, `btfgen_trace` from a trace directory's copy, and nothing
sets the name at run time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.probe import prog
from btfgen.trace import build, command

BTFGEN = Path(__file__).resolve().parents[2] / "btfgen"
BOTH_STEPS = ["--run", "d", "--build", "e"]
SAID = "--build and --run are two steps: give one (see --help)\n"


def test_btfgens_command_says_btfgen_trace(capsys):
    assert prog.NAME == prog.COMMAND == "btfgen trace"
    with pytest.raises(SystemExit) as e:
        command.main(BOTH_STEPS)
    assert e.value.code == 2
    assert capsys.readouterr().err == f"btfgen trace: {SAID}"


def test_a_trace_directorys_copy_says_btfgen_trace_underscored(tmp_path):
    build._copy_run_side(tmp_path)
    # -I -S: the copy alone, no btfgen within reach.
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", str(tmp_path / "btfgen_trace.py"),
                           *BOTH_STEPS], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (2, f"btfgen_trace: {SAID}")


def _name_set(path: Path) -> list[str]:
    """Where `path` assigns to an attribute NAME (the way a module's name would be reset)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        found += [f"{path.name}:{node.lineno}" for t in targets
                  if isinstance(t, ast.Attribute) and t.attr == "NAME"]
    return found


def test_nothing_sets_the_name_at_run_time(tmp_path):
    (tmp_path / "setter.py").write_text("from . import prog as tool_name\n"
                                        "def main(prog):\n    tool_name.NAME = prog\n")
    assert _name_set(tmp_path / "setter.py") == ["setter.py:3"]  # the check sees one
    assert [where for p in sorted(BTFGEN.rglob("*.py")) for where in _name_set(p)] == []
