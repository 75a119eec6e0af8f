"""How the tool names itself at the start of every line it says: `btfgen trace`, or a trace
directory's `btfgen_trace` (tool.main sets NAME), and say(), the one way it says a line."""

from __future__ import annotations

import sys

DEFAULT = "btfgen trace"  # its name as btfgen's command
NAME = DEFAULT  # its name in this process


def say(line: str, file=None, flush: bool = False) -> None:
    """`line` on stderr (or `file`), after the tool's name."""
    print(f"{NAME}: {line}", file=sys.stderr if file is None else file, flush=flush)
