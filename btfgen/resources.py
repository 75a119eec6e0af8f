"""Finding the data that lives outside the package in the source tree (templates/, grammars/).

An installed wheel carries them as btfgen/templates and btfgen/grammars; a source checkout has
them beside the package. Both are looked for, installed first.
"""

from pathlib import Path

from btfgen.errors import BtfgenError

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise BtfgenError(f"btfgen installation is incomplete: no {name}/ beside {_PACKAGE}")


def arches_dir() -> Path:
    return _PACKAGE / "abi" / "arches"
