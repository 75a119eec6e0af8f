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
_TIMED = "%11.3f us  [%7d] | %s%s%s"
_SAID = "%14s  [%7d] | %s%s"
_OPENED = " " * WIDTH + "  [%7d] | %s%s {"  # _SAID's with no duration, a block's opening


class Tree(Export):
    texts = "text"

    def __init__(self, out, bytes_as: str = "auto") -> None:
        self.out = out
        self.bytes_as = bytes_as
        self.lines: list[str] = []
        self.indents: list[str] = []  # depth -> its indent
        # A call's line waits (Call.waits) from its entry until its first callee enters (its
        # line then opens a block) or it ends (one line).

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

    def _opened(self, call: Call) -> None:
        """`call`'s line, waiting, written as a block's opening: it has callees (_line's,
        written out: a third of the entries here)."""
        call.waits = False
        depth, indents, lines = call.depth, self.indents, self.lines
        lines.append(_OPENED % (call.tid, indents[depth] if depth < len(indents)
                                else self._indent(depth), call.text))
        if len(lines) >= 4096:
            self.flush()

    def thread(self, tgid: int, tid: int, comm: str) -> None:
        self.flush()
        self.out.write(f"# thread {tid} ({comm}) of process {tgid}\n")

    def entered(self, call: Call, parent) -> None:
        if parent is not None and parent.waits:
            self._opened(parent)
        call.waits = True

    def exited(self, call: Call, ns: int, text) -> None:
        # a leaf's line: its entry's text and the exit's past the name (" -> RETURN"); a
        # block's closing line: "} " and the exit's text (NAME -> RETURN)
        if call.waits:
            head, tail = call.text, text[len(call.name):]
        else:
            head, tail = "} ", text
        depth, indents, lines = call.depth, self.indents, self.lines
        lines.append(_TIMED % ((ns - call.ns) / 1000, call.tid, indents[depth]
                               if depth < len(indents) else self._indent(depth), head, tail))
        if len(lines) >= 4096:
            self.flush()

    def unended(self, call: Call, why: str) -> None:
        if call.waits:
            call.waits = False
            self._line("no exit", call.tid, call.depth, f"{call.text} [no exit: {why}]")
        else:
            self._line("no exit", call.tid, call.depth, f"}} {call.name} [no exit: {why}]")

    def orphan(self, name: str, tgid: int, tid: int, ns: int, depth: int, text,
               parent) -> None:
        if parent is not None and parent.waits:
            self._opened(parent)
        self._line("no entry", tid, depth, f"{text} [exit without its entry]")
