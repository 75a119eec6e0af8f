"""tracefs, which libbpf falls back to for uprobes and kprobes: mounting it, the functions
ftrace can attach to, and where sched_process_fork keeps the child's pid."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import BpfLoadError

TRACEFS = "/sys/kernel/tracing"


def mount_tracefs() -> None:
    """libbpf creates uprobes through perf_event_open, but falls back to tracefs; mount it."""
    if os.path.ismount(TRACEFS):
        return
    rc = os.system(f"mount -t tracefs nodev {TRACEFS} 2>/dev/null")
    if rc and not os.path.ismount(TRACEFS):
        raise BpfLoadError(f"cannot mount tracefs on {TRACEFS}")


def traceable(names: list[str]) -> tuple[list[int], list[str]]:
    """(indexes of the functions ftrace can attach to, names it cannot), by
    available_filter_functions; everything when that list cannot be read."""
    try:
        text = (Path(TRACEFS) / "available_filter_functions").read_text()
    except OSError:
        return list(range(len(names))), []
    known = {line.split()[0] for line in text.splitlines() if line.strip()}
    keep = [i for i, n in enumerate(names) if n in known]
    return keep, [n for n in names if n not in known]


def child_pid_offset() -> int | None:
    """Where sched_process_fork's child_pid sits in the event (its tracefs format: the comm
    fields before it changed size across kernel versions), or None without the event."""
    try:
        text = (Path(TRACEFS) / "events/sched/sched_process_fork/format").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = dict(part.strip().split(":", 1) for part in line.split(";") if ":" in part)
        if fields.get("field", "").split()[-1:] == ["child_pid"]:
            return int(fields["offset"])
    return None
