"""--filter 'FUNC: EXPR': predicates on typed arguments and return values, evaluated in the BPF
program (`btfgen --filter` writes them beside the decoders; `btfgen trace --filter` compiles them
into its object, so a rejected event never takes ring-buffer space).

FUNC is a name or a glob; a glob puts the same predicate on every function it matches, checked
against each one's own prototype (one that does not fit is an error naming it, never a silent
skip). Two filters for one function are refused: join them with &&.

    filters = parse_options(["vfs_read: count > 4096"])   # syntax: FilterOptionError
    bound = bind(filters, layout, table)                   # types: FilterOptionError
    text = header(bound, layout, table, ...)               # the C
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from btfgen.btf import types as T
from btfgen.errors import BtfgenError
from btfgen.typed import filter_c, filter_check, filter_syntax
from btfgen.typed.filter_syntax import FilterError

HEADER = "btfgen_filter.h"  # what `btfgen --filter` writes beside btfgen.bpf.h
TRACE_HEADER = "trace_filter.h"  # what `btfgen trace --filter` compiles into trace.bpf.o


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


def predicates(bound: list[Bound], layout, table, *, self_contained: bool
               ) -> list[tuple[Bound, str, filter_c.Predicates]]:
    """Each bound filter's C predicates, with the function's C name (the decoders' own)."""
    from btfgen.codegen import bpf

    cnames = bpf.function_names(layout.functions)
    ctypes = bpf.c_types(layout, table, self_contained)
    big = layout.byte_order == "big"
    where_common = dict(ptr_type=bpf.reg_type(layout.pointer_size),
                        pointer_size=layout.pointer_size, big_endian=big)
    out = []
    for b in bound:
        fl = layout.functions[b.index]
        view = bpf.function_view(fl, ctypes, big)
        where = filter_c.Where(tuple(a.field if a.decl else None for a in view.args),
                               **where_common)
        cname = cnames[b.index]
        out.append((b, cname, filter_c.predicates(b.checked, cname, where, fl.ret is not None)))
    return out


def header(bound: list[Bound], layout, table, *, self_contained: bool, decoders: str) -> str:
    """btfgen_filter.h: the predicates over the decoders' structs (`decoders` is the header
    that defines them, included first)."""
    parts = [f"/* Generated by btfgen: the --filter predicates for {layout.arch}. DO NOT EDIT.\n"
             " *\n"
             " * Per filtered function NAME:\n"
             " *   btfgen_filter_NAME(a)       1 when the arguments decoded at entry\n"
             " *                               (btfgen_entry_NAME) pass the filter;\n"
             " *   btfgen_filter_exit_NAME(r)  1 when the return value decoded at exit\n"
             " *                               (btfgen_exit_NAME) passes it.\n"
             " * A filter's conditions on $retval are the exit's, the others the entry's; an\n"
             " * exit whose entry was rejected is the caller's to drop (it saved the entry).\n"
             " * A value behind a NULL or faulting pointer, when the condition needed it, makes\n"
             " * the predicate false. */\n",
             "#ifndef BTFGEN_FILTER_H\n#define BTFGEN_FILTER_H\n",
             f'#include "{decoders}"\n\n', filter_c.PRELUDE]
    for _, _, preds in predicates(bound, layout, table, self_contained=self_contained):
        parts.append("\n" + preds.entry)
        if preds.exit:
            parts.append("\n" + preds.exit)
    parts.append("#endif /* BTFGEN_FILTER_H */\n")
    return "".join(parts)
