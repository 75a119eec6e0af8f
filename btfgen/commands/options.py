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
import sys

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


# DWARF is consulted when --dwarf names a file, and automatically when the input is an ELF file
# with .debug_info (a -dbg vmlinux, a module or program built with -g): a function compiled with
# another convention than its prototype is then never placed silently wrong. --no-dwarf turns the
# automatic use off (reading a whole -dbg vmlinux's DWARF takes minutes). Automatic use that
# fails (DWARF pyelftools cannot relocate, say) is a one-line warning, not an error.


def add_dwarf_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("DWARF (the compiler's own word on where arguments are)")
    group.add_argument("--dwarf", metavar="FILE",
                       help="an ELF file with DWARF for the same build: functions whose compiled "
                            "convention differs from their prototype are placed where it says "
                            "(default: the input itself when it has .debug_info)")
    group.add_argument("--no-dwarf", action="store_true",
                       help="do not consult the input's own DWARF")


def dwarf_for(args: argparse.Namespace, input_path: str | None) -> str | None:
    """The file whose DWARF to consult, or None."""
    if getattr(args, "dwarf", None):
        return args.dwarf
    if getattr(args, "no_dwarf", False) or getattr(args, "header", None) or not input_path:
        return None
    from btfgen.dwarf.reader import has_dwarf

    return input_path if has_dwarf(input_path) else None


def apply_dwarf(layout, args: argparse.Namespace, input_path: str | None, conv,
                selected: bool, quiet: bool = False):
    """The layout corrected with DWARF where there is DWARF to consult."""
    path = dwarf_for(args, input_path)
    if path is None:
        return layout
    from btfgen.errors import DwarfError

    from btfgen.dwarf.correct import correct

    try:
        corrected = correct(layout, path, conv, selected=selected)
    except DwarfError as e:
        if getattr(args, "dwarf", None):
            raise  # asked for by name: its failure is the command's
        # The input's own DWARF, consulted unasked: say why it was not, and go on with the
        # description's placement (as for an input without DWARF).
        print(f"btfgen: warning: DWARF not consulted: {e}", file=sys.stderr)
        return layout
    layout, corrections = corrected.layout, corrected.corrections
    warning = corrected.warning(path)
    if warning:
        print(f"btfgen: warning: {warning}", file=sys.stderr)
    if corrections and not quiet:
        names = ", ".join(c.name for c in corrections[:8])
        more = f" and {len(corrections) - 8} more" if len(corrections) > 8 else ""
        print(f"btfgen: {len(corrections)} functions compiled with another convention than "
              f"their prototype, placed from DWARF ({path}): {names}{more}", file=sys.stderr)
    return layout
