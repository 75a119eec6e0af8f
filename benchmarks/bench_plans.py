"""Distinct generic-decoder plans of whole kernels: how many straight-line decoders would serve
every function (issue 24's first question).

    python3 benchmarks/bench_plans.py [BTF:ARCH ...] [--top 5]

A plan is what the generic decoder does for a function: its entry and exit copy operations
(from which ctx offset or stack slot, to which record offset, how many bytes) and the carried
return pointer. Functions with the same plan decode alike whatever their types, so one
straight-line decoder per plan reads exactly what a hand-written one would. Columns: FUNCs,
distinct prototypes, distinct plans, the straight-line decoders generated for them (entry and
exit op lists are numbered apart, and the register image serves every list of register copies
it covers, so these are fewer) and the op lists left on the interpreter ("interp"), the
functions whose entry and exit both decode on the register images ("image": no branch on the
function), distinct plans if register copies took whole registers ("words"), functions whose
plan reads the stack or through a pointer ("mem"), and how many functions the commonest plans
serve. Without arguments:
the running kernel's BTF for the host arch, and every kernel BTF the live tests cached
(~/.cache/btfgen-live/btf, BTFGEN_LIVE_CACHE), each for its arch.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import btfgen  # noqa: E402
from btfgen.btf.reader import DEFAULT_PATH  # noqa: E402
from btfgen.codegen.outputs import plan_table, plans  # noqa: E402
from btfgen.decoder import generic  # noqa: E402

# Debian architecture names of the cached kernels -> btfgen's.
DEB_ARCH = {"amd64": "x86_64", "arm64": "arm64", "armhf": "arm", "i386": "i386",
            "ppc64el": "ppc64le", "riscv64": "riscv64", "s390x": "s390x",
            "mips64el": "mips64el", "loong64": "loongarch64"}


def default_inputs() -> list[tuple[str, str]]:
    inputs = []
    if Path(DEFAULT_PATH).exists():
        inputs.append((DEFAULT_PATH, platform.machine()))
    cache = Path(os.environ.get("BTFGEN_LIVE_CACHE", Path.home() / ".cache/btfgen-live"))
    for path in sorted((cache / "btf").glob("*.btf")):
        arch = DEB_ARCH.get(path.name.split("-")[0])
        if arch:
            inputs.append((str(path), arch))
    return inputs


def plan_key(p: generic.GenericPlan) -> tuple:
    return (p.entry_ops, p.exit_ops, p.carry_code)


def word_plan_key(p: generic.GenericPlan, word: int) -> tuple:
    """The plan if every register copy took the whole register into a word of the record (the
    decoder then reading the value's own bytes of it): sizes of int, short and long no longer
    make plans differ. A hypothetical figure, for choosing issue 24's design."""
    def widen(ops):
        return tuple((o.source, o.src - o.src % word, o.dst - o.dst % word, word)
                     if o.source == generic.FROM_CTX else (o.source, o.src, o.dst, o.size)
                     for o in ops)
    return (widen(p.entry_ops), widen(p.exit_ops), p.carry_code)


def count(path: str, arch: str, top: int) -> str:
    t = time.perf_counter()
    target = btfgen.open(path, arch=arch)
    layout = target.place()
    made = plans(layout)
    distinct = collections.Counter(plan_key(p) for p in made)
    word_plans = {word_plan_key(p, layout.pointer_size) for p in made}
    prototypes = len({f.type_id for f in target.every_function()})
    stack = sum(n for k, n in distinct.items() if any(op.source != generic.FROM_CTX
                                                   for op in k[0] + k[1]))
    common = ", ".join(f"{n}" for _, n in distinct.most_common(top))
    table = plan_table(layout, made, limit=len(made) + 1)  # every distinct one: no cap
    on_image = sum(all(table.on_image(p)) for p in made)
    return (f"{Path(path).name:<52} {arch:<11} {len(layout.functions):>7} {prototypes:>7} "
            f"{len(distinct):>6} {len(table.entry):>5} {len(table.exit):>4} "
            f"{len(table.interpreted):>6} {on_image:>6} {len(word_plans):>6} {stack:>8}  "
            f"{common}  ({time.perf_counter() - t:.1f} s)")



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("inputs", nargs="*", metavar="BTF:ARCH")
    ap.add_argument("--top", type=int, default=5, help="how many of the commonest plans to size")
    args = ap.parse_args(argv)
    inputs = [tuple(i.rsplit(":", 1)) for i in args.inputs] or default_inputs()
    if not inputs:
        print("bench_plans: no kernel BTF here (give BTF:ARCH)", file=sys.stderr)
        return 2
    print(f"{'BTF':<52} {'arch':<11} {'funcs':>7} {'protos':>7} {'plans':>6} {'entry':>5} "
          f"{'exit':>4} {'interp':>6} {'image':>6} {'words':>6} "
          f"{'mem':>8}  functions of the {args.top} commonest plans")
    for path, arch in inputs:
        print(count(path, arch, args.top), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
