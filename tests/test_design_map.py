"""docs/design.md lists every module of every package, a line each: a module missing from its
list, or one listed there that is gone, fails here.

The list is the fenced block after MODULES_MARK: a line at the left margin names a package
(`btfgen/probe/`) or a module directly under btfgen/ (`btfgen/plan.py`); a line indented by two
spaces names a module of the package above it (`  run.py   ...`); deeper lines carry on the
description. Names that are not Python modules (`arches/*.abi`, `trace.bpf.c`) are said there
too and not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "btfgen"
DESIGN = ROOT / "docs" / "design.md"
MODULES_MARK = "<!-- modules: read by tests/test_design_map.py -->"


def listed(text: str) -> set[str]:
    """The modules the map lists, as paths from the repository's root (`btfgen/probe/run.py`)."""
    block = text.split(MODULES_MARK, 1)[1].split("```", 2)[1]
    out: set[str] = set()
    package = None
    for line in block.splitlines()[1:]:
        top = re.match(r"(btfgen/\S*)", line)
        if top:
            name = top.group(1)
            if name.endswith("/"):
                package = name
            else:
                out.add(name)
                package = None
            continue
        inner = re.match(r"  (\S+\.py)(\s|$)", line)
        if inner:
            assert package, f"{inner.group(1)} listed under no package"
            out.add(package + inner.group(1))
    return out


def present(package: Path) -> set[str]:
    """Every module of the package, as paths from the package's parent."""
    return {p.relative_to(package.parent).as_posix() for p in package.rglob("*.py")}


def differences(text: str, package: Path) -> tuple[list[str], list[str]]:
    """(modules missing from the map, modules the map lists that are gone)."""
    said, there = listed(text), present(package)
    return sorted(there - said), sorted(said - there)


def test_every_module_is_on_the_map_and_none_is_gone():
    missing, gone = differences(DESIGN.read_text(), PACKAGE)
    assert not missing, f"not in docs/design.md's module list: {', '.join(missing)}"
    assert not gone, f"in docs/design.md's module list but gone: {', '.join(gone)}"


# The check itself, on a small package: it must see what it is for.
MAP = f"""{MODULES_MARK}
```
btfgen/top.py       a module directly under the package
btfgen/low/         a package
  __init__.py       its word on itself
  a.py              a module
                    its description, carried on (not.py is no entry here)
  data/*.abi        not a module
```
"""


def _tree(tmp_path: Path, names: list[str]) -> Path:
    for name in names:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return tmp_path / "btfgen"


def test_the_map_is_read():
    assert listed(MAP) == {"btfgen/top.py", "btfgen/low/__init__.py", "btfgen/low/a.py"}


def test_a_module_missing_and_one_gone_are_found(tmp_path):
    package = _tree(tmp_path, ["btfgen/top.py", "btfgen/low/__init__.py", "btfgen/low/b.py"])
    assert differences(MAP, package) == (["btfgen/low/b.py"], ["btfgen/low/a.py"])
