"""The event loop: drain the ring buffer on a clock until the command exits, the process
goes, the time is up or a signal comes, saying what is lost as it happens."""

from __future__ import annotations

import os
import signal
import time

from .losses import Losses, say_losses
from .options import Options


# The BPF side wakes the reader only once the ring is a quarter full (a wakeup per event cost
# the traced program as much as the event): between wakeups, the reader drains on this clock.
DRAIN_MS = 10


def follow(rb, child, opts: Options, losses, drained=None, begin=None) -> int:
    """`begin()` starts what is traced (the command, or the message that tracing began) once
    a signal can no longer end the tracer before its lines are printed."""
    drained = drained or (lambda: None)
    stop: list[int] = []
    # Ctrl-C, or a SIGTERM (timeout(1), a service manager): the probes are detached, the ring
    # buffer drained and its lines printed before the end, as when the command exits.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    if begin:
        begin()
    deadline = None if opts.duration is None else time.monotonic() + opts.duration
    status = None
    said, said_at = Losses(0, 0, 0.0), time.monotonic()
    while not stop:
        rb.poll(DRAIN_MS)
        rb.drain()
        if drained() is False:  # the lines' reader went away (`| head`): as SIGPIPE would
            stop.append(signal.SIGPIPE)
        now = time.monotonic()
        if now - said_at >= 1:
            # Falling behind, and what the kernel missed, is said while it happens, not only at
            # the end.
            said_at, said = now, say_losses(losses(), said)
        if child and (status := child.poll()) is not None:
            break
        if opts.pid and not os.path.exists(f"/proc/{opts.pid}"):
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
    if status is not None:
        return status
    # Ctrl-C is how tracing without a command ends; with one, the signal is said as a shell does.
    return 128 + stop[0] if stop and child else 0

