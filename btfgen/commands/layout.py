"""Print where each argument and return value of BTF functions lives (`btfgen layout`).

BTF is a raw BTF file (default: the running kernel's) or an ELF file with .BTF. The arch comes
from --arch (kernel, uname -m or libbpf names; a family name such as x86 or riscv picks by the
BTF's pointer size), else from the ELF's e_machine, else from the machine btfgen runs on.
"""

from __future__ import annotations

import argparse
import json
import sys

from btfgen.commands.options import (
    add_btf_arguments,
    add_ctx_argument,
    add_dwarf_arguments,
    add_header_arguments,
    print_notes,
)
from btfgen.layout import ArchLayout, RegPiece, ValueLayout
from btfgen.layout_json import to_json
from btfgen.target import open_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_btf_arguments(parser, dwarf_input=True)
    parser.add_argument("--arch", metavar="ARCH",
                        help="target architecture (default: the ELF's, else this machine's)")
    parser.add_argument("--func", metavar="NAME", action="append", default=[],
                        help="a function name or glob to place (repeatable; default: every "
                             "FUNC)")
    add_ctx_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the JSON contract")
    add_header_arguments(parser)
    add_dwarf_arguments(parser)


def run(args: argparse.Namespace) -> int:
    target = open_options(args)
    selection = target.select(args.func)
    funcs = selection.functions
    if selection.missing:
        print(f"btfgen layout: {selection.missing_line(target.path)}", file=sys.stderr)
        return 1
    placement = target.placement(funcs if args.func else None)
    print_notes(placement)
    layout = placement.layout
    if args.json:
        doc = to_json(layout)
        # Indented for a few functions (read by people), compact for many (read by programs).
        indent = 1 if len(funcs) <= 64 else None
        text = json.dumps(doc, indent=indent, sort_keys=True,
                          separators=None if indent else (",", ":")) + "\n"
    else:
        text = format_table(layout)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def format_table(layout: ArchLayout) -> str:
    ctx = layout.ctx
    lines = [f"# arch {layout.arch} ({layout.byte_order}-endian), ctx {ctx.name} = struct "
             f"{ctx.struct_name} (offsets from {'the BTF' if ctx.source == 'btf' else 'defaults'})"]
    for f in layout.functions:
        lines.append(f"{f.name} (btf id {f.btf_id}){' variadic' if f.variadic else ''}")
        for i, a in enumerate(f.args):
            lines.append(_row(f"arg{i} {a.name or '?'}", a))
        if f.ret is not None:
            lines.append(_row("ret", f.ret))
    return "\n".join(lines) + "\n"


def _row(label: str, v: ValueLayout) -> str:
    if v.unavailable:
        where = f"unavailable: {v.unavailable}"
    elif not v.pieces:
        where = "(no bytes)"
    else:
        parts = []
        for p in v.pieces:
            span = f"[{p.value_offset}:{p.value_offset + p.size}]"
            if isinstance(p, RegPiece):
                parts.append(f"{p.field}({p.hwreg}){span}")
            else:
                parts.append(f"sp+{p.stack}{span}")
        where = " ".join(parts)
        if v.by_ref:
            where = f"*({where})"
        if v.at_exit:
            where += " at exit"
    if v.source == "dwarf":
        where += " (DWARF)"
    return f"  {label:<24} {v.type_name:<32} {v.size:>4}  {where}"
