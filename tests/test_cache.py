"""The user's cache (btfgen.resources.cache_dir): the grammars' parse tables and the templates'
compiled code. Outputs are the same bytes with no cache, a cold one, a warm one and a damaged one;
a cache that cannot be made is done without."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lark
import pytest

from btfgen import resources

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

_CHILD = """
import hashlib, json, sys
sys.path[:0] = sys.argv[2:]
import golden
out = golden.outputs(sys.argv[1])
print(json.dumps({n: hashlib.sha256(t.encode()).hexdigest() for n, t in out.items()}))
"""


def _outputs(cache: str) -> dict[str, str]:
    """The golden outputs of x86_64, made in a fresh process with BTFGEN_CACHE_DIR=`cache`."""
    env = dict(os.environ, BTFGEN_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _CHILD, "x86_64", str(TESTS / "codegen"),
                           str(TESTS)], env=env, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_outputs_do_not_depend_on_the_cache(tmp_path):
    sys.path.insert(0, str(TESTS))
    from toolchains import TOOLCHAINS

    if not TOOLCHAINS["x86_64"].available():
        pytest.skip(f"{TOOLCHAINS['x86_64'].compiler} not installed")
    without = _outputs("")
    cache = tmp_path / "cache"
    cold = _outputs(str(cache))
    entries = sorted(p.name for p in cache.iterdir())
    assert [n for n in entries if n.startswith("abi-")], entries  # the ABI grammar's tables
    assert len([n for n in entries if n.startswith("jinja-")]) >= 4, entries  # the templates
    assert not [n for n in entries if n.endswith(".tmp")]
    assert _outputs(str(cache)) == cold
    for p in cache.iterdir():  # a disk's or a killed writer's damage: built again, rewritten
        p.write_bytes(b"damaged")
    assert _outputs(str(cache)) == cold
    assert sorted(p.name for p in cache.iterdir()) == entries
    assert not [p for p in cache.iterdir() if p.read_bytes() == b"damaged"]
    assert without == cold


def _spelled(tree) -> list:
    """A parse tree with every position lark keeps (the ABI language's messages point there)."""
    out = []
    for node in tree.iter_subtrees_topdown():
        meta = node.meta
        out.append((node.data, getattr(meta, "line", None), getattr(meta, "column", None),
                    getattr(meta, "end_line", None), getattr(meta, "end_column", None)))
        out += [(t.type, str(t), t.line, t.column, t.end_line, t.end_column)
                for t in node.children if isinstance(t, lark.Token)]
    return out


@pytest.fixture
def cache_at(monkeypatch):
    def at(value: str) -> None:
        monkeypatch.setenv(resources.CACHE_ENV, value)
        resources.cache_dir.cache_clear()

    yield at
    resources.cache_dir.cache_clear()


@pytest.mark.parametrize("grammar,options,text", [
    ("abi.lark", dict(parser="lalr", propagate_positions=True, maybe_placeholders=False,
                      start=["start", "body"]),
     (ROOT / "btfgen" / "abi" / "arches" / "x86_64.abi").read_text()),
    ("filter.lark", dict(parser="lalr", import_paths=[str(ROOT / "grammars")],
                         maybe_placeholders=False, propagate_positions=True),
     "vfs_read: count > 4096 && file->f_flags & 0x800"),
])
def test_cached_parse_tables_parse_alike(cache_at, tmp_path, grammar, options, text):
    start = options["start"][0] if "start" in options else None
    fresh = lark.Lark((ROOT / "grammars" / grammar).read_text(), **options)
    want = _spelled(fresh.parse(text, start=start))
    cache_at(str(tmp_path))
    cold = resources.lark_parser(grammar, **options)
    (entry,) = tmp_path.glob(f"{Path(grammar).stem}-*.lark")
    warm = resources.lark_parser(grammar, **options)
    assert _spelled(cold.parse(text, start=start)) == want
    assert _spelled(warm.parse(text, start=start)) == want
    # Other options are other tables: a second entry, not the first one's tables.
    resources.lark_parser(grammar, **dict(options, maybe_placeholders=True))
    assert len(list(tmp_path.glob(f"{Path(grammar).stem}-*.lark"))) == 2
    assert entry.exists()


def test_a_cache_that_cannot_be_made_is_done_without(cache_at, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache_at(str(blocker / "cache"))
    assert resources.cache_dir() is None
    parser = resources.lark_parser("path.lark", start="path", parser="lalr",
                                   maybe_placeholders=False)
    assert parser.parse("a->b").data == "path"
    cache_at("")
    assert resources.cache_dir() is None


def test_the_cache_is_the_users_own(cache_at, tmp_path, monkeypatch):
    monkeypatch.delenv(resources.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    resources.cache_dir.cache_clear()
    made = resources.cache_dir()
    assert made == tmp_path / "xdg" / "btfgen"
    assert made.stat().st_mode & 0o777 == 0o700
