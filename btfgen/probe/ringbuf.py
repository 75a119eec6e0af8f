"""The ring-buffer reader: a BPF_MAP_TYPE_RINGBUF map's records handed over through libbpf,
a bounded batch at a time."""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Callable

from .libbpf import SAMPLE_FN, fail, libbpf
from .ringspan import Span, wait_for_wakeup, wakeups


class RingBuffer:
    """Calls `on_record(bytes)` for each record of a BPF_MAP_TYPE_RINGBUF map.

    libbpf consumes for as long as new records keep coming: where the traced calls come faster
    than `on_record` takes them, a poll would never return, and a caller could neither stop
    nor say what it is losing. So a poll or drain hands over at most BATCH records, then
    returns (the callback's negative return ends libbpf's loop, the record it was given
    already consumed); what is left waits for the next one."""

    BATCH = 4096

    def __init__(self, map_fd: int, on_record: Callable, spans: bool = False) -> None:
        """With `spans`, `on_record` takes each poll's or drain's records as one
        ringspan.Span (as the ring reader hands them), not one record at a time."""
        self._taken = 0
        self._spans, self._got, self._on = spans, [], on_record
        if spans:
            on_record = self._got.append

        def sample(_ctx, data, size):
            on_record(ctypes.string_at(data, size))
            self._taken += 1
            return -1 if self._taken >= self.BATCH else 0

        self._cb = SAMPLE_FN(sample)  # kept alive as long as libbpf may call it
        self._rb = libbpf().ring_buffer__new(map_fd, self._cb, None, None)
        if not self._rb:
            raise fail("ring_buffer__new")
        # libbpf's own poll waits level-triggered, returning at once while the ring holds a
        # record: the wait is ringspan's, on the ring's wakeups, then libbpf consumes.
        self._epoll = wakeups(map_fd)
        self._behind = False

    def poll(self, timeout_ms: int) -> int:
        """Records handed over (at most BATCH): at once where the last hand-over left some
        behind, else after the BPF side's wakeup or `timeout_ms`, whichever comes first."""
        if not self._behind:
            wait_for_wakeup(self._epoll, timeout_ms)
        n = self._consume()
        if n < 0 and self._behind:
            return self._taken
        if n < 0 and -n != errno.EINTR:
            raise fail("ring_buffer__consume", n)
        return max(n, 0)

    def _hand_on(self) -> None:
        if self._got:
            got, self._got[:] = list(self._got), []
            self._on(Span.of(got))

    def drain(self) -> int:
        """Records handed over (at most BATCH) of those there now, without waiting."""
        n = self._consume()
        return self._taken if n < 0 and self._behind else n

    def _consume(self) -> int:
        self._taken = 0
        n = libbpf().ring_buffer__consume(self._rb)
        self._hand_on()
        self._behind = self._taken >= self.BATCH
        return n

    def close(self) -> None:
        if self._rb:
            libbpf().ring_buffer__free(self._rb)
            self._rb = None
            self._epoll.close()

    def __enter__(self) -> RingBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

