"""The kernel's own argument fetcher on the same calls, for a side-by-side table.

Where the kernel has fprobe events, `f:btfgen/e_F F $arg*` and `f:btfgen/x_F F%return $retval`
trace every scenario function through the kernel's BTF-based fetcher; the loader writes
`btfgen-phase N` into trace_marker around each action, so events are matched to actions exactly
as btfgen's records are.
"""

from __future__ import annotations

import re

SETUP = "fprobe_setup"
TRACE = "fprobe_trace"


def setup_step(functions: list[str]) -> tuple[str, str]:
    lines = ["cd /sys/kernel/tracing || exit 0"]
    for f in functions:
        for probe in (f"f:btfgen/e_{f} {f} $arg*", f"f:btfgen/x_{f} {f}%return $retval"):
            # One probe the kernel refuses (e.g. a $retval of struct type) must not stop others.
            lines.append(f"echo '{probe}' >> dynamic_events 2>/dev/null || echo 'refused {probe}'")
    lines.append("echo 1 > events/btfgen/enable 2>/dev/null || echo 'no fprobe events'")
    lines.append("cat error_log")
    return SETUP, "\n".join(lines)


def trace_step() -> tuple[str, str]:
    # Only the loader's events and its markers: the whole buffer is slow on a serial console.
    return TRACE, "grep -E '^ *loader-[0-9]+ ' /sys/kernel/tracing/trace 2>/dev/null"


_EVENT = re.compile(r"\s([ex])_(\w+): \((.*?)\)\s*(.*)$")
_MARK = re.compile(r"tracing_mark_write: btfgen-phase (\d+)")
_FIELD = re.compile(r"(\w+)=(\S+)")


def parse(trace: str) -> dict[tuple[int, str, str], dict[str, str]]:
    """(action, "e" | "x", function) -> field -> text, the first event of each."""
    out: dict[tuple[int, str, str], dict[str, str]] = {}
    phase = 0
    for line in trace.splitlines():
        if m := _MARK.search(line):
            phase = int(m.group(1))
            continue
        if phase and (m := _EVENT.search(line)):
            key = (phase, m.group(1), m.group(2))
            out.setdefault(key, dict(_FIELD.findall(m.group(4))))
    return out


def number(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None
