"""Command-line options more than one subcommand takes, each defined here once.

    def add_arguments(parser):
        add_btf_arguments(parser)
        ...
        add_header_arguments(parser)

    def run(args):
        types = headers_from_args(args) or open_btf(args.btf, base=args.base)

With --header the headers replace the BTF as the source of types; they are parsed for --arch
(any name btfgen.abi.arches accepts), or for the machine btfgen runs on.
"""

from __future__ import annotations

import argparse
import platform

from btfgen.btf.reader import DEFAULT_PATH
from btfgen.errors import HeaderError
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


def add_ctx_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ctx", choices=CTX_NAMES, default=CTX_NAMES[0],
                        help=f"the trace context register pieces refer to (default: "
                             f"{CTX_NAMES[0]})")


def add_header_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("prototypes from C headers (instead of BTF)")
    group.add_argument("--header", metavar="FILE", action="append", default=[],
                       help="a C header declaring the functions (repeatable; parsed in order "
                            "as one translation unit by libclang, for --arch)")
    group.add_argument("-I", dest="include_dirs", metavar="DIR", action="append", default=[],
                       help="add DIR to the headers' include path (repeatable)")
    group.add_argument("-D", dest="defines", metavar="NAME[=VALUE]", action="append",
                       default=[], help="define a macro for the headers (repeatable)")


def headers_from_args(args: argparse.Namespace):
    """The HeaderTypes the options ask for, or None when no --header was given."""
    if not getattr(args, "header", None):
        if getattr(args, "include_dirs", None) or getattr(args, "defines", None):
            raise HeaderError("-I/-D: only meaningful with --header")
        return None
    from btfgen.cheader import load_headers

    arch = getattr(args, "arch", None) or platform.machine()
    return load_headers(args.header, arch=arch, include_dirs=args.include_dirs,
                        defines=args.defines)
