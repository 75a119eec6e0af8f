"""Markdown tables from the last live run's results (cache/results/*.json), for the docs.

    python3 -m live_kernel.report      (from tests/)
"""

from __future__ import annotations

import json
import sys

from . import cache


def _load() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((cache.ROOT / "results").glob("*.json"))]


def _hex(v) -> str:
    return f"{v:#x}" if isinstance(v, int) else str(v)


def summary(results: list[dict]) -> str:
    lines = ["| target | kernel | values compared | mismatches | kprobe_multi |",
             "|---|---|---|---|---|"]
    for r in results:
        bad = sum(not row["ok"] for row in r["rows"])
        lines.append(f"| {r['target']} | {r['kernel']} | {len(r['rows'])} | {bad} | "
                     f"{'yes' if r['multi'] else 'no'} |")
    return "\n".join(lines)


def side_by_side(results: list[dict]) -> str:
    out = []
    for r in results:
        rows = r.get("fprobe") or []
        if not rows:
            continue
        counts = {v: sum(x["verdict"] == v for x in rows)
                  for v in ("agrees", "disagrees", "cannot fetch")}
        out.append(f"\n#### {r['target']} ({r['kernel']}): "
                   + ", ".join(f"{n} {v}" for v, n in counts.items()) + "\n")
        out.append("| function | value | passed | btfgen | kernel fprobe | kernel's fetcher |")
        out.append("|---|---|---|---|---|---|")
        for x in rows:
            out.append(f"| {x['function']} | {x['value']} | {_hex(x['expected'])} | "
                       f"{_hex(x['btfgen'])} | {_hex(x['fprobe'])} | {x['verdict']} |")
    return "\n".join(out)


def main() -> int:
    results = _load()
    print(summary(results))
    print(side_by_side(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
