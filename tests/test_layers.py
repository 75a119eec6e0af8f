"""docs/design.md's module map holds: every import of a btfgen module (module level or inside a
function, type-checking ones included) goes down the layer order the map states, and no modules
import each other round a cycle.

The order is read from the map itself (the block after LAYERS_MARK), one layer a line, top
first: a part (a package `name/` or a module `name.py` directly under btfgen/) may import only
parts of the layers below its own, never one beside it or above.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "btfgen"
DESIGN = ROOT / "docs" / "design.md"
LAYERS_MARK = "<!-- layers, top first: read by tests/test_layers.py -->"


def layers(text: str) -> list[list[str]]:
    """The parts of each layer, top first, from the fenced block after LAYERS_MARK: a line
    names its parts (`commands/`, `target.py`, comma-separated) before two spaces and its
    description."""
    after = text.split(LAYERS_MARK, 1)[1]
    block = after.split("```", 2)[1]
    out = []
    for line in block.splitlines()[1:]:
        names = re.split(r"\s{2,}", line.strip(), 1)[0]
        if not line.startswith(" ") and names:
            out.append([_part_name(n.strip()) for n in names.split(",")])
    return out


def _part_name(spelled: str) -> str:
    return spelled.removesuffix("/").removesuffix(".py")


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def part_of(name: str, root: str) -> str:
    """The part a dotted module name belongs to: `btfgen.codegen.bpf` -> codegen,
    `btfgen.target` -> target, `btfgen` itself -> __init__."""
    rest = name.split(".")[1:]
    return rest[0] if rest else "__init__"


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every import of one of `known` in the module, wherever it is made."""
    root = name.split(".")[0]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            wanted = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            # `from p import x`: the submodule p.x when there is one, else p itself.
            wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                      for a in node.names]
        else:
            continue
        for w in wanted:
            while w and w not in known:
                w = w.rpartition(".")[0]
            if w and w.split(".")[0] == root and w != name:
                out.append((node.lineno, w))
    return out


def upward(package: Path, order: list[list[str]]) -> list[str]:
    """Each import that is not down the order: a part importing one beside or above it."""
    rank = {p: i for i, layer in enumerate(order) for p in layer}
    known = modules(package)
    root = package.name
    out = []
    for name, path in known.items():
        mine = part_of(name, root)
        for line, target in imports(name, path, known):
            theirs = part_of(target, root)
            if theirs == mine:
                continue
            if mine not in rank or theirs not in rank:
                continue  # unplaced parts are reported by unplaced()
            if rank[theirs] <= rank[mine]:
                where = "beside" if rank[theirs] == rank[mine] else "above"
                out.append(f"{path.relative_to(package.parent)}:{line}: imports {target} "
                           f"({theirs} is {where} {mine} in docs/design.md's layers)")
    return out


def unplaced(package: Path, order: list[list[str]]) -> list[str]:
    placed = {p for layer in order for p in layer}
    parts = {part_of(n, package.name) for n in modules(package)}
    return sorted(parts - placed)


def cycles(package: Path) -> list[list[str]]:
    """The modules that import each other round a cycle (each strongly connected set of two or
    more), by name."""
    known = modules(package)
    graph = {n: sorted({t for _, t in imports(n, p, known)}) for n, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []

    def visit(v: str) -> None:  # Tarjan's; depth is bounded by the module count
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_every_part_is_on_the_map():
    left = unplaced(PACKAGE, layers(DESIGN.read_text()))
    assert not left, f"not in docs/design.md's layers: {', '.join(left)}"


def test_imports_go_down_the_layers():
    said = upward(PACKAGE, layers(DESIGN.read_text()))
    assert not said, "\n".join(said)


def test_no_modules_import_each_other_round_a_cycle():
    found = cycles(PACKAGE)
    assert not found, "\n".join(" <-> ".join(c) for c in found)


# The checks themselves, on a small package: they must see what they are for.
MAP = f"""{LAYERS_MARK}
```
front.py              the top
mid/, side.py         the middle
  a line of description only
low/                  the bottom
```
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "pkg"


def test_the_map_is_read_in_order():
    assert layers(MAP) == [["front"], ["mid", "side"], ["low"]]


@pytest.mark.parametrize("files,found", [
    ({"low/x.py": "def f():\n    from pkg.mid import y\n"}, "pkg/low/x.py:2: imports pkg.mid"),
    ({"mid/y.py": "from pkg import side\n"}, "pkg/mid/y.py:1: imports pkg.side"),
    ({"low/x.py": "from ..front import run\n"}, "pkg/low/x.py:1: imports pkg.front"),
], ids=["upward, in a function", "beside", "upward, relative"])
def test_an_import_up_or_beside_is_found(tmp_path, files, found):
    base = {"__init__.py": "", "front.py": "import pkg.mid.y\n", "side.py": "",
            "mid/__init__.py": "", "mid/y.py": "", "low/__init__.py": "", "low/x.py": ""}
    package = _tree(tmp_path, {**base, **files})
    said = upward(package, layers(MAP))
    assert len(said) == 1 and said[0].startswith(found), said


def test_an_unplaced_part_and_a_cycle_are_found(tmp_path):
    package = _tree(tmp_path, {"__init__.py": "", "low/__init__.py": "",
                               "low/a.py": "from pkg.low import b\n",
                               "low/b.py": "def f():\n    import pkg.low.a\n",
                               "new.py": ""})
    assert unplaced(package, layers(MAP)) == ["__init__", "new"]
    assert cycles(package) == [["pkg.low.a", "pkg.low.b"]]
