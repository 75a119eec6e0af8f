"""Entries paired with their exits, the one rule: per thread, an exit closes the innermost
open call of its function, and the calls opened after that one are dropped (their exits were
lost); an exit with no open call of its function had its entry lost. A thread whose records were lost
(the BPF side flags its next one: spec_format.EVENT_THREAD_LOST) has its open calls forgotten
first: the lost record may be an exit, and pairing past it would close the wrong call. `btfgen trace` and
`btfgen decode` pair this way as events come (output.Printer), and so does the dataset
(btfgen.recordings.dataset.pair_calls) for what is left once the calls with nothing inside
them are taken out over arrays.
"""

from __future__ import annotations

# Calls a thread may have open at once before the oldest are dropped (exits lost with a full
# ring buffer, or a thread that died inside a call, must not grow memory without bound).
MAX_DEPTH = 256


class OpenCalls:
    """The calls entered and not yet exited, per thread: enter() one, exit() takes back what
    its entry kept."""

    __slots__ = ("threads", "max_depth")

    def __init__(self, max_depth: int | None = MAX_DEPTH) -> None:
        self.threads: dict[int, list] = {}  # thread id -> [(function, entry), ...]
        self.max_depth = max_depth  # None: no bound

    def enter(self, tid: int, fn, entry) -> None:
        stack = self.threads.get(tid)
        if stack is None:  # the common case (a thread with no call open), at once
            self.threads[tid] = [(fn, entry)]
            return
        stack.append((fn, entry))
        if self.max_depth is not None and len(stack) > self.max_depth:
            del stack[0]

    def exit(self, tid: int, fn):
        """What the innermost open call of `fn` on thread `tid` kept at its entry, dropping
        the calls opened after it; None when it has none (its entry was lost)."""
        stack = self.threads.get(tid)
        if not stack:
            return None
        top = stack[-1]
        if top[0] is fn:  # the innermost call: the common case, taken without the loop
            if len(stack) == 1:
                del self.threads[tid]
            else:
                del stack[-1]
            return top[1]
        for at in range(len(stack) - 2, -1, -1):
            if stack[at][0] is fn:
                entry = stack[at][1]
                del stack[at:]
                if not stack:
                    del self.threads[tid]
                return entry
        return None

    def forget(self, tid: int) -> None:
        """Thread `tid` lost records: none of its open calls can be paired any more."""
        self.threads.pop(tid, None)

    def forget_all(self) -> None:
        """Some thread lost records, which one unknown."""
        self.threads.clear()
