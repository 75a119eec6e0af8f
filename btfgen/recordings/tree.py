"""A recording's calls as an indented tree per thread with their durations (`btfgen decode
--tree`), as uftrace's replay shows them:

        DURATION      TID   CALL
                  [    100] | outer(x=1) {
        3.000 us  [    100] |   inner(a=2) -> 0
       10.000 us  [    100] | } outer -> 5

A call with callees opens a block at its entry and closes it at its exit (`} NAME -> RETURN`);
one without is one line. Entries and returns are written as `btfgen decode` writes them. Threads
interleave as their events came; a line waits for its thread's next event (to know whether the
call had callees), so lines of different threads may come slightly out of time order: the TID
column tells them apart. A call without its exit has `no exit` for its duration and says why;
an exit without its entry has `no entry`.
"""

from __future__ import annotations

from btfgen.recordings.callwalk import Call, Export

WIDTH = 14  # the duration column
INDENT = "  "


def _took(ns: int) -> str:
    return f"{ns / 1000:{WIDTH - 3}.3f} us"


class Tree(Export):
    texts = "text"

    def __init__(self, out, bytes_as: str = "auto") -> None:
        self.out = out
        self.bytes_as = bytes_as
        self.lines: list[str] = []
        self.waiting: dict[int, Call] = {}  # tid -> the call entered last, its line unwritten

    def begin(self) -> None:
        self.out.write(f"{'DURATION':>{WIDTH}}  {'TID':>9}   CALL\n")

    def end(self) -> None:
        self.flush()

    def flush(self) -> None:
        if self.lines:
            self.lines.append("")
            self.out.write("\n".join(self.lines))
            self.lines.clear()

    def _line(self, took: str, tid: int, depth: int, text: str) -> None:
        self.lines.append(f"{took:>{WIDTH}}  [{tid:>7}] | {INDENT * depth}{text}")
        if len(self.lines) >= 4096:
            self.flush()

    def _opened(self, tid: int) -> None:
        """The thread's waiting call has callees: its line opens a block."""
        call = self.waiting.pop(tid, None)
        if call is not None:
            self._line("", tid, call.depth, call.text + " {")

    def thread(self, tgid: int, tid: int, comm: str) -> None:
        self.flush()
        self.out.write(f"# thread {tid} ({comm}) of process {tgid}\n")

    def entered(self, call: Call, parent) -> None:
        self._opened(call.tid)
        self.waiting[call.tid] = call

    def exited(self, call: Call, ns: int, text) -> None:
        ret = text[len(call.name):]  # " -> RETURN"
        if self.waiting.get(call.tid) is call:
            del self.waiting[call.tid]
            self._line(_took(ns - call.ns), call.tid, call.depth, call.text + ret)
        else:
            self._line(_took(ns - call.ns), call.tid, call.depth, "} " + call.name + ret)

    def unended(self, call: Call, why: str) -> None:
        if self.waiting.get(call.tid) is call:
            del self.waiting[call.tid]
            self._line("no exit", call.tid, call.depth, f"{call.text} [no exit: {why}]")
        else:
            self._line("no exit", call.tid, call.depth, f"}} {call.name} [no exit: {why}]")

    def orphan(self, name: str, tgid: int, tid: int, ns: int, depth: int, text) -> None:
        self._opened(tid)
        self._line("no entry", tid, depth, f"{text} [exit without its entry]")
