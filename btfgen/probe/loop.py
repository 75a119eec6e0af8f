"""The event loop: drain the ring buffer on a clock until the command exits, the process
goes, the time is up or a signal comes, saying what is lost as it happens."""

from __future__ import annotations

import os
import signal
import time

from .losses import Losses, say_losses
from .options import Options


# The BPF side wakes the reader only once the ring is a quarter full (a wakeup per event cost
# the traced program as much as the event): between wakeups, the reader drains on this clock
# (a poll waits for the wakeup, not for a record: ringspan.wakeups).
DRAIN_MS = 10


def catch_signals() -> tuple[list[int], dict]:
    """From here on, SIGINT and SIGTERM are kept in the list this returns, never raised: the
    run ends at its next step with its usual lines (a KeyboardInterrupt raised inside a long
    attach was a traceback, or, raised in libbpf's print callback, swallowed: the tracer went on
    attaching and tracing as if never signalled). -> (the list, the handlers to restore)."""
    stop: list[int] = []
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, lambda signum, _frame: stop.append(signum))
    return stop, old


def restore_signals(old: dict) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)


def follow(rb, child, opts: Options, losses, drained=None, begin=None,
           stop: list[int] | None = None) -> int:
    """`begin()` starts what is traced (the command, or the message that tracing began) once
    a signal can no longer end the tracer before its lines are printed. `stop`: catch_signals'
    list, where a signal that came while attaching already is (tracing then never begins)."""
    drained = drained or (lambda: None)
    # Ctrl-C, or a SIGTERM (timeout(1), a service manager): the probes are detached, the ring
    # buffer drained and its lines printed before the end, as when the command exits.
    if stop is None:
        stop, _ = catch_signals()
    if stop:
        # Signalled while attaching: the command never runs (cancelled), nothing was traced.
        if child:
            child.cancel()
            return 128 + stop[0]
        return 0
    if begin:
        begin()
    deadline = None if opts.duration is None else time.monotonic() + opts.duration
    status = None
    said, said_at = Losses(0, 0, 0.0), time.monotonic()
    while not stop:
        rb.poll(DRAIN_MS)  # what the ring holds, once it wakes the reader or on this clock
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

