"""A recording's calls, one thread's nested in its own order, handed to an export as they end:
the one walk behind `btfgen decode --format chrome`, `--format folded` and `--tree`.

Pairing is probe/calls.py's rule (an exit closes the innermost open call of its function on
its thread), kept here with what an export needs of each call (its depth, its callers' path,
the time its children took) and with every call that has no exit said, never given a
duration: the calls opened after the one an exit closes were left (a longjmp, an exit the
kernel did not report), a thread's open calls when it lost records are lost, and what is open
at the end of the recording was still running. An exit with no open call of its function had
its entry lost.

Streaming: a batch of the recording at a time (reader.Reader), and per thread at most
MAX_OPEN open calls (the oldest given up as "too deep" past that), so memory does not grow with
the file.
"""

from __future__ import annotations

import struct

from btfgen.gcpause import collector_paused
from btfgen.probe import output, recording, spec_format, stack_wire
from btfgen.probe.calls import MAX_DEPTH
from btfgen.probe.event import DATA, FLAGS_AT, head_format
from btfgen.recordings import grouping, replay
from btfgen.recordings.reader import Reader

MAX_OPEN = MAX_DEPTH  # open calls a thread keeps, as the printer keeps them
WALKED = ("tgid", "pid", "ns", "flags", "btf_id", "kind")  # the heads' fields the walk reads
# where a thread's comm is (read at its first event alone)
COMM_AT = spec_format.offset_of(spec_format.EVENT_HEAD, "comm")
COMM_SIZE = spec_format.size_of(tuple(f for f in spec_format.EVENT_HEAD if f.name == "comm"))
_KIND = ', "kind": "'  # where a JSON line's head says which kind of event it is

# Why a call has no exit, as each export says it.
RUNNING = "running at the end"
LEFT = "left: a caller returned first (longjmp?)"
LOST = "records lost"
TOO_DEEP = f"more than {MAX_OPEN} calls open on its thread"
NOT_PAIRED = "not pairable (its exit cannot be told from another's)"
CUT = "the recording was cut"


class Call:
    """One call entered: its function's name, thread, entry time (ns), depth (0: the thread's
    outermost open call), `path` (the export's key of its callers and itself, made by the
    export), `text` (the export's text of its entry, or None) and `inner` (ns its exited
    children took); `stack` its recorded stack where the export asked for stacks and the entry
    has one (symbolize.Stacks.describe's dict), else None; `waits` the export's own mark
    (False until it sets it: the tree's, for a call whose line is not yet written)."""

    __slots__ = ("name", "tgid", "tid", "ns", "depth", "path", "text", "inner", "btf_id",
                 "stack", "waits")

    def __init__(self, name, tgid, tid, ns, depth, btf_id, text=None) -> None:
        # one store a statement: a tenth quicker than tuple assignment, a call each entry
        self.name = name
        self.tgid = tgid
        self.tid = tid
        self.ns = ns
        self.depth = depth
        self.btf_id = btf_id
        self.text = text
        self.path = None
        self.stack = None
        self.inner = 0
        self.waits = False


class Export:
    """What an export does with the walk; every method may be left as it is."""

    # "json", "text" or None: what Call.text and exit texts are (output.Printer's line of the
    # event, bare: _Lines), or no text (the walk's fastest).
    texts: str | None = None
    bytes_as = "auto"  # a captured buffer in text: output.show_bytes' `how`
    stacks = False  # whether each call's recorded stack (--stack) is named, as Call.stack

    def begin(self) -> None:
        """Before the first event: the output's head."""

    def end(self) -> None:
        """After the last (also after damage): what closes the output."""

    def thread(self, tgid: int, tid: int, comm: str) -> None:
        """A thread's first event."""

    def entered(self, call: Call, parent: Call | None) -> None:
        """A call entered (its `text` set); `parent` the innermost call open on its thread."""

    def exited(self, call: Call, ns: int, text) -> None:
        """`call` returned at `ns`; `text` its exit's."""

    def unended(self, call: Call, why: str) -> None:
        """`call` has no exit, for the reason `why` (one of this module's)."""

    def orphan(self, name: str, tgid: int, tid: int, ns: int, depth: int, text,
               parent: Call | None) -> None:
        """An exit whose entry is not in the recording, at `depth` on its thread; `parent` the
        innermost call open there."""


class _NoPairing:
    """output.Printer's OpenCalls, pairing nothing: its lines without durations (the walk
    pairs)."""

    def enter(self, tid, fn, entry) -> None:
        pass

    def exit(self, tid, fn):
        return None

    def forget(self, tid) -> None:
        pass

    def forget_all(self) -> None:
        pass


class _Lines(output.Printer):
    """output.Printer's line of one event, bare (lines.compile_handler's: in JSON the members
    past the head, without braces; in text without who), made by its compiled handlers or its
    general path alike, kept nowhere."""

    def __init__(self, functions, order: str, as_json: bool, bytes_as: str) -> None:
        super().__init__(functions, order, None, as_json=as_json, flush=False, batch=True,
                         bytes_as=bytes_as)
        self.open = _NoPairing()
        self.bare = True

    def _bared(self, line):
        """A whole line of the general path made bare."""
        if line is None or not self.as_json:
            return line
        # The head's strings are JSON-escaped, so `, "kind": "` first occurs where the head
        # puts it, followed by the kind (entry or exit) and `", `.
        return line[line.index('", ', line.index(_KIND) + len(_KIND)) + 3:-1]

    def _general(self, raw, fn):
        return self._bared(super()._general(raw, fn))

    def _unpaired(self, raw, flags: int):
        return self._bared(super()._unpaired(raw, flags))

    def handler(self, raw):
        """The handler (buf, at, end) making the line of events of raw's function and kind."""
        return self._handler_of(self._key(raw, FLAGS_AT)[1]) or self._handler(raw)

    def line(self, raw, flags: int):
        """The line of an event with flags."""
        if flags & spec_format.EVENT_NOT_PAIRED:
            return self._unpaired(raw, flags)
        if flags & output.EVENT_ERRNO_MASK:
            return self._general(raw, self._function(raw))
        return self.handler(raw)(raw, 0, len(raw))


class Walk:
    """The calls of a recording's events, fed a batch at a time, handed to `export`."""

    def __init__(self, functions, order: str, export: Export, stacks=None) -> None:
        self.export = export
        # recorded_stacks.RecordedStacks naming each entry's stack (given its notes: walk()),
        # or None; where each function's entry's stack part starts
        self.stacks = stacks
        self.stack_at = {f.btf_id: spec_format.event_size(f.desc, 0) for f in functions}
        self.by_id = {f.btf_id: f for f in functions}
        self.names = {f.btf_id: f.name for f in functions}
        # What the walk reads of every event's heads (tgid, tid, ns, flags, BTF id, kind): the
        # comm, read at a thread's first event, and the rest skipped
        self.walk_heads = struct.Struct(("<" if order == "little" else ">")
                                        + head_format(WALKED)).unpack_from
        self.lines = (_Lines(functions, order, export.texts == "json", export.bytes_as)
                      if export.texts else None)
        self.threads: dict[int, list[Call]] = {}  # tid -> its open calls, outermost first
        self.comms: dict[bytes, str] = {}
        # BTF id << 1 | kind -> the compiled handler making its events' text (None: no text)
        self.texts = {} if self.lines is not None else None
        self.unended: dict[str, int] = {}  # why -> how many calls
        self.orphans = 0  # exits without their entry

    def events(self, places) -> None:
        """A batch's events, given where they lie: chunks of (bytes, each event's first byte,
        each one's end), as reader.py's places() gives them. Each event is read in place (a
        view made of each cost as much as reading its head)."""
        # The common events (no flags, an entry, or the exit of the thread's innermost call)
        # are taken here; the rest by _odd.
        heads, threads, export, names = self.walk_heads, self.threads, self.export, self.names
        texts = self.texts
        text_of = texts.get if texts is not None else None
        # an export that does nothing at an entry is not called there
        entered = None if type(export).entered is Export.entered else export.entered
        exited = export.exited
        text = None
        for data, starts, ends in places:
            for at, end in zip(starts, ends):
                if end - at < DATA:
                    raise output.BadEvent(f"an event of {end - at} bytes")
                tgid, tid, ns, flags, btf_id, kind = heads(data, at)
                stack = threads.get(tid)
                if stack is None:
                    stack = self._thread(tgid, tid,
                                         bytes(data[at + COMM_AT:at + COMM_AT + COMM_SIZE]))
                if flags:
                    self._odd(data[at:end], tgid, tid, ns, flags, btf_id, kind, stack)
                    continue
                if text_of is not None:
                    handler = text_of(btf_id << 1 | kind)
                    text = (handler(data, at, end) if handler is not None
                            else self._text(data[at:end], btf_id, kind, 0))
                if kind == 0:
                    name = names.get(btf_id)
                    if name is None:
                        raise output.BadEvent(f"no traced function has BTF id {btf_id}")
                    call = Call(name, tgid, tid, ns, len(stack), btf_id, text)
                    if entered is not None:
                        entered(call, stack[-1] if stack else None)
                    stack.append(call)
                    if len(stack) > MAX_OPEN:
                        self._too_deep(stack)
                elif kind == 1 and stack and stack[-1].btf_id == btf_id:
                    call = stack.pop()
                    if stack:
                        stack[-1].inner += ns - call.ns
                    exited(call, ns, text)
                else:
                    self._exit(tgid, tid, ns, btf_id, kind, stack, text)

    def _thread(self, tgid: int, tid: int, comm: bytes) -> list:
        stack = self.threads[tid] = []
        self.export.thread(tgid, tid, self._comm(comm))
        return stack

    def _text(self, raw, btf_id: int, kind: int, flags: int):
        """The export's text of an event: output.Printer's line, by the handler compiled for
        its function and kind (kept), or the general way."""
        if btf_id not in self.names or kind > 1:
            raise output.BadEvent(f"no traced function has BTF id {btf_id} (kind {kind})")
        if flags & (spec_format.EVENT_NOT_PAIRED | output.EVENT_ERRNO_MASK):
            return self.lines.line(raw, flags)
        handler = self.texts[btf_id << 1 | kind] = self.lines.handler(raw)
        return handler(raw, 0, len(raw))

    def _odd(self, raw, tgid, tid, ns, flags, btf_id, kind, stack) -> None:
        """An event with flags: losses before it, an event not to be paired, an exit with its
        errno."""
        if flags & spec_format.EVENT_SOME_LOST:
            for other in self.threads.values():
                self._give_up(other, 0, LOST)
        elif flags & spec_format.EVENT_THREAD_LOST:
            self._give_up(stack, 0, LOST)
        text = self._text(raw, btf_id, kind, flags) if self.lines is not None else None
        name = self.names.get(btf_id)
        if name is None or kind > 1:
            raise output.BadEvent(f"no traced function has BTF id {btf_id} (kind {kind})")
        if kind == 0:
            call = Call(name, tgid, tid, ns, len(stack), btf_id, text)
            if flags & stack_wire.EVENT_STACK and self.stacks is not None:
                try:
                    call.stack = self.stacks.describe(raw, self.stack_at[btf_id], tgid, tid)
                except stack_wire.BadStack as e:
                    raise output.BadEvent(f"{name}: {e}") from None
            self.export.entered(call, stack[-1] if stack else None)
            if flags & spec_format.EVENT_NOT_PAIRED:
                self._unended(call, NOT_PAIRED)
                return
            stack.append(call)
            if len(stack) > MAX_OPEN:
                self._too_deep(stack)
        elif flags & spec_format.EVENT_NOT_PAIRED:
            self.orphans += 1
            self.export.orphan(name, tgid, tid, ns, len(stack), text,
                              stack[-1] if stack else None)
        else:
            self._exit(tgid, tid, ns, btf_id, kind, stack, text)

    def _exit(self, tgid, tid, ns, btf_id, kind, stack, text) -> None:
        """An exit that does not close the thread's innermost call: it closes the innermost
        of its function (those opened after it were left), or it had its entry lost."""
        name = self.names.get(btf_id)
        if name is None or kind > 1:
            raise output.BadEvent(f"no traced function has BTF id {btf_id} (kind {kind})")
        at = len(stack) - 1
        while at >= 0 and stack[at].btf_id != btf_id:
            at -= 1
        if at < 0:
            self.orphans += 1
            self.export.orphan(name, tgid, tid, ns, len(stack), text,
                              stack[-1] if stack else None)
            return
        self._give_up(stack, at + 1, LEFT)
        call = stack.pop()
        if stack:
            stack[-1].inner += ns - call.ns
        self.export.exited(call, ns, text)

    def _too_deep(self, stack: list) -> None:
        oldest = stack.pop(0)
        for c in stack:
            c.depth -= 1
        self._unended(oldest, TOO_DEEP)

    def finish(self, why: str = RUNNING) -> None:
        """The recording ended: every open call has no exit (innermost first)."""
        for stack in self.threads.values():
            self._give_up(stack, 0, why)

    def _give_up(self, stack: list, at: int, why: str) -> None:
        while len(stack) > at:
            self._unended(stack.pop(), why)

    def _unended(self, call: Call, why: str) -> None:
        self.unended[why] = self.unended.get(why, 0) + 1
        self.export.unended(call, why)

    def _comm(self, comm: bytes) -> str:
        text = self.comms.get(comm)
        if text is None:
            text = self.comms[comm] = comm.split(b"\0")[0].decode(errors="replace")
        return text

    def said(self) -> str:
        """How many calls had no exit and why, for the closing line ("" where all had)."""
        return ", ".join(f"{n} {why}" for why, n in self.unended.items())


class Damaged(recording.RecordError):
    """Damage found once the output had begun: what precedes it was converted, and the output
    closed (Export.end)."""


def walk(path: str, export: Export) -> tuple:
    """Every event of the recording at `path` through a Walk to `export`, a batch at a time,
    between export.begin() (once the header is read and checked: a file that is not a
    recording begins nothing) and export.end(). Damage further on raises Damaged once what
    precedes it is handed on and the output ended. Returns (the Walk, the Reader's `cut` (or
    None), its events, its lost records)."""
    with Reader(path, replay.word_sum(), grouping=grouping.fastest()) as r:
        stacks = replay.stacks_of(r, None) if export.stacks else None
        w = Walk(replay.functions(r), r.order, export, stacks)
        export.begin()
        try:
            for batch in r.batches():
                if stacks is not None:
                    stacks.take(batch.notes)
                try:
                    # the collector paused a batch at a time: its passes over the open
                    # calls and texts a batch makes (no cycles among them) cost ~5% of the
                    # walk, and what a batch might leave is collected after it
                    with collector_paused():
                        w.events(batch.places(r.strides))
                except (output.BadEvent, replay.DecodeError) as e:
                    raise recording.RecordError(f"{path}: corrupt event ({e})") from None
        except recording.RecordError as e:
            w.finish(CUT)
            export.end()
            raise Damaged(str(e)) from None
        w.finish(CUT if r.cut else RUNNING)
        export.end()
        return w, r.cut, r.events, r.lost
