"""What a trace loses, never silently: records the ring buffer had no room for (counted per
CPU by the BPF side), calls the kernel did not run the program for (its missed counts), and
how far behind the calls the reader is; said once a second while running, and at the end."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from . import features, prog
from .libbpf import possible_cpus
from .event import HEADS


# A reader this far behind the calls (seconds) says so while running.
BEHIND_S = 1.0


class Behind:
    """How far the reader is behind the traced calls: each event's age as it is handed on (its
    bpf_ktime_get_ns and time.monotonic_ns read one clock), the largest since last taken."""

    def __init__(self, sink, order: str) -> None:
        self._sink = sink
        self._head = HEADS[order]
        self._worst = 0

    def record(self, raw) -> None:
        if len(raw) >= self._head.size:  # else the sink says what is wrong with it
            age = time.monotonic_ns() - self._head.unpack_from(raw)[3]
            if age > self._worst:
                self._worst = age
        self._sink(raw)

    def span(self, span) -> None:
        """A span of records (ringspan.Span): its first is its oldest."""
        first = span.first()
        if first is not None and len(first) >= self._head.size:
            age = time.monotonic_ns() - self._head.unpack_from(first)[3]
            if age > self._worst:
                self._worst = age
        self._sink(span)

    def take(self) -> float:
        """Seconds; 0 once taken, until the next event."""
        worst, self._worst = self._worst, 0
        return worst / 1e9


@dataclass(frozen=True)
class Losses:
    lost: int  # records lost since the start, whatever the reason
    missed: int  # calls the kernel did not run the program for (its missed counts), since the start
    behind_s: float  # how old the oldest event handed on in the last second was
    no_scratch: int = 0  # of `lost`, those the BPF side had no scratch for (NO_SCRATCH below)

    @classmethod
    def of(cls, obj, missed: int, behind_s: float) -> Losses:
        ring_full, no_scratch = lost_by_reason(obj)
        return cls(ring_full + no_scratch, missed, behind_s, no_scratch)


def say_losses(now: Losses, said: Losses) -> Losses:
    """Once a second while running: what was lost, when it grew, and how far behind the reader
    is, when it is (a printing path slower than the calls). Returns what has been said."""
    if now.lost > said.lost or now.missed > said.missed or now.behind_s >= BEHIND_S:
        behind = (f"; the reader is {now.behind_s:.1f}s behind the calls"
                  if now.behind_s >= BEHIND_S else "")
        scratch = (f"; {now.no_scratch} of them no scratch: more threads in the traced "
                   f"functions at once than the BPF side has slots for" if now.no_scratch else "")
        # Why records are lost, only once some are (the kernel's misses alone are not the
        # reader's doing).
        why = (f" (ring buffer full: the reader is behind; a larger --ring-size may "
               f"help{scratch})" if now.lost else "")
        prog.say(f"{now.lost} records lost so far{why}, {now.missed} calls missed "
                 f"by the kernel{behind}", flush=True)
        return now
    return said


# The BPF side's loss counters (trace.bpf.c's `lost`, per CPU): why each record was lost.
RING_FULL = 0  # the ring buffer had no room
NO_SCRATCH = 1  # the user build: every spill slot in use (more threads at once than slots)
# Not a loss, in the same map: fsession exits whose entry the kernel skipped, each sent flagged
# (spec_format.EVENT_NO_ENTRY) and shown unpaired.
SKIPPED_ENTRY = 2


def lost_by_reason(obj) -> tuple[int, int]:
    """(ring buffer full, no scratch): records lost so far, by why."""
    ncpu = possible_cpus()
    return tuple(sum(struct.unpack(f"{ncpu}Q", obj.lookup("lost", struct.pack("I", why),
                                                           8 * ncpu)))
                 for why in (RING_FULL, NO_SCRATCH))


def skipped_entries(obj) -> int:
    """fsession exits that ran with their entry skipped by the kernel, so far."""
    ncpu = possible_cpus()
    return sum(struct.unpack(f"{ncpu}Q", obj.lookup("lost", struct.pack("I", SKIPPED_ENTRY),
                                                    8 * ncpu)))


def lost(obj) -> int:
    """Records lost so far, whatever the reason (the BPF side counts them per CPU)."""
    return sum(lost_by_reason(obj))


def say_lost(ring_full: int, no_scratch: int, kept: int | None = None) -> None:
    """At the end: the records lost, each reason on its own line (the ring buffer's last,
    always), and with `kept` (the records the reader took) what the BPF side made."""
    if kept is not None:
        prog.say(f"{kept + ring_full + no_scratch} events made by the BPF side, "
                 f"{kept} kept")
    if no_scratch:
        prog.say(f"{no_scratch} records lost (no scratch: more threads in the traced "
                 f"functions at once than the BPF side has slots for)")
    prog.say(f"{ring_full} records lost (ring buffer full)")


def say_missed(missed: int, kernel: bool, trampoline: str = "", no_entry: int = 0) -> None:
    """At the end: the calls that never reached the program (nothing of them is in the ring
    buffer), always for the kernel. `trampoline`: the trampoline's link attached ("fsession"
    or "fentry"), whose programs the kernel skips an entry or an exit at a time (each skip one
    of `missed`, its recursion_misses); `no_entry`: of those, fsession entries whose exit ran
    and was recorded without them."""
    if trampoline:
        prog.say(f"{missed} calls missed by the kernel (runs of the programs it "
                 "skipped: on the trampoline a call's entry or its exit each, the program "
                 "already running on that CPU, in a task it preempted or one it interrupted; "
                 "recursion_misses and the kprobe link's missed counts, which do not say whose "
                 "call it was: the tracer's own calls, which it never records, may be among them)")
        if trampoline == "fsession":
            prog.say(f"{no_entry} of them entries whose exit ran: those exits are "
                     "shown without their entry's arguments and duration, paired with no other "
                     "call")
        return
    if missed or kernel:
        counts = features.missed_calls_counted()
        counted = "" if counts or not kernel else f"; {counts.why}"
        prog.say(f"{missed} calls missed by the kernel (the program did not run: "
                 f"another BPF program was running on that CPU, or the probe could not "
                 f"deliver the call{counted})")
