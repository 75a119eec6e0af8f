"""The docs' examples run: each command block marked `<!-- doc-test -->` succeeds as written, the
layout JSON contract names the keys `btfgen layout --json` prints, and docs/captures.md's library
example gives what the page shows. Seconds: one small program built with gcc -g."""

from __future__ import annotations

import doctest
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import docpages
import pytest

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("pahole")),
                                reason="needs gcc and pahole (a -g program's BTF)")

BLOCKS = [(page, line, text) for page in docpages.pages()
          for line, text in docpages.marked_blocks(page, "doc-test")]


def _workdir(tmp_path: Path) -> dict[str, str]:
    """tmp_path as a user's directory beside the source tree, `btfgen` this tree's."""
    (tmp_path / "tests").symlink_to(docpages.ROOT / "tests")
    bindir = tmp_path / ".bin"
    bindir.mkdir()
    wrapper = bindir / "btfgen"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m btfgen "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(docpages.ROOT))
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env


def test_the_docs_have_tested_blocks():
    pages = {page.name for page, _, _ in BLOCKS}
    assert {"generate.md", "layout.md", "dump.md", "check.md", "captures.md"} <= pages


@pytest.mark.parametrize("page, line, text", BLOCKS,
                         ids=[f"{p.name}:{n}" for p, n, _ in BLOCKS])
def test_documented_commands_succeed(page, line, text, tmp_path):
    env = _workdir(tmp_path)
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{page.name}:{line}:\n{text}\n{run.stderr}"
    assert "Traceback" not in run.stderr
    assert run.stdout or run.stderr, "the commands printed nothing"


_LAYOUT_SOURCE = """
struct pair { long a, b; };
long f_stack(long a, long b, long c, long d, long e, long f, long g, struct pair p) {
    return a + b + c + d + e + f + g + p.a + p.b; }
int main(void) { struct pair p = {1, 2}; return (int)f_stack(1, 2, 3, 4, 5, 6, 7, p); }
"""


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_the_layout_contract_names_the_keys_layout_prints(tmp_path):
    page = docpages.DOCS / "layout.md"
    [(_, contract)] = docpages.marked_blocks(page, "layout-contract")
    promised = set(re.findall(r'"([a-z_]+)":', contract))
    source = tmp_path / "prog.c"
    source.write_text(_LAYOUT_SOURCE)
    subprocess.run(["gcc", "-O1", "-g", "-o", str(tmp_path / "prog"), str(source)], check=True)
    out = subprocess.run([sys.executable, "-m", "btfgen", "layout", str(tmp_path / "prog"),
                          "--func", "f_stack", "--json"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(docpages.ROOT)))
    assert out.returncode == 0, out.stderr
    layout = json.loads(out.stdout)
    pieces = [p for a in layout["functions"][0]["args"] for p in a["pieces"]]
    assert any("stack" in p for p in pieces) and any("reg" in p for p in pieces)
    printed = _keys(layout)
    assert printed - promised == set(), "keys printed but not in docs/layout.md's contract"
    assert promised - printed == set(), "keys in docs/layout.md's contract but not printed"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the page shows an x86_64 module")
def test_the_captures_library_example(tmp_path, monkeypatch):
    source = docpages.ROOT / "tests" / "codegen" / "capture" / "header_target.c"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(tmp_path / "header_target"), str(source)],
                   check=True)
    monkeypatch.chdir(tmp_path)
    result = doctest.testfile(str(docpages.DOCS / "captures.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.attempted >= 4
    assert result.failed == 0
