"""Choosing functions: by name (all FUNCs of that name: static functions in several files share
one), by glob, or all of them; in BTF id order, each once."""

from __future__ import annotations

import fnmatch
import re

_GLOB = re.compile(r"[*?\[]")


def select_functions(btf, wanted: list[str]):
    """(FUNC types, requested names or globs that matched nothing, in request order)."""
    if not wanted:
        return list(btf.funcs()), []
    chosen: dict[int, object] = {}
    missing = []
    globs = [w for w in wanted if _GLOB.search(w)]
    for name in wanted:
        if name in globs:
            continue
        found = btf.find_funcs(name)
        if not found:
            missing.append(name)
        for f in found:
            chosen[f.id] = f
    if globs:
        patterns = [(g, re.compile(fnmatch.translate(g))) for g in globs]
        hits = {g: 0 for g in globs}
        for f in btf.funcs():
            for g, rx in patterns:
                if rx.match(f.name):
                    chosen[f.id] = f
                    hits[g] += 1
        missing += [g for g in globs if not hits[g]]
    order = {w: i for i, w in reversed(list(enumerate(wanted)))}
    missing = sorted(dict.fromkeys(missing), key=order.__getitem__)
    return [chosen[i] for i in sorted(chosen)], missing
