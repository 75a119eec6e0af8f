"""A package of standard-library modules as the one flat text a generated module holds.

The runtime (btfgen/decoder/runtime/) is a package whose modules import each other, and
spec_format, relatively. Embedded, they share one namespace: each module's text is written after
the modules it imports, without those imports, so every name it imported is already defined
above it. What could make that text mean something else than the package is refused here, at
generation time: an import of anything but the standard library or a module written above, a
cycle, or one name defined by two modules.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType


class EmbedError(Exception):
    pass


def source(package: ModuleType) -> str:
    """The text of `package`'s modules and of every module they import relatively, each after
    the modules it imports, its `__init__` last; the parts before each `from __future__` line
    (docstrings) and a `__main__` block stay behind."""
    return "\n\n".join(m.text for m in _embedded(package.__name__))


def module_names(package: ModuleType) -> list[str]:
    """The modules `source` writes, in its order."""
    return [m.name for m in _embedded(package.__name__)]


@cache
def _embedded(package: str) -> tuple[_Module, ...]:
    modules: list[_Module] = []
    _visit(package, modules, [])
    _check_names(modules)
    return tuple(modules)


class _Module:
    def __init__(self, name: str):
        self.name = name
        path, is_package = _locate(name)
        self.package = name if is_package else name.rpartition(".")[0]
        self.code = path.read_text()
        self.tree = ast.parse(self.code, str(path))
        self.text = ""  # as embedded
        self.kept: list[ast.stmt] = []  # its top-level statements, as embedded


def _locate(name: str) -> tuple[Path, bool]:
    """The file of module `name` and whether it is a package's `__init__`, found without
    importing anything (a module that imports itself back would fail there, not here)."""
    top, *parts = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise EmbedError(f"{name}: not found")
    path = Path(spec.origin)
    for part in parts:
        if path.name != "__init__.py":
            raise EmbedError(f"{name}: {path} is not a package")
        package = path.parent / part / "__init__.py"
        path = package if package.is_file() else path.parent / f"{part}.py"
        if not path.is_file():
            raise EmbedError(f"{name}: not found")
    return path, path.name == "__init__.py"


def _visit(name: str, done: list[_Module], path: list[str]) -> None:
    """Appends `name` to `done` after what it imports (depth first, in import order)."""
    if any(m.name == name for m in done):
        return
    if name in path:
        raise EmbedError(f"{name}: an import cycle: {' -> '.join(path + [name])}")
    m = _Module(name)
    dropped = [stmt for stmt in m.tree.body if _is_main_block(stmt)]
    for stmt in m.tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.level:
            if stmt.module is None:
                raise EmbedError(f"{m.name}:{stmt.lineno}: `from . import` a module: embedded, "
                                 f"there is no module to name; import names from it")
            target = importlib.util.resolve_name("." * stmt.level + stmt.module, m.package)
            _visit(target, done, path + [name])
            dropped.append(stmt)
    for stmt in _statements(m.tree.body):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt not in dropped:
            _check_import(m.name, stmt)
    m.text = _text(m, dropped)
    m.kept = [s for s in m.tree.body if s not in dropped]
    done.append(m)


def _statements(body: list):
    """Every statement in `body` and in the blocks nested in it (expressions hold none)."""
    for stmt in body:
        yield stmt
        for block in ("body", "orelse", "finalbody", "handlers"):
            yield from _statements(getattr(stmt, block, []))


def _check_import(where: str, stmt: ast.Import | ast.ImportFrom) -> None:
    """Refuses an import that the embedded text could not run: a relative one it does not
    drop (inside a function), or one of anything but the standard library."""
    if isinstance(stmt, ast.ImportFrom) and stmt.level:
        raise EmbedError(f"{where}:{stmt.lineno}: a relative import below the top level: "
                         f"embedded, there is no package to import from")
    names = [stmt.module] if isinstance(stmt, ast.ImportFrom) else [a.name for a in stmt.names]
    for name in names:
        if name.partition(".")[0] not in sys.stdlib_module_names and name != "__future__":
            raise EmbedError(f"{where}:{stmt.lineno}: imports {name}, not in the standard "
                             f"library: a generated module could not import it")


def _is_main_block(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "__name__ == '__main__'"


def _text(m: _Module, dropped: list[ast.stmt]) -> str:
    """The module's lines after its `from __future__` line, without the dropped statements
    (nor the blank lines that followed one where a blank line came before it)."""
    future = [s for s in m.tree.body if isinstance(s, ast.ImportFrom) and s.module == "__future__"]
    if not future:
        raise EmbedError(f"{m.name}: no `from __future__ import annotations` to start from")
    lines = m.code.split("\n")
    keep = [i >= future[-1].end_lineno for i in range(len(lines))]
    for stmt in dropped:
        for i in range(stmt.lineno - 1, stmt.end_lineno):
            keep[i] = False
        after = stmt.end_lineno
        if stmt.lineno < 2 or not lines[stmt.lineno - 2].strip():
            while after < len(lines) and not lines[after].strip():
                keep[after] = False
                after += 1
    return "\n".join(line for line, k in zip(lines, keep) if k).strip("\n") + "\n"


def _check_names(modules: list[_Module]) -> None:
    """No name is defined by two modules (the same import written twice is one definition)."""
    seen: dict[str, tuple[str, str]] = {}  # name -> (module, what binds it)
    for m in modules:
        for name, how in _bindings(m.kept):
            first, first_how = seen.setdefault(name, (m.name, how))
            if first != m.name and not (how.startswith("import") and first_how == how):
                raise EmbedError(f"{m.name}: defines {name}, as {first} does: embedded, "
                                 f"one would replace the other")


def _bindings(stmts: list[ast.stmt]):
    """(name, how) for each name bound by statements at a module's top level; `how` is the
    statement for an import, else the kind of statement."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for a in stmt.names:
                yield (a.asname or a.name).partition(".")[0], "import: " + ast.unparse(stmt)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield stmt.name, type(stmt).__name__
            continue  # what its body binds is its own
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For)):
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        yield node.id, type(stmt).__name__
        # if, try, for, with: their blocks are the top level too
        for block in ("body", "orelse", "finalbody"):
            yield from _bindings(getattr(stmt, block, []))
        for handler in getattr(stmt, "handlers", []):
            yield from _bindings(handler.body)
