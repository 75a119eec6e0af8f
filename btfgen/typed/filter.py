"""--filter 'FUNC: EXPR': predicates on typed arguments and return values, evaluated in the BPF
program (`btfgen --filter` writes them beside the decoders; `btfgen trace --filter` compiles them
into its object, so a rejected event never takes ring-buffer space).

FUNC is a name or a glob; a glob puts the same predicate on every function it matches, checked
against each one's own prototype (one that does not fit is an error naming it, never a silent
skip). Two filters for one function are refused: join them with &&.

    filters = parse_options(["vfs_read: count > 4096"])   # syntax: FilterOptionError
    bound = bind(filters, layout, table)                   # types: FilterOptionError

The C of the bound filters is codegen's (btfgen/codegen/filter_c.py, filter_trace.py).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from btfgen.btf import types as T
from btfgen.errors import BtfgenError
from btfgen.typed import filter_check, filter_syntax
from btfgen.typed.filter_syntax import FilterError


class FilterOptionError(BtfgenError):
    """One line: the option as given, the column, what is wrong (exit status 2)."""


def _fail(text: str, e: FilterError, func: str | None = None) -> FilterOptionError:
    where = f" (for {func})" if func else ""
    return FilterOptionError(f"--filter {text!r}: column {e.column}: {e.message}{where}")


def parse_options(texts: list[str]) -> list[filter_syntax.Filter]:
    out = []
    for text in texts:
        try:
            out.append(filter_syntax.parse(text))
        except FilterError as e:
            raise _fail(text, e) from None
    return out


@dataclass(frozen=True, slots=True)
class Bound:
    """A filter checked against one placed function."""

    index: int  # the function's position in the layout (the trace's attach cookie)
    checked: filter_check.Checked


def bind(filters: list[filter_syntax.Filter], layout, table: T.TypeSource,
         kernel: bool = True) -> list[Bound]:
    """Each filter checked against every function of `layout` its FUNC matches, in layout
    order. `kernel`: the predicates may run in a kernel probe (a uprobe's read only user
    memory), which on an arch whose kernel and user addresses overlap needs every load's
    memory known."""
    separate = layout.arch if kernel and layout.address_spaces == "separate" else None
    names = [f.name for f in layout.functions]
    owner: dict[int, filter_syntax.Filter] = {}
    for flt in filters:
        hits = [i for i, n in enumerate(names) if fnmatch.fnmatchcase(n, flt.func)]
        if not hits:
            raise FilterOptionError(f"--filter {flt.text!r}: {flt.func!r} matches none of the "
                                    f"functions generated")
        for i in hits:
            if i in owner:
                raise FilterOptionError(f"--filter {flt.text!r}: {names[i]} has a filter "
                                        f"already ({owner[i].text!r}): join them with &&")
            owner[i] = flt
    out = []
    for i in sorted(owner):
        flt, fl = owner[i], layout.functions[i]
        func = table[fl.btf_id]
        assert isinstance(func, T.Func), f"layout function {fl.name}: BTF id {fl.btf_id}"
        glob = flt.func != fl.name
        try:
            checked = filter_check.check(flt, func, _unavailable(fl), separate)
        except FilterError as e:
            raise _fail(flt.text, e, fl.name if glob else None) from None
        out.append(Bound(i, checked))
    return out


def _unavailable(fl) -> dict[int | None, str]:
    out: dict[int | None, str] = {i: a.unavailable for i, a in enumerate(fl.args)
                                  if a.unavailable is not None}
    if fl.ret is not None and fl.ret.unavailable is not None:
        out[None] = fl.ret.unavailable
    return out
