"""BTF reader figures (prints numbers; not a test).

  python3 benchmarks/bench_btf.py [BTF] [--runs N]

- load+index: a fresh process opens the BTF and builds the name index (one `find_funcs`);
  wall time inside the process, and the process's peak RSS. Targets: <= 0.3 s, <= 200 MB.
- dump: `python3 -m btfgen dump BTF` against `bpftool btf dump file BTF format raw`, both as
  whole processes writing to /dev/null, best of N interleaved runs. Target: ratio <= 2.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from btfgen.btf.reader import open_btf
t1 = time.perf_counter()
c1 = time.process_time()
btf = open_btf(sys.argv[1])
t2 = time.perf_counter()
btf.find_funcs("vfs_read")
t3 = time.perf_counter()
cpu = time.process_time() - c1
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "index": t3 - t2, "cpu": cpu,
                  "types": len(btf),
                  "funcs": sum(1 for _ in btf.funcs()),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def load_and_index(path: str, runs: int) -> dict:
    results = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", _CHILD, path], capture_output=True,
                              text=True, env=env(), check=True)
        results.append(json.loads(proc.stdout))
    return min(results, key=lambda r: r["open"] + r["index"])


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU user+sys) seconds of one run; CPU time is the steadier figure on a busy
    machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.devnull, "wb") as devnull:
        start = time.perf_counter()
        subprocess.run(cmd, stdout=devnull, env=env(), check=True)
        elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("btf", nargs="?", default="/sys/kernel/btf/vmlinux")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    r = load_and_index(args.btf, args.runs)
    load = r["open"] + r["index"]
    print(f"{args.btf}: {r['types']} types, {r['funcs']} functions")
    met = load <= 0.3 and r["peak_rss_mb"] <= 200
    print(f"load+index: {load:.3f} s (open {r['open']:.3f} s, index {r['index']:.3f} s; "
          f"imports {r['import']:.3f} s; CPU {r['cpu']:.3f} s), peak RSS {r['peak_rss_mb']:.0f} MB "
          f"[target <= 0.3 s, <= 200 MB: {'ok' if met else 'MISSED'}]")

    if not shutil.which("bpftool"):
        print("dump: bpftool not installed, no comparison")
        return 0
    ours, theirs = [], []
    for _ in range(args.runs):
        theirs.append(timed(["bpftool", "btf", "dump", "file", args.btf, "format", "raw"]))
        ours.append(timed([sys.executable, "-m", "btfgen", "dump", args.btf]))
    ratio = min(ours)[0] / min(theirs)[0]
    cpu_ratio = min(c for _, c in ours) / min(c for _, c in theirs)
    print(f"dump: btfgen {min(ours)[0]:.3f} s, bpftool {min(theirs)[0]:.3f} s wall (best of "
          f"{args.runs}), ratio {ratio:.2f} [target <= 2: {'ok' if ratio <= 2 else 'MISSED'}]; "
          f"CPU ratio {cpu_ratio:.2f} (btfgen {min(c for _, c in ours):.3f} s, bpftool "
          f"{min(c for _, c in theirs):.3f} s)")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
