"""Compare btfgen's placement with the compiler's DWARF for every function (`btfgen check`).

ELF is a vmlinux, module, object or program built with -g. Its BTF is --btf FILE, else the
ELF's own .BTF, else BTF made from its DWARF by pahole. For every function the placement of each
parameter is compared with where DWARF says it is at the function's first instruction. Prints a
summary (coverage: compared out of the functions with parameters; agree, disagree, not comparable
by reason) and every disagreement. Exit status 1 when anything disagrees; else 3 when the
coverage is below --min-coverage, so that "0 disagree" never stands over a check that mostly did
not happen; 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from btfgen.dwarf.compare import AGREE, DISAGREE, FunctionVerdict, coverage_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("elf", metavar="ELF", help="an ELF file with DWARF (.debug_info)")
    parser.add_argument("--btf", metavar="FILE",
                        help="its BTF (default: the ELF's .BTF, else made from its DWARF)")
    parser.add_argument("--base", metavar="BASE", help="the base BTF of a split BTF")
    parser.add_argument("--arch", metavar="ARCH", help="target architecture (default: the ELF's)")
    parser.add_argument("--func", metavar="NAME", action="append", default=[],
                        help="a function name or glob to check (repeatable; default: every "
                             "function)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="list every function that is not comparable, with the reason")
    parser.add_argument("--min-coverage", metavar="PERCENT", type=_percent,
                        default=DEFAULT_MIN_COVERAGE,
                        help="exit 3 when fewer of the functions with parameters are compared "
                             f"(default: {DEFAULT_MIN_COVERAGE:g}; 0: never)")


# Debian's whole kernels compare 96-99% of their functions with parameters (docs/dwarf.md): what
# is left out truly has no DWARF definition, only clones or nothing known at entry. Far fewer
# means the check could not tie DWARF to the symbols, not that the kernel agrees.
DEFAULT_MIN_COVERAGE = 80.0
LOW_COVERAGE = 3  # the exit status


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage (0 to 100)")
    return value


def summarize(verdicts: list[FunctionVerdict]) -> dict:
    kinds = Counter(v.verdict for v in verdicts)
    params = Counter(p.verdict for v in verdicts if v.verdict in (AGREE, DISAGREE)
                     for p in v.params)
    coverage = coverage_of(verdicts)
    return {
        "functions": len(verdicts),
        "compared": kinds[AGREE] + kinds[DISAGREE],
        "comparable": coverage.comparable,
        "coverage_percent": round(coverage.percent, 2),
        "agree": kinds[AGREE],
        "disagree": kinds[DISAGREE],
        "not_comparable": {k: n for k, n in sorted(kinds.items()) if k not in (AGREE, DISAGREE)},
        "params_compared": params[AGREE] + params[DISAGREE],
        "params_agree": params[AGREE],
        "params_disagree": params[DISAGREE],
    }


def as_json(v: FunctionVerdict) -> dict:
    return {"name": v.name, "address": v.address, "verdict": v.verdict, "detail": v.detail,
            "params": [{"name": p.name, "verdict": p.verdict, "btfgen": p.btfgen,
                        "dwarf": p.dwarf} for p in v.params]}


def run(args: argparse.Namespace) -> int:
    from btfgen.progress import Progress

    with Progress(prog="btfgen check") as progress:
        return _run(args, progress)


def _run(args: argparse.Namespace, progress) -> int:
    from btfgen.target import open_options

    progress("reading BTF")
    # The ELF's DWARF is what is checked: named, so that failing to read it is an error.
    target = open_options(args, args.btf or args.elf, dwarf_default=args.elf)
    conv, btf = target.convention, target.types
    selection = target.select(args.func)
    funcs = selection.functions
    if selection.missing:
        print(f"btfgen check: {selection.missing_line(btf.path)}", file=sys.stderr)
        return 1
    progress("placing the functions and reading their DWARF")
    verdicts = target.check(funcs if args.func else None,
                            on_unit=lambda done, size: progress.reached(done, size, "bytes"))
    progress.done()
    summary = summarize(verdicts)
    bad = [v for v in verdicts if v.verdict == DISAGREE]
    low = coverage_of(verdicts).below(args.min_coverage)
    if args.json:
        doc = {"elf": args.elf, "btf": btf.path, "arch": conv.name, "summary": summary,
               "min_coverage_percent": args.min_coverage, "coverage_below_minimum": low,
               "disagreements": [as_json(v) for v in bad]}
        if args.verbose:
            doc["functions"] = [as_json(v) for v in verdicts]
        sys.stdout.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    else:
        sys.stdout.write(format_text(args.elf, conv.name, summary, bad, verdicts, args.verbose,
                                     args.min_coverage))
    sys.stdout.flush()
    if bad:
        return 1
    return LOW_COVERAGE if low else 0


def format_text(elf: str, arch: str, s: dict, bad: list[FunctionVerdict],
                verdicts: list[FunctionVerdict], verbose: bool,
                min_coverage: float = DEFAULT_MIN_COVERAGE) -> str:
    coverage = coverage_of(verdicts)
    lines = [f"{elf} ({arch}): {s['functions']} functions, {coverage.describe()}: "
             f"{s['agree']} agree, {s['disagree']} disagree "
             f"({s['params_compared']} parameters: {s['params_agree']} agree, "
             f"{s['params_disagree']} disagree)"]
    if coverage.below(min_coverage):
        lines.append(f"coverage below {min_coverage:g}%: too little was compared to call this an "
                     f"agreement (why the rest was not: below; each function: -v)")
    if s["not_comparable"]:
        lines.append("not comparable:")
        for reason, n in sorted(s["not_comparable"].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {n:>7}  {reason}")
    if bad:
        lines.append("disagreements:")
        for v in bad:
            at = f" @ {v.address:#x}" if v.address is not None else ""
            lines.append(f"  {v.name}{at}")
            for p in v.params:
                if p.verdict == DISAGREE:
                    lines.append(f"    {p.name or '?'}: btfgen {p.btfgen}, DWARF {p.dwarf}")
    if verbose:
        lines.append("functions not compared:")
        for v in verdicts:
            if v.verdict not in (AGREE, DISAGREE):
                lines.append(f"  {v.name}: {v.verdict}{': ' + v.detail if v.detail else ''}")
    return "\n".join(lines) + "\n"
