"""Function prototypes and their types from C headers, parsed by libclang for a target arch.

    from btfgen.cheader import load_headers
    types = load_headers(["api.h"], arch="arm64", include_dirs=["include"], defines=["NDEBUG"])
    [func] = types.find_funcs("api_open")

The result is a TypeSource made of the same classes the BTF reader produces, so placement, code
generation and layouts work on it unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from btfgen.errors import HeaderError

from . import clang as C
from .convert import Builder, FuncDecl, Unsupported
from .table import HeaderTypes
from .targets import target_for, targets

__all__ = ["HeaderTypes", "load_headers", "targets"]

_MAIN = "<btfgen-headers>.c"


def load_headers(headers: Sequence[str], *, arch: str, include_dirs: Iterable[str] = (),
                 defines: Iterable[str] = ()) -> HeaderTypes:
    """Parse `headers` (in order, as one translation unit) for `arch`.

    `defines` are `NAME` or `NAME=VALUE`. Raises HeaderError with libclang's first error
    (file:line:col: message) when the headers do not parse.
    """
    if not headers:
        raise HeaderError("--header: no header given")
    target = target_for(arch)
    paths = [str(Path(h).resolve()) for h in headers]
    for given, path in zip(headers, paths):
        if not Path(path).is_file():
            raise HeaderError(f"{given}: no such header file")
        if '"' in path or "\n" in path:
            raise HeaderError(f"{given}: a header path cannot contain '\"' or a newline "
                              "(C has no way to quote it in #include)")
    source = "".join(f'#include "{p}"\n' for p in paths)
    tu = C.parse(_MAIN, source, C.command_line(target, list(include_dirs), list(defines)))
    table = HeaderTypes(paths=list(headers), arch=target.arch, byte_order=target.byte_order,
                        pointer_size=target.pointer_size)
    builder = Builder(table)
    decls = _convert(tu, builder)
    table._fill(builder.types, decls)
    return table


def _convert(tu, builder: Builder) -> list[FuncDecl]:
    """Every top-level declaration outside system headers, in source order: functions (the
    first declaration of each decides its ids) and the types declared beside them."""
    decls: list[FuncDecl] = []
    seen: set[str] = set()
    for cursor in tu.cursor.get_children():
        loc = cursor.location
        if loc.file is None or loc.is_in_system_header:
            continue
        is_func = cursor.kind == C.cindex.CursorKind.FUNCTION_DECL
        if is_func:
            usr = cursor.get_usr() or cursor.spelling
            if usr in seen:
                continue
            seen.add(usr)
        where = f"{loc.file.name}:{loc.line}:{loc.column}"
        mark = builder.mark()
        try:
            if is_func:
                decls.append(FuncDecl(cursor.spelling, where, builder.function(cursor)))
            else:
                builder.declaration(cursor)
        except Unsupported as e:
            builder.rollback(mark)  # no half-made types, no holes in the ids
            if is_func:
                decls.append(FuncDecl(cursor.spelling, where, error=str(e)))
    return decls
