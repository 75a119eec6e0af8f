"""Command-line options more than one subcommand takes, each defined here once.

    def add_arguments(parser):
        add_btf_arguments(parser)
        ...
        add_header_arguments(parser)

    def run(args):
        target = btfgen.target.open_options(args)

Every command opens its input the one way, `btfgen.target.open_options(args)`: `btfgen.open`
(the library's front door) with what these options say. With --header the headers replace the
BTF as the source of types, parsed for --arch (any name btfgen.abi.arches accepts), or for the
machine btfgen runs on. `btfgen dump` alone reads the BTF as it is (`btfgen.btf.reader.open_btf`):
it places nothing, so it needs no arch, and prints the file's types, never pahole's or headers'.
"""

from __future__ import annotations

import argparse
import sys

from btfgen.btf.reader import DEFAULT_PATH
from btfgen.layout import CTX_NAMES


def add_btf_arguments(parser: argparse.ArgumentParser, *, dwarf_input: bool = False) -> None:
    """The BTF to read (positional, default the running kernel's) and --base. `dwarf_input`:
    the command also takes an ELF built with -g and no .BTF (BTF made by pahole)."""
    what = "raw BTF, an ELF file with .BTF" + (", or one built with -g (BTF by pahole)"
                                               if dwarf_input else "")
    parser.add_argument("btf", nargs="?", default=DEFAULT_PATH, metavar="BTF",
                        help=f"{what} (default: {DEFAULT_PATH})")
    parser.add_argument("--base", metavar="BASE",
                        help="the base BTF of a split BTF (vmlinux for a module)")


def jobs_count(text: str) -> int:
    """`-j N`'s type: a number of processes, 1 or more."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of processes, 1 or more")
    return n


def add_ctx_argument(parser: argparse.ArgumentParser, default: str | None = CTX_NAMES[0]) -> None:
    """--ctx; `default` None: the command chooses (and says which in its help)."""
    parser.add_argument("--ctx", choices=CTX_NAMES, default=default,
                        help=f"the trace context register pieces refer to (default: "
                             f"{default or 'ftrace_regs for --lang kernel, else ' + CTX_NAMES[0]})")


def add_header_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("prototypes from C headers (instead of BTF)")
    group.add_argument("--header", metavar="FILE", action="append", default=[],
                       help="a C header declaring the functions (repeatable; parsed in order "
                            "as one translation unit by libclang, for --arch)")
    group.add_argument("-I", dest="include_dirs", metavar="DIR", action="append", default=[],
                       help="add DIR to the headers' include path (repeatable)")
    group.add_argument("-D", dest="defines", metavar="NAME[=VALUE]", action="append",
                       default=[], help="define a macro for the headers (repeatable)")


def add_dwarf_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("DWARF (the compiler's own word on where arguments are)")
    group.add_argument("--dwarf", metavar="FILE",
                       help="an ELF file with DWARF for the same build: functions whose compiled "
                            "convention differs from their prototype are placed where it says "
                            "(default: the input itself when it has .debug_info)")
    group.add_argument("--no-dwarf", action="store_true",
                       help="do not consult the input's own DWARF")


def print_notes(placement, prog: str = "btfgen", quiet: bool = False) -> None:
    """What the placement has to say (DWARF corrections, DWARF not consulted) on stderr."""
    for line in placement.notes():
        if quiet and not line.startswith("warning:"):
            continue
        print(f"{prog}: {line}", file=sys.stderr)
