"""A recording as the Trace Event Format (JSON object form) that Perfetto UI, chrome://tracing
and speedscope open: `btfgen decode --format chrome`.

Each call is one complete event ("ph": "X") at its entry's time with its duration, on its
process (the traced thread group) and thread, named by its function; process and thread names
are metadata events ("M", from the comm of their first event). With args, an event's `args` are
`{"args": {...}, "captures": {...}, "exit": {"return": ..., ...}}`: the entry's and the exit's
objects as `btfgen decode --format jsonl` writes them.

A call without its exit gets no duration: one still running at the end is a begin event ("B")
with no end (Perfetto shows "Did not end"), one whose exit is not in the recording for another
reason an instant event ("i") at its entry; both are named `NAME [no exit: WHY]`. An exit
whose entry is not in the recording is an instant event at the exit, `NAME [exit without its
entry]`.

Speedscope names a frame by its name and args together, so with args every call is its own
frame: `--no-args` gives it frames that aggregate (or use --format folded).

Events are written as calls end (a callee before its caller); the viewers sort them.
"""

from __future__ import annotations

import json

from btfgen.recordings.callwalk import RUNNING, Call, Export

_ENCODE = json.JSONEncoder(allow_nan=False).encode


_THOUSANDTHS = [f"{n:03d}" for n in range(1000)]  # a microsecond's decimals, made once


def us(ns: int) -> str:
    """ns as the format's microseconds, exactly (three decimals)."""
    return f"{ns // 1000}.{_THOUSANDTHS[ns % 1000]}"


class Chrome(Export):
    """The Trace Event Format's events, written to `out` (a text file) as the walk goes."""

    def __init__(self, out, args: bool = True) -> None:
        self.out = out
        self.texts = "json" if args else None
        self.with_args = args
        self.names: dict[str, str] = {}  # a function's name -> its JSON string
        self.complete: dict[str, str] = {}  # a function's name -> its complete events' start
        self.processes: set[int] = set()
        self.first = True
        self.pending: list[str] = []

    def _name(self, name: str) -> str:
        text = self.names.get(name)
        if text is None:
            text = self.names[name] = _ENCODE(name)
        return text

    def _emit(self, text: str) -> None:
        self.pending.append(text)
        if len(self.pending) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.out.write(("" if self.first else ",\n") + ",\n".join(self.pending))
            self.first = False
            self.pending.clear()

    def begin(self) -> None:
        self.out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')

    def end(self) -> None:
        self.flush()
        self.out.write("\n]}\n")

    def thread(self, tgid: int, tid: int, comm: str) -> None:
        if tgid not in self.processes:
            self.processes.add(tgid)
            self._emit(f'{{"name": "process_name", "ph": "M", "pid": {tgid}, "tid": {tgid}, '
                       f'"args": {{"name": {_ENCODE(f"{comm} [{tgid}]")}}}}}')
        self._emit(f'{{"name": "thread_name", "ph": "M", "pid": {tgid}, "tid": {tid}, "args": '
                   f'{{"name": {_ENCODE(f"{comm} [{tid}]")}}}}}')

    # The walk's texts are bare (callwalk._Lines): an entry's `"args": {...}` (and its
    # `"captures": {...}`), an exit's `"return": ...` (and its captures).

    def exited(self, call: Call, ns: int, text) -> None:
        t, took = call.ns, ns - call.ns
        named = self.complete.get(call.name)
        if named is None:
            named = self.complete[call.name] = f'{{"name": {self._name(call.name)}, "ph": "X"'
        # us() written out (a call each for ts and dur was a tenth of the export's time)
        pending, milli = self.pending, _THOUSANDTHS
        if self.with_args:
            pending.append(f'{named}, "ts": {t // 1000}.{milli[t % 1000]}, "dur": {took // 1000}.'
                           f'{milli[took % 1000]}, "pid": {call.tgid}, "tid": {call.tid}, '
                           f'"args": {{{call.text}, "exit": {{{text}}}}}}}')
        else:
            pending.append(f'{named}, "ts": {t // 1000}.{milli[t % 1000]}, "dur": {took // 1000}.'
                           f'{milli[took % 1000]}, "pid": {call.tgid}, "tid": {call.tid}}}')
        if len(pending) >= 4096:
            self.flush()

    def unended(self, call: Call, why: str) -> None:
        name = self._name(f"{call.name} [no exit: {why}]")
        if why == RUNNING:
            head = (f'{{"name": {name}, "ph": "B", "ts": {us(call.ns)}, "pid": {call.tgid}, '
                    f'"tid": {call.tid}')
        else:
            head = (f'{{"name": {name}, "ph": "i", "s": "t", "ts": {us(call.ns)}, '
                    f'"pid": {call.tgid}, "tid": {call.tid}')
        if self.with_args:
            self._emit(head + ', "args": {' + call.text + "}}")
        else:
            self._emit(head + "}")

    def orphan(self, name: str, tgid: int, tid: int, ns: int, depth: int, text,
               parent) -> None:
        head = (f'{{"name": {self._name(f"{name} [exit without its entry]")}, "ph": "i", '
                f'"s": "t", "ts": {us(ns)}, "pid": {tgid}, "tid": {tid}')
        if self.with_args:
            self._emit(head + ', "args": {"exit": {' + text + "}}}")
        else:
            self._emit(head + "}")
