"""The runtime package embedded as one flat text: every module in, each after what it imports,
and what would change the text's meaning refused."""

import ast
import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from btfgen.codegen import embed
from btfgen.decoder import runtime
from btfgen.probe import spec_format

RUNTIME = Path(runtime.__file__).parent
FUTURE = "from __future__ import annotations\n"


def test_every_runtime_module_is_embedded_after_what_it_imports():
    names = embed.module_names(runtime)
    package = runtime.__name__
    assert set(names) == {spec_format.__name__, package} | {
        f"{package}.{p.stem}" for p in RUNTIME.glob("*.py") if p.stem != "__init__"}
    assert names[-1] == package
    for name in names[1:-1]:
        tree = ast.parse((RUNTIME / f"{name.rpartition('.')[2]}.py").read_text())
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                target = importlib.util.resolve_name("." * stmt.level + stmt.module, package)
                assert names.index(target) < names.index(name), (name, target)
    text = embed.source(runtime)
    assert not re.search(r"^\s*(from \.|from btfgen|import btfgen)", text, re.MULTILINE)


def test_the_embedded_runtime_offers_what_the_package_does():
    namespace: dict = {}
    # As in a generated module, the text runs after `from __future__ import annotations`.
    exec(compile(FUTURE + embed.source(runtime), "<runtime>", "exec"), namespace)
    assert namespace["__all__"] == runtime.__all__
    for name in runtime.__all__:
        assert type(namespace[name]).__name__ == type(getattr(runtime, name)).__name__, name


def _package(tmp_path, monkeypatch, name: str, files: dict[str, str]):
    """A package `name` of `files` (only found, not imported: a bad one is never run)."""
    (tmp_path / name).mkdir()
    for file, body in {"__init__.py": "", **files}.items():
        (tmp_path / name / file).write_text(
            f'"""{file}"""\n\nfrom __future__ import annotations\n\n{body}')
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return SimpleNamespace(__name__=name)


def test_a_package_is_embedded_in_import_order(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch, "embed_ok", {
        "__init__.py": "from .b import twice\n\n__all__ = ['twice']\n",
        "a.py": "import struct\n\n\ndef one():\n    return struct.calcsize('B')\n",
        "b.py": "import struct\n\nfrom .a import one\n\n\ndef twice():\n    return 2 * one()\n",
    })
    assert embed.module_names(pkg) == ["embed_ok.a", "embed_ok.b", "embed_ok"]
    text = embed.source(pkg)
    assert "from ." not in text
    namespace: dict = {}
    exec(FUTURE + text, namespace)
    assert namespace["twice"]() == 2 and namespace["__all__"] == ["twice"]


@pytest.mark.parametrize("name, files, error", [
    ("embed_lib", {"__init__.py": "from .a import x\n", "a.py": "import jinja2\n\nx = 1\n"},
     "embed_lib.a:5: imports jinja2, not in the standard library"),
    ("embed_lazy", {"__init__.py": "from .a import f\n",
                    "a.py": "def f():\n    from btfgen import target\n    return target\n"},
     "embed_lazy.a:6: imports btfgen, not in the standard library"),
    ("embed_inner", {"__init__.py": "from .a import f\n", "b.py": "x = 1\n",
                     "a.py": "def f():\n    from .b import x\n    return x\n"},
     "embed_inner.a:6: a relative import below the top level"),
    ("embed_twice", {"__init__.py": "from .a import x\nfrom .b import y\n",
                     "a.py": "def helper():\n    pass\n\n\nx = 1\n",
                     "b.py": "helper = None\ny = 2\n"},
     "embed_twice.b: defines helper, as embed_twice.a does"),
    ("embed_cycle", {"__init__.py": "from .a import x\n", "a.py": "from .b import y\n\nx = 1\n",
                     "b.py": "from .a import x\n\ny = 2\n"},
     "an import cycle: embed_cycle -> embed_cycle.a -> embed_cycle.b -> embed_cycle.a"),
])
def test_what_would_change_the_meaning_is_refused(tmp_path, monkeypatch, name, files, error):
    pkg = _package(tmp_path, monkeypatch, name, files)
    with pytest.raises(embed.EmbedError, match=error.replace(".", r"\.")):
        embed.source(pkg)
