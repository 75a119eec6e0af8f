"""How the tool names itself at the start of every line it says, and say(), the one way it says
a line. The name is the copy's that runs, fixed as this module is imported and never changed:
`btfgen trace` in btfgen itself (btfgen.probe, run by btfgen's command), `btfgen_trace` in a
trace directory (its copy of this package, btfgen_probe/, run by its btfgen_trace.py)."""

from __future__ import annotations

import sys

COMMAND = "btfgen trace"  # btfgen's command (btfgen.trace.command)
STANDALONE = "btfgen_trace"  # a trace directory's btfgen_trace.py (btfgen.trace.launcher)
NAME = COMMAND if __package__ == "btfgen.probe" else STANDALONE


def say(line: str, file=None, flush: bool = False) -> None:
    """`line` on stderr (or `file`), after the tool's name."""
    print(f"{NAME}: {line}", file=sys.stderr if file is None else file, flush=flush)
