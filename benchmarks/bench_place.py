"""Benchmark: place every FUNC of a BTF (default: the running kernel's) for one or more arches.

    python3 benchmarks/bench_place.py [BTF] [--arch x86_64 --arch arm64 ...] [--repeat 3]

Prints, per arch, the wall and CPU time of `place_functions` over all FUNCs (best of
--repeat, each on a freshly opened BTF so type decoding is included), and how many values came
out unavailable. The target: <= 3 s wall for ~56k functions on one arch.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from btfgen.abi.arches import load_arch  # noqa: E402
from btfgen.btf.reader import DEFAULT_PATH, open_btf  # noqa: E402
from btfgen.place import place_functions  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("btf", nargs="?", default=DEFAULT_PATH)
    ap.add_argument("--arch", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    arches = args.arch or [platform.machine()]
    t = time.perf_counter()
    btf = open_btf(args.btf)
    funcs = list(btf.funcs())
    print(f"{args.btf}: {len(btf)} types, {len(funcs)} FUNCs, "
          f"{len({f.type_id for f in funcs})} distinct prototypes; "
          f"open + list FUNCs {time.perf_counter() - t:.2f} s")
    for name in arches:
        conv = load_arch(name, btf.pointer_size)
        best = None
        for _ in range(args.repeat):
            btf = open_btf(args.btf)  # cold type cache: decoding is part of the cost
            funcs = list(btf.funcs())
            w, c = time.perf_counter(), time.process_time()
            layout = place_functions(btf, conv, funcs)
            wall, cpu = time.perf_counter() - w, time.process_time() - c
            if best is None or wall < best[0]:
                best = (wall, cpu)
        # The engine alone: the same BTF again, its types already decoded by the run above.
        w, c = time.perf_counter(), time.process_time()
        place_functions(btf, conv, funcs)
        engine = (time.perf_counter() - w, time.process_time() - c)
        values = [v for f in layout.functions for v in (*f.args, f.ret) if v is not None]
        unavailable = sum(1 for v in values if v.unavailable)
        print(f"{conv.name:12} place {len(funcs)} FUNCs: wall {best[0]:.2f} s, cpu {best[1]:.2f} s"
              f" ({len(funcs) / best[0]:,.0f} funcs/s); types already decoded: wall "
              f"{engine[0]:.2f} s, cpu {engine[1]:.2f} s; "
              f"{len(values)} values, {unavailable} unavailable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
