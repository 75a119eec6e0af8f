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
# A line: its duration (microseconds to three decimals; or a word) right-aligned in WIDTH
# columns, the thread's id, the call's indent and text. As % formats (faster than f-strings
# with computed widths), WIDTH written out.
_TIMED = "%11.3f us  [%7d] | %s%s"
_SAID = "%14s  [%7d] | %s%s"


class Tree(Export):
    texts = "text"

    def __init__(self, out, bytes_as: str = "auto") -> None:
        self.out = out
        self.bytes_as = bytes_as
        self.lines: list[str] = []
        self.waiting: dict[int, Call] = {}  # tid -> the call entered last, its line unwritten
        self.indents: list[str] = []  # depth -> its indent

    def begin(self) -> None:
        self.out.write(f"{'DURATION':>{WIDTH}}  {'TID':>9}   CALL\n")

    def end(self) -> None:
        self.flush()

    def flush(self) -> None:
        if self.lines:
            self.lines.append("")
            self.out.write("\n".join(self.lines))
            self.lines.clear()

    def _indent(self, depth: int) -> str:
        indents = self.indents
        while len(indents) <= depth:
            indents.append(INDENT * len(indents))
        return indents[depth]

    def _line(self, said: str, tid: int, depth: int, text: str) -> None:
        self.lines.append(_SAID % (said, tid, self._indent(depth), text))
        if len(self.lines) >= 4096:
            self.flush()

    def thread(self, tgid: int, tid: int, comm: str) -> None:
        self.flush()
        self.out.write(f"# thread {tid} ({comm}) of process {tgid}\n")

    def entered(self, call: Call, parent) -> None:
        waiting = self.waiting
        opened = waiting.get(call.tid)
        if opened is not None:  # it has callees: its line opens a block
            self._line("", opened.tid, opened.depth, opened.text + " {")
        waiting[call.tid] = call

    def exited(self, call: Call, ns: int, text) -> None:
        ret = text[len(call.name):]  # " -> RETURN"
        waiting = self.waiting
        if waiting.get(call.tid) is call:
            del waiting[call.tid]
            line = call.text + ret
        else:
            line = "} " + call.name + ret
        depth = call.depth
        lines = self.lines
        lines.append(_TIMED % ((ns - call.ns) / 1000, call.tid, self.indents[depth]
                               if depth < len(self.indents) else self._indent(depth), line))
        if len(lines) >= 4096:
            self.flush()

    def unended(self, call: Call, why: str) -> None:
        if self.waiting.get(call.tid) is call:
            del self.waiting[call.tid]
            self._line("no exit", call.tid, call.depth, f"{call.text} [no exit: {why}]")
        else:
            self._line("no exit", call.tid, call.depth, f"}} {call.name} [no exit: {why}]")

    def orphan(self, name: str, tgid: int, tid: int, ns: int, depth: int, text) -> None:
        opened = self.waiting.pop(tid, None)
        if opened is not None:
            self._line("", tid, opened.depth, opened.text + " {")
        self._line("no entry", tid, depth, f"{text} [exit without its entry]")
