"""`--dwarf FILE` / `--no-dwarf` for the commands that place functions (layout, generate).

DWARF is consulted when --dwarf names a file, and automatically when the input is an ELF file
with .debug_info (a -dbg vmlinux, a module or program built with -g): a function compiled with
another convention than its prototype is then never placed silently wrong. --no-dwarf turns the
automatic use off (reading a whole -dbg vmlinux's DWARF takes minutes). Automatic use that
fails (DWARF pyelftools cannot relocate, say) is a one-line warning, not an error.
"""

from __future__ import annotations

import argparse
import sys


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
    from .reader import has_dwarf

    return input_path if has_dwarf(input_path) else None


def apply_dwarf(layout, args: argparse.Namespace, input_path: str | None, conv,
                selected: bool, quiet: bool = False):
    """The layout corrected with DWARF where there is DWARF to consult."""
    path = dwarf_for(args, input_path)
    if path is None:
        return layout
    from btfgen.errors import DwarfError

    from .correct import correct_layout

    try:
        layout, corrections = correct_layout(layout, path, conv, selected=selected)
    except DwarfError as e:
        if getattr(args, "dwarf", None):
            raise  # asked for by name: its failure is the command's
        # The input's own DWARF, consulted unasked: say why it was not, and go on with the
        # description's placement (as for an input without DWARF).
        print(f"btfgen: warning: DWARF not consulted: {e}", file=sys.stderr)
        return layout
    if corrections and not quiet:
        names = ", ".join(c.name for c in corrections[:8])
        more = f" and {len(corrections) - 8} more" if len(corrections) > 8 else ""
        print(f"btfgen: {len(corrections)} functions compiled with another convention than "
              f"their prototype, placed from DWARF ({path}): {names}{more}", file=sys.stderr)
    return layout
