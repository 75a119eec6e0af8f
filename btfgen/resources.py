"""Finding the data that lives outside the package in the source tree (templates/, grammars/),
and the user's cache of what is built from it.

An installed wheel carries them as btfgen/templates and btfgen/grammars; a source checkout has
them beside the package. Both are looked for, installed first.

The cache holds what every run would otherwise build again from those files: the grammars'
LALR tables (lark) and the templates' compiled code (jinja2's bytecode cache). It is a pure
speed-up: each entry is keyed by everything it is built from, a missing, stale or damaged entry
is built again, and a cache that cannot be written is done without. Its files are loaded as
code (pickle, marshal), like the .pyc files beside a user's own modules: the directory is the
user's own, made 0700, never a shared temporary directory.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from btfgen.errors import BtfgenError

_PACKAGE = Path(__file__).resolve().parent
CACHE_ENV = "BTFGEN_CACHE_DIR"


def data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise BtfgenError(f"btfgen installation is incomplete: no {name}/ beside {_PACKAGE}")


def arches_dir() -> Path:
    return _PACKAGE / "abi" / "arches"


@functools.lru_cache(maxsize=1)
def cache_dir() -> Path | None:
    """$BTFGEN_CACHE_DIR (set but empty: no cache), else $XDG_CACHE_HOME/btfgen, else
    ~/.cache/btfgen; None when there is no such directory and it cannot be made."""
    given = os.environ.get(CACHE_ENV)
    if given is not None:
        path = Path(given) if given else None
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(base) / "btfgen" if os.path.isabs(base) else None
    if path is None:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return path if path.is_dir() and os.access(path, os.W_OK | os.X_OK) else None


def write_cached(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """`write` into a new file then renamed to `path`, so that a run reading the cache at the
    same time sees the old entry or the whole new one; failing to write it is no error."""
    try:
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=path.name + ".",
                                         suffix=".tmp", delete=False) as f:
            tmp = f.name
            try:
                write(f)
            except BaseException:
                f.close()
                os.unlink(tmp)
                raise
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass


def lark_parser(grammar: str, **options):
    """The lark parser of grammars/`grammar` with `options` (LALR), its tables from the cache
    when they were built for the same grammars, options, lark and Python."""
    import lark

    grammars = data_dir("grammars")
    text = (grammars / grammar).read_text()
    cache = cache_dir()
    if cache is None:
        return lark.Lark(text, **options)
    key = hashlib.sha256()
    # Every grammar file: one may %import another.
    for path in sorted(grammars.glob("*.lark")):
        key.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    key.update(repr((sorted(options.items()), lark.__version__, sys.version_info[:2])).encode())
    entry = cache / f"{Path(grammar).stem}-{key.hexdigest()[:32]}.lark"
    try:
        with open(entry, "rb") as f:
            return lark.Lark.load(f)
    except Exception:  # noqa: BLE001 - none yet, or a damaged one: built (again)
        pass
    parser = lark.Lark(text, **options)
    write_cached(entry, parser.save)
    return parser
