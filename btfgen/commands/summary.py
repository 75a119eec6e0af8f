"""The one-line summary of a generation run: how many functions are fully decodable, and why the
others are not (float in an FP register, variadic tail, ...)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from btfgen.layout import ArchLayout, FunctionLayout


def reasons_of(f: FunctionLayout) -> list[str]:
    out = [v.unavailable for v in f.args if v.unavailable]
    if f.ret is not None and f.ret.unavailable:
        out.append(f"return: {f.ret.unavailable}")
    if f.variadic:
        out.append("variadic tail")
    return out


def partial_reasons(arch: ArchLayout):
    for f in arch.functions:
        reasons = reasons_of(f)
        if reasons:
            yield f, reasons


def summarize(arch: ArchLayout, outdir: Path, nfiles: int, nwritten: int) -> str:
    partial = Counter()
    npartial = 0
    for _, reasons in partial_reasons(arch):
        npartial += 1
        for r in dict.fromkeys(reasons):
            partial[r] += 1
    n = len(arch.functions)
    text = f"btfgen: {arch.arch}: {n} functions, {n - npartial} fully decodable"
    if npartial:
        ranked = sorted(partial.items(), key=lambda x: (-x[1], x[0]))
        top = ", ".join(f"{c} {r}" for r, c in ranked[:4])
        more = " ..." if len(partial) > 4 else ""
        text += f", {npartial} partly ({top}{more})"
    unchanged = nfiles - nwritten
    return text + f"; {nwritten} files written, {unchanged} unchanged in {outdir}"
