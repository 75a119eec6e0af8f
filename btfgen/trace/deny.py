"""The kernel functions `btfgen trace --kernel` leaves out of its globs by default: the ones its
own BPF program and run side call on every event (the patterns, one group per reason, are in
deny.txt beside this file)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import NamedTuple

DENY_FILE = Path(__file__).resolve().parent / "deny.txt"


class Pattern(NamedTuple):
    glob: str
    why: str  # its group's name (the `## ` line above it)


def patterns(path: Path = DENY_FILE) -> list[Pattern]:
    """The patterns of `path`, each with the reason its group gives."""
    out, why = [], ""
    for raw in path.read_text().splitlines():
        if raw.startswith("## "):
            why = raw[3:].strip()
        text = raw.split("#", 1)[0].strip()
        if text:
            out.append(Pattern(text, why))
    return out


class Denied(NamedTuple):
    kept: list[str]  # in the order given
    left_out: dict[str, list[str]]  # reason -> names, in the order given


def split(names: list[str], deny: list[Pattern]) -> Denied:
    """`names` without those a pattern of `deny` matches (the first match gives the reason)."""
    rx = [(re.compile(fnmatch.translate(p.glob)), p.why) for p in deny]
    kept: list[str] = []
    left_out: dict[str, list[str]] = {}
    for name in names:
        why = next((w for r, w in rx if r.match(name)), None)
        if why is None:
            kept.append(name)
        else:
            left_out.setdefault(why, []).append(name)
    return Denied(kept, left_out)
