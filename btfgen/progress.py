"""A progress line on stderr for the long commands (a whole kernel's check or generation,
decoding recordings): a bar when the amount of work is known, the stage and the time taken
when it is not. Drawn only when stderr is a terminal and the user did not ask for quiet: a
pipe or a log file gets none of it.

A ticker thread redraws a few times a second, so a stage that runs a minute inside one call
(reading a kernel's DWARF) still shows its clock moving, and the work itself pays nothing per
item: `advance` only adds to a counter.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref

BAR = 24
TICK = 0.25  # seconds between redraws


class Progress:
    """`progress("stage")` names what runs; `progress.total(n, unit)` then
    `progress.advance(k)` fill a bar; `progress.watch(path)` follows how far this process has
    read a file; `done()` clears the line. Usable as a context manager."""

    def __init__(self, enabled: bool = True, prog: str = "btfgen", stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled and _is_terminal(self.stream)
        self.prog = prog
        self.start = time.monotonic()
        self.stage = ""
        self._total = self._count = 0
        self._unit = ""
        self._watched: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = None
        if self.enabled:
            _ACTIVE.add(self)
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.done()

    def __call__(self, stage: str) -> None:
        with self._lock:
            self.stage, self._total, self._count, self._watched = stage, 0, 0, None
        self._draw()

    def total(self, n: int, unit: str = "") -> None:
        with self._lock:
            self._total, self._count, self._unit = n, 0, unit
        self._draw()

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self._count += n

    def reached(self, n: int, total: int, unit: str = "") -> None:
        """The bar at `n` of `total` (work that says where it is rather than how much it
        did since)."""
        with self._lock:
            before = 100 * self._count // self._total if self._total else -1
            self._count, self._total, self._unit = n, total, unit
            moved = 100 * n // total != before if total else False
        if moved:  # drawn at once when the percentage moves, else at the next tick
            self._draw()

    def watch(self, path: str) -> None:
        """Measure the stage by the offset of this process's open file `path` (read by code
        with no hook of its own, the recording reader): the kernel's file position, polled by
        the ticker."""
        try:
            size = os.path.getsize(path)
        except OSError:
            return
        with self._lock:
            self._watched, self._total, self._count, self._unit = \
                os.path.realpath(path), size, 0, "bytes"

    def done(self) -> None:
        self._stop.set()
        _ACTIVE.discard(self)
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def line(self) -> str:
        """The text drawn now."""
        with self._lock:
            stage, total, count, unit = self.stage, self._total, self._count, self._unit
        took = time.monotonic() - self.start
        text = f"{self.prog}: {took:5.1f}s {stage}"
        if total > 0:
            count = min(count, total)
            filled = BAR * count // total
            shown = f"{count / 1e6:.0f}/{total / 1e6:.0f} MB" if unit == "bytes" \
                else f"{count}/{total}{' ' + unit if unit else ''}"
            text += f" [{'#' * filled}{'.' * (BAR - filled)}] {shown} ({100 * count // total}%)"
        return text

    def _draw(self) -> None:
        if not self.enabled or self._stop.is_set():
            return
        text = self.line()
        with self._lock:
            self.stream.write(f"\r\x1b[K{text}")
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            watched = self._watched
            if watched is not None:
                at = read_offset(watched)
                if at is not None:
                    with self._lock:
                        self._count = at
            self._draw()


# A fork (generate's and decode's worker processes) must not copy a lock the ticker holds in
# the middle of a write: the child would block on stderr forever.
_ACTIVE: weakref.WeakSet = weakref.WeakSet()


def _hold_all() -> None:
    for p in list(_ACTIVE):
        p._lock.acquire()


def _release_all() -> None:
    for p in list(_ACTIVE):
        if p._lock.locked():
            p._lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_hold_all, after_in_parent=_release_all,
                        after_in_child=_release_all)


def read_offset(path: str) -> int | None:
    """How far this process has read `path` (the furthest of its open descriptors of it):
    Linux's /proc/self/fdinfo, None elsewhere or when the file is not open."""
    best = None
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != path:
                continue
            with open(f"/proc/self/fdinfo/{fd}") as f:
                pos = int(f.readline().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        best = pos if best is None else max(best, pos)
    return best


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
