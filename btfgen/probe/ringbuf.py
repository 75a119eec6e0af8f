"""The ring-buffer reader: a BPF_MAP_TYPE_RINGBUF map's records handed over through libbpf,
a bounded batch at a time."""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Callable

from .libbpf import SAMPLE_FN, fail, libbpf
from .ringspan import Span


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

    def poll(self, timeout_ms: int) -> int:
        """Records handed over (at most BATCH), waiting up to `timeout_ms` for the first."""
        self._taken = 0
        n = libbpf().ring_buffer__poll(self._rb, timeout_ms)
        self._hand_on()
        if n < 0 and self._taken >= self.BATCH:
            return self._taken
        if n < 0 and -n != errno.EINTR:
            raise fail("ring_buffer__poll", n)
        return max(n, 0)

    def _hand_on(self) -> None:
        if self._got:
            got, self._got[:] = list(self._got), []
            self._on(Span.of(got))

    def drain(self) -> int:
        """Records handed over (at most BATCH) of those there now, without waiting."""
        self._taken = 0
        n = libbpf().ring_buffer__consume(self._rb)
        self._hand_on()
        return self._taken if n < 0 and self._taken >= self.BATCH else n

    def close(self) -> None:
        if self._rb:
            libbpf().ring_buffer__free(self._rb)
            self._rb = None

    def __enter__(self) -> RingBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

