"""What `btfgen trace` and `btfgen decode` print: events (trace.bpf.c's struct trace_event) a
batch at a time, entries and exits paired per thread, as text lines or JSON lines, or only the
calls that failed (--errors).

Standard library only: copied into every trace directory, and used by `btfgen decode` on
records read back from a file (btfgen.recordings.replay). A decoder here is anything with
btfgen's generated `Function` interface (decode_record, as_dict, args, ret, name, btf_id,
pointer_size).
"""

from __future__ import annotations

import errno
import json
import math
import struct
import sys

from . import lines, prog, spec_format, stack_wire
from .calls import OpenCalls
from .event import (DATA, EVENT_HEADER, FLAGS_AT, HEAD_FORMAT, HEADS, MAX_ERRNO, RECORD_HEADS,
                    TID_AT)

# Lines a batching Printer holds before it writes them: a drain of the ring buffer's (its
# BATCH records) goes in one write.
BATCH_LINES = 4096
_LOSSES = spec_format.EVENT_THREAD_LOST | spec_format.EVENT_SOME_LOST
_NOT_PAIRED = spec_format.EVENT_NOT_PAIRED
_STACK = stack_wire.EVENT_STACK  # an entry carrying its stack (--stack): the general way
# trace_event.flags, not a loss either: a user function's exit carries, in bits 20-28, the
# error (1..511) of the last system call its thread made since its latest traced entry, where
# that call failed; 0 where none did, none was made, or it is not known (trace.bpf.c's
# syscall_flags). The errno its C library set, for a -1 or NULL return, without knowing the
# library. (Here, not in spec_format.py, whose text every generated module embeds.)
EVENT_ERRNO_SHIFT = 20
EVENT_ERRNO_MASK = 0x1ff << EVENT_ERRNO_SHIFT
_ERRNO, _ERRNO_SHIFT = EVENT_ERRNO_MASK, EVENT_ERRNO_SHIFT
# --errors=WHAT: what a user says is an error, by the return's type (a comma list).
ERRORS_ARE = {"-1": "a signed integer return of -1", "negative": "a negative signed integer "
              "return", "null": "a NULL pointer return"}
# For a user function without WHAT: the C library's -1 and NULL (any negative would take a
# function's negative results for errors).
USER_ERRORS = frozenset({"-1", "null"})
# The handler's key (flags, then btf_id and kind) is read as one struct: they must be adjacent.
assert FLAGS_AT + 4 == EVENT_HEADER


class BadEvent(ValueError):
    """An event that cannot be what trace.bpf.c wrote."""


class Printer:
    """Decodes events and writes them to `out`.

    Text: `func(arg=value, ...)` at entry, `func -> value (D us)` at exit, D the time since the
    same thread entered it; with `who`, each line starts with `comm[tgid] `. JSON: one object a
    line. `errors`: nothing at entry; at an exit that failed, the call with the arguments it
    was entered with: a kernel function's that returned -1..-4095 or a NULL/error pointer, a
    user function's as `errors_are` says (a set of ERRORS_ARE's keys; None: USER_ERRORS), or,
    for the functions in `decided` (BTF ids: a --filter on $retval sent only the exits it
    wanted), every exit. `kernel`: the functions are the kernel's, whose negative return is an
    errno, named (-2 ENOENT); a user function's return is never named by that guess (its C
    library returns -1 and puts the error in errno): a -1 or NULL is named by the error of the
    last system call its thread made inside the call, where one failed (the event's flags,
    EVENT_ERRNO_SHIFT), and shown bare otherwise.

    Events come a batch at a time (records(): a span of the ring buffer, events(): a batch of a
    recording), or one at a time (record(), event()). Each function's entries and exits are
    made by a handler compiled at its first event (lines.py: one struct, one format string);
    what that handler does not make goes the general way (_general), the same text."""

    def __init__(self, functions, order: str, out=sys.stdout, *, who: bool = False,
                 errors: bool = False, kernel: bool = False, errors_are=None,
                 decided=frozenset(), as_json: bool = False, flush: bool = True,
                 batch: bool = False, bytes_as: str = "auto", stacks=None) -> None:
        # A mapping already keyed by BTF id is taken as it is (manifest.LazyFunctions makes each
        # decoder at its function's first event).
        self.by_id = functions if hasattr(functions, "get") else {f.btf_id: f for f in functions}
        self.order = order
        self.head, self.record_head = HEADS[order], RECORD_HEADS[order]
        # The event's head and its record's, read at once.
        self.heads = struct.Struct(("<" if order == "little" else ">") + HEAD_FORMAT)
        # The record head's btf_id and kind as one number: the key of their event's handler.
        # trace_event's flags, then the record's btf_id and kind as one word: the handler's key.
        self._key = struct.Struct(("<" if order == "little" else ">") + "IQ").unpack_from
        self._tid = struct.Struct(("<" if order == "little" else ">") + "I").unpack_from
        self.out, self.who, self.errors, self.as_json = out, who, errors, as_json
        self.kernel = kernel  # a negative return is named as an errno only for the kernel's
        self.errors_are = None if kernel and errors_are is None else \
            frozenset(USER_ERRORS if errors_are is None else errors_are)
        self.decided = frozenset(decided)
        self.flush = flush
        self.bytes_as = bytes_as  # a captured buffer as text: show_bytes' `how`
        # --stack: an entry's stack part as frames (symbolize.Stacks); None: not shown
        self.stacks = stacks
        # What each call's entry keeps: its ns; with `errors`, (ns, args, captures), or
        # (ns, the entry's bytes) to be decoded only if the call fails (lines.py).
        self.open = OpenCalls()
        # With `batch`, lines wait for flush_lines() (the run side calls it after each drain
        # of the ring buffer; records() and events() at the end of their batch): one write a
        # batch costs a tenth of a print a line.
        self.batch = batch
        self.gone = False  # the reader of `out` went away (a broken pipe)
        self._lines: list[str] = []
        self._shapes: dict = {}  # function -> its _Shape
        self._comms: dict = {}  # comm bytes -> (text, as JSON)
        self._said_unnoted = False
        self._said_unpaired = False
        # fsession exits whose entry the kernel skipped (EVENT_NO_ENTRY), shown unpaired
        self.no_entry = 0
        self._handlers: dict = {}  # _key of an event -> the function making its line
        self._handler_of = self._handlers.get
        self._kept = self._lines if batch else None  # where event() puts a line
        # lines.compile_handler's `bare` (callwalk's, whose general path says the same)
        self.bare = False

    def records(self, batch) -> bool:
        """Print a batch of records (an iterable of each one's bytes, or a span of the ring
        buffer, whose records are read where they lie: ringspan.Span.places), their lines in
        one write. For the ring-buffer reader, which must not stop: a bad record is one line on
        stderr, and tracing goes on. No record's memory is held past the call (a span's pages go
        back to the kernel): what is kept is copied. False once the reader of `out` has gone
        away."""
        if self.gone:
            return self.flush_lines()
        places = getattr(batch, "places", None)
        if places is not None and self._kept is not None and not self.errors:
            self._in_place(places(BATCH_LINES), live=True)
            return self.flush_lines()
        event = self.event
        for raw in batch:
            try:
                event(raw)
            except BrokenPipeError:
                self.gone = True
                break
            except Exception as e:
                self._bad(e)
        return self.flush_lines()

    def events(self, places) -> None:
        """Print a batch of a recording's events, given where they lie (chunks of (bytes, each
        event's first byte, each one's end): reader.py's places()), their lines in one write;
        a bad one raises BadEvent or the decoder's error, the lines before it kept for
        flush_lines()."""
        if self._kept is None or self.errors:
            event = self.event
            for data, starts, ends in places:
                for at, end in zip(starts, ends):
                    event(data[at:end])
            self.flush_lines()
            return
        self._in_place(places, live=False)
        self.flush_lines()

    def _in_place(self, places, live: bool) -> None:
        """event() for events read where they lie, without its per-event calls, batching their
        lines (written a chunk at a time past BATCH_LINES). The same steps, in the same order.
        A bad event raises (a recording's: `live` False) or is one line on stderr, and the rest
        are printed (the ring's)."""
        kept = self._kept
        key_of, handler_of, lost_before = self._key, self._handler_of, self._lost_before
        append = kept.append
        for data, starts, ends in places:
            for at, end in zip(starts, ends):
                try:
                    if end - at < DATA:
                        raise BadEvent(f"an event of {end - at} bytes")
                    flags, key = key_of(data, at + FLAGS_AT)
                    if flags:
                        raw = data[at:end]
                        if flags & _LOSSES:
                            lost_before(self._tid(raw, TID_AT)[0], flags)
                        if flags & _NOT_PAIRED:
                            line = self._unpaired(raw, flags)
                            if line is not None:
                                append(line)
                            continue
                        if flags & (_ERRNO | _STACK):
                            line = self._general(raw, self._function(raw))
                            if line is not None:
                                append(line)
                            continue
                    handler = handler_of(key)
                    if handler is None:
                        handler = self._handler(data[at:end])
                    line = handler(data, at, end)
                    if line is not None:
                        append(line)
                except Exception as e:
                    if not live:
                        raise
                    self._bad(e)
            if len(kept) >= BATCH_LINES and not self.flush_lines():
                return

    def record(self, raw) -> None:
        """One record, for libbpf's ring-buffer callback, which must not raise: a bad record is
        one line on stderr, and tracing goes on."""
        if self.gone:
            return
        try:
            self.event(raw)
        except BrokenPipeError:
            self.gone = True  # `| head` went away: nothing to print to; tracing should end
        except Exception as e:
            self._bad(e)

    def _bad(self, e: Exception) -> None:
        prog.say(f"a record could not be decoded: {e!r}", flush=True)

    def event(self, raw) -> None:
        """One event: its line written (or kept, with `batch`), its call opened or closed."""
        if len(raw) < DATA:
            raise BadEvent(f"an event of {len(raw)} bytes")
        flags, key = self._key(raw, FLAGS_AT)
        if flags:
            if flags & _LOSSES:
                self._lost_before(self._tid(raw, TID_AT)[0], flags)
            if flags & _NOT_PAIRED:
                line = self._unpaired(raw, flags)
            elif flags & (_ERRNO | _STACK):  # a user function's exit with its errno, an
                # entry with its stack: the general way
                line = self._general(raw, self._function(raw))
            else:
                line = (self._handler_of(key) or self._handler(raw))(raw, 0, len(raw))
        else:
            handler = self._handler_of(key)
            if handler is None:
                handler = self._handler(raw)
            line = handler(raw, 0, len(raw))
        if line is None:
            return
        kept = self._kept
        if kept is None:
            print(line, file=self.out, flush=self.flush)
            return
        kept.append(line)
        if len(kept) >= BATCH_LINES:
            self.flush_lines()

    def _function(self, raw):
        """The decoder of `raw`'s function."""
        *_head, btf_id, kind, _failed = self.heads.unpack_from(raw)
        fn = self.by_id.get(btf_id)
        if fn is None or kind > 1:
            raise BadEvent(f"no traced function has BTF id {btf_id} (kind {kind})")
        return fn

    def _handler(self, raw):
        """The handler of events with `raw`'s function and kind, made and kept."""
        fn = self._function(raw)

        def general(raw, _line=self._general, _fn=fn):
            return _line(raw, _fn)

        kind = self.heads.unpack_from(raw)[-2]
        make = lines.compile_errors_handler if self.errors else lines.compile_handler
        handler = make(fn, kind, self.order, self._shape(fn), general, as_json=self.as_json,
                       who=self.who, comm=self._comm, comms=self._comms, open_calls=self.open,
                       errors_are=None if fn.btf_id in self.decided else self.errors_are,
                       every=fn.btf_id in self.decided, bare=self.bare)
        handler = self._handlers[self._key(raw, FLAGS_AT)[1]] = handler or _placed(general)
        return handler

    def _comm(self, comm: bytes) -> tuple:
        named = self._comms.get(comm)
        if named is None:
            text = comm.split(b"\0")[0].decode(errors="replace")
            named = self._comms[comm] = (text, _ENCODE(text))
        return named

    def _general(self, raw, fn):
        """The line of an event of `fn` (or None), decoded value by value by the decoder."""
        tgid, tid, comm, ns, cpu, flags, _btf_id, kind, _failed = self.heads.unpack_from(raw)
        rec = memoryview(raw)[EVENT_HEADER:]
        value = fn.decode_record(rec)
        caps = fn.decode_captures(rec) if getattr(fn, "captures", ()) else {}
        who = Who(tgid, tid, self._comm(comm), ns, cpu)
        if kind == 0:
            if not self.errors:
                self.open.enter(tid, fn, ns)
                line = self._entry(fn, who, value, caps)
                return self._with_stack(line, raw, fn, tgid, tid) if flags & _STACK else line
            if flags & _STACK and self.stacks is not None:  # shown if the call fails
                self.open.enter(tid, fn, (ns, value, caps, self._stack_of(raw, fn, tgid, tid)))
            else:
                self.open.enter(tid, fn, (ns, value, caps))
            return None
        entry = self.open.exit(tid, fn)
        err = (flags & _ERRNO) >> _ERRNO_SHIFT
        if not self.errors:
            return self._exit(fn, who, value, None if entry is None else ns - entry, None, caps,
                              err)
        if not self._failed(fn, value):
            return None
        if entry is not None and len(entry) == 2:  # kept undecoded (lines.py)
            rec = memoryview(entry[1])[EVENT_HEADER:]
            entry = (entry[0], fn.decode_record(rec),
                     fn.decode_captures(rec) if getattr(fn, "captures", ()) else {})
        line = self._exit(fn, who, value, None if entry is None else ns - entry[0], entry, caps,
                          err)
        # --stack: the failed call's stack, taken at its entry
        return self._stack_shown(line, entry[3]) if entry is not None and len(entry) == 4 \
            else line

    def _failed(self, fn, value) -> bool:
        """Whether --errors prints this exit: the kernel's convention for a kernel function,
        what the user says is an error for a user function, every exit a $retval filter let
        through."""
        if fn.btf_id in self.decided:
            return True
        if self.errors_are is None:
            return failed(fn, value)
        return failed_as(fn, value, self.errors_are)

    def _unpaired(self, raw, flags: int):
        """The line of a record the BPF side flagged as not to be paired (or None): an
        fsession exit whose entry the kernel skipped (EVENT_NO_ENTRY), or a record of the
        fentry.multi / fexit.multi pair (EVENT_UNPAIRED). No call is opened or closed by it;
        an exit is shown as one whose entry was lost (no arguments from it, no duration), and
        in JSON says `"paired": false`."""
        tgid, tid, comm, ns, cpu, _flags, btf_id, kind, _failed = self.heads.unpack_from(raw)
        fn = self.by_id.get(btf_id)
        if fn is None or kind > 1:
            raise BadEvent(f"no traced function has BTF id {btf_id} (kind {kind})")
        if flags & spec_format.EVENT_NO_ENTRY and kind == 1:
            self.no_entry += 1
        elif flags & spec_format.EVENT_UNPAIRED and not self._said_unpaired:
            self._said_unpaired = True
            prog.say("the fentry.multi and fexit.multi programs are each skipped "
                     "by the kernel on their own (its recursion check), and nothing tells an "
                     "exit whose entry was skipped: exits are shown without their entry's "
                     "arguments and duration", flush=True)
        rec = memoryview(raw)[EVENT_HEADER:]
        value = fn.decode_record(rec)
        caps = fn.decode_captures(rec) if getattr(fn, "captures", ()) else {}
        who = Who(tgid, tid, self._comm(comm), ns, cpu)
        if kind == 0:
            if self.errors:
                return None
            line = self._entry(fn, who, value, caps)
            return self._with_stack(line, raw, fn, tgid, tid) if flags & _STACK else line
        if self.errors and not self._failed(fn, value):
            return None
        line = self._exit(fn, who, value, None, None, caps)
        return line[:-1] + ', "paired": false}' if self.as_json else line

    def _with_stack(self, line: str, raw, fn, tgid: int, tid: int) -> str:
        """An entry's line with its stack (--stack)."""
        if self.stacks is None:
            return line
        return self._stack_shown(line, self._stack_of(raw, fn, tgid, tid))

    def _stack_of(self, raw, fn, tgid: int, tid: int) -> dict:
        """An entry's stack (--stack) as frames: its stack part starts after the data its
        decoder wrote. Taken at the entry, in the order of the thread's calls (the maps read
        then, a uretprobe's return addresses given back from the calls open then)."""
        try:
            return self.stacks.describe(raw, spec_format.event_size(fn.desc, 0), tgid, tid)
        except stack_wire.BadStack as e:
            raise BadEvent(f"{fn.name}: {e}") from None

    def _stack_shown(self, line: str, described: dict) -> str:
        """`line` with the frames under it, a line each, or a "stack" member of its JSON."""
        if self.as_json:
            return line[:-1] + ', "stack": ' + _ENCODE(self.stacks.as_json(described)) + "}"
        return "\n".join([line, *self.stacks.text(described)])

    def _lost_before(self, tid: int, flags: int) -> None:
        """The thread (or, unknown which, any thread) lost records before this one: its open
        calls are forgotten, so an exit after the loss shows no duration rather than one
        measured from another call's entry."""
        if flags & spec_format.EVENT_SOME_LOST:
            if not self._said_unnoted:
                self._said_unnoted = True
                prog.say("records were lost faster than the threads losing them "
                         "could be noted: exits are not paired with entries from here on (no "
                         "durations)", flush=True)
            self.open.forget_all()
        else:
            self.open.forget(tid)

    def _shape(self, fn) -> "_Shape":
        shape = self._shapes.get(fn)
        if shape is None:
            shape = self._shapes[fn] = _Shape(fn, self.bytes_as)
        return shape

    def _entry(self, fn, who, args, caps) -> str:
        shape = self._shape(fn)
        if self.as_json:
            line = [_json_head(who, shape.json_name, "entry"), ', "args": ', shape.json_args(args)]
            if caps:
                line += [', "captures": ', _json_captures(caps)]
            line.append("}")
            return "".join(line)
        return f"{self._prefix(who)}{fn.name}({shape.shown(args, caps)})"

    def _exit(self, fn, who, value, took, entry, caps, err: int = 0) -> str:
        shape = self._shape(fn)
        # A kernel function's name by its convention, with --errors only (as it always was).
        named = errno_of(fn, value, err, self.kernel) if self.errors or not self.kernel else 0
        name = errno.errorcode[named] if named else None
        if self.as_json:
            line = [_json_head(who, shape.json_name, "error" if self.errors else "exit"),
                    ', "return": ', str(value) if type(value) is int else _ENCODE(typed(value))]
            if name and not self.kernel:
                line.append(f', "errno": {{"value": {err}, "name": "{name}"}}')
            if caps:
                line += [', "captures": ', _json_captures(caps)]
            if took is not None:
                line.append(f', "duration_ns": {took}')
            if self.errors:
                line += [', "args": ', "null" if entry is None else shape.json_args(entry[1])]
                if entry is not None and entry[2]:
                    line += [', "entry_captures": ', _json_captures(entry[2])]
            line.append("}")
            return "".join(line)
        text = show(value, shape.ret_pointer)
        if caps:
            text += " " + ", ".join(f"{k}={show_captured(v, self.bytes_as)}"
                                    for k, v in caps.items())
        if name:
            text += f" {name}"
        if self.errors:
            args = "?" if entry is None else shape.shown(entry[1], entry[2])  # entry lost
            head = f"{fn.name}({args})"
        else:
            head = fn.name
        timing = "" if took is None else f" ({took / 1000:.3f} us)"
        return f"{self._prefix(who)}{head} -> {text}{timing}"

    def _prefix(self, who) -> str:
        return f"{who.comm[0]}[{who.tgid}] " if self.who else ""

    def flush_lines(self) -> bool:
        """Write the lines batched so far (and flush `out` where lines are live); False once
        the reader of `out` has gone away."""
        try:
            if self._lines and not self.gone:
                self._lines.append("")
                self.out.write("\n".join(self._lines))
            if self.flush and not self.gone:
                self.out.flush()
        except BrokenPipeError:
            self.gone = True
        self._lines.clear()
        return not self.gone


def _placed(general):
    """The handler (buf, at, end) of events the compiled handlers leave to `general(raw)`."""
    return lambda buf, at, end: general(buf[at:end])


class Who:
    """The event's thread; `comm` is (its text, that text as a JSON string)."""

    __slots__ = ("tgid", "tid", "comm", "ns", "cpu")

    def __init__(self, tgid, tid, comm, ns, cpu) -> None:
        self.tgid, self.tid, self.comm, self.ns, self.cpu = tgid, tid, comm, ns, cpu


def failed(fn, value) -> bool:
    """A negative errno (-1..-4095) from a signed integer return, or a NULL or ERR_PTR
    pointer."""
    if not fn.ret or not isinstance(value, int) or isinstance(value, bool):
        return False
    t = fn.ret.value.type
    if t.tag == "ptr":
        return value == 0 or value >= (1 << 8 * t.size) - MAX_ERRNO
    return t.tag == "int" and t.signed and -MAX_ERRNO <= value <= -1


# The returns a C library sets errno with: -1, NULL.
_SETS_ERRNO = frozenset({"-1", "null"})


def errno_of(fn, value, err: int, kernel: bool) -> int:
    """The errno an exit's return stands for, where it is known and has a name (0 where not):
    a kernel function's -1..-4095 from an integer return by the kernel's convention; a user
    function's -1 or NULL, by `err`, the error of the last system call its thread made inside
    the call (the exit's flags, EVENT_ERRNO_SHIFT). What is printed beside the return, and the
    dataset's errno column (recordings/errnos.py, the same rule over arrays)."""
    if not fn.ret or not isinstance(value, int) or isinstance(value, bool):
        return 0
    if kernel:
        code = -value if fn.ret.value.type.tag == "int" else 0
    else:
        code = err if failed_as(fn, value, _SETS_ERRNO) else 0
    return code if code in errno.errorcode else 0


def failed_as(fn, value, errors_are) -> bool:
    """Whether a user function's return is an error as `errors_are` (ERRORS_ARE's keys) says."""
    if not fn.ret or not isinstance(value, int) or isinstance(value, bool):
        return False
    t = fn.ret.value.type
    if t.tag == "ptr":
        return "null" in errors_are and value == 0
    if t.tag != "int" or not t.signed:
        return False
    return ("-1" in errors_are and value == -1) or ("negative" in errors_are and value < 0)


def errors_are(text: str) -> frozenset:
    """--errors=WHAT's comma list, checked: ValueError saying what it may be."""
    kinds = [k.strip().lower() for k in text.split(",")]
    bad = [k for k in kinds if k not in ERRORS_ARE]
    if bad:
        said = f"{bad[0]!r} is not one of" if bad[0] else "give one or more of"
        raise ValueError(f"--errors={text}: {said} {', '.join(ERRORS_ARE)} (a comma list)")
    return frozenset(kinds)


def chosen_errors(errors):
    """Options.errors' set of ERRORS_ARE's keys, where --errors=WHAT gave one (else None)."""
    return errors if isinstance(errors, frozenset) else None


def errors_value(argv: list) -> list:
    """argv with `--errors=WHAT` as `--errors --errors-are=WHAT` (argparse's `--errors` takes no
    value: one taking an optional value would take the program or file after a bare `--errors`
    as its value)."""
    return [x for a in argv for x in
            (("--errors", "--errors-are=" + a[len("--errors="):])
             if isinstance(a, str) and a.startswith("--errors=") else (a,))]


def _is_pointer(vdesc) -> bool:
    return vdesc is not None and vdesc.type.tag == "ptr"


class _Shape:
    """What every line of one function shares, made once: the argument names as text and as
    JSON keys, which values are pointers. Each event then costs its values only (the JSON
    encoder took 5 us a line on a dict of six arguments, most of an event's time)."""

    __slots__ = ("names", "pointers", "ret_pointer", "json_name", "json_keys", "bytes_as")

    def __init__(self, fn, bytes_as: str = "auto") -> None:
        self.bytes_as = bytes_as
        self.names = tuple(fn.names)
        self.pointers = tuple(_is_pointer(d) for d in fn.args)
        self.ret_pointer = _is_pointer(fn.ret.value if fn.ret else None)
        self.json_name = _ENCODE(fn.name)
        # Names that repeat (a broken BTF) keep the last value, as a dict of them would.
        self.json_keys = (tuple(_ENCODE(n) + ": " for n in self.names)
                          if len(set(self.names)) == len(self.names) else None)

    def shown(self, args, caps=None) -> str:
        """`name=value, ...`: an argument captured as a whole (its string) shows the capture in
        its place, and captures through it follow the arguments as `path=value`."""
        caps = caps or {}
        shown = [f"{n}={show_captured(caps[n], self.bytes_as)}" if n in caps else
                 f"{n}={(hex(v) if p else repr(v)) if type(v) is int else show(v, p)}"
                 for n, v, p in zip(self.names, args, self.pointers)]
        if caps:
            shown += [f"{path}={show_captured(v, self.bytes_as)}" for path, v in caps.items()
                      if path not in self.names]
        return ", ".join(shown)

    def json_args(self, args) -> str:
        if self.json_keys is None:
            return _ENCODE({n: typed(v) for n, v in zip(self.names, args)})
        return "{" + ", ".join([k + (str(v) if type(v) is int else _ENCODE(typed(v)))
                                for k, v in zip(self.json_keys, args)]) + "}"


def show_captured(value, bytes_as: str = "auto") -> str:
    """A capture as text: a string quoted (JSON's escapes), `...` after a truncated one; a
    buffer as show_bytes makes it; a value that could not be read as <why>."""
    if hasattr(value, "length") and isinstance(value, bytes):
        return show_bytes(value, bytes_as)
    if hasattr(value, "truncated"):  # json.dumps(ensure_ascii=False)'s text, its encoder made once
        return _QUOTED(str(value)) + ("..." if value.truncated else "")
    if hasattr(value, "reason"):
        return f"<{value.reason}>"
    return show(value)


BYTES_AS = ("auto", "text", "hex")  # --bytes
# What "auto" shows as text: printable ASCII and the whitespace of text protocols.
_TEXT = frozenset(range(0x20, 0x7f)) | {0x09, 0x0a, 0x0d}


def show_bytes(value, how: str = "auto") -> str:
    """A captured buffer (CapturedBytes) as text: quoted with JSON's escapes ("text"), or
    `hex:` and its bytes in hex ("hex"); "auto": text when every byte is printable ASCII, a
    tab or a line end, else hex. `...` after a buffer cut at the limit, and how long the call
    said it was."""
    data = bytes(value)
    if how == "hex" or (how == "auto" and not _TEXT.issuperset(data)):
        text = "hex:" + data.hex()
    else:
        text = _STRING(data.decode("latin-1"))
    if value.truncated:
        text += f"...({value.length} bytes)"
    return text


# One encoder for every line: json.dumps with any option makes a new one each call.
_ENCODE = json.JSONEncoder(allow_nan=False).encode


_STRING = json.encoder.encode_basestring_ascii  # what _ENCODE makes of one str, alone
_QUOTED = json.encoder.encode_basestring  # the same, non-ASCII characters kept


def _json_captures(caps: dict) -> str:
    # A whole captured string (the common capture) and an int are encoded alone, without a
    # dict for the encoder to walk; the same text.
    return "{" + ", ".join([
        _STRING(path) + ": " + (str(v) if type(v) is int else _STRING(v)
                                if isinstance(v, str) and not getattr(v, "truncated", False)
                                else _ENCODE(typed(v)))
        for path, v in caps.items()]) + "}"


def _json_head(who, json_name: str, kind: str) -> str:
    """A JSON line's opening, up to its kind, as the keys always come: written by hand, the
    same text json.dumps gives for them."""
    return (f'{{"timestamp": {who.ns}, "cpu": {who.cpu}, "pid": {who.tgid}, "tid": {who.tid}, '
            f'"comm": {who.comm[1]}, "function": {json_name}, "kind": "{kind}"')


def show(value, pointer: bool = False) -> str:
    if pointer and isinstance(value, int):
        return hex(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value))
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return repr(value)


def typed(value):
    """A decoded value as JSON: numbers stay numbers (pointers too), an enum is {"value",
    "name"}, bytes are hex, a value not captured is {"unavailable": why} or {"unread":
    address}."""
    if type(value) is int or isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):  # a captured string: marked when truncated
        if getattr(value, "truncated", False):
            return {"string": str(value), "truncated": True}
        return str(value)
    if isinstance(value, int):
        name = getattr(value, "name", None)
        if name is not None or type(value).__name__ == "Enumerator":
            return {"value": int(value), "name": name}
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (bytes, bytearray)):
        if hasattr(value, "length"):  # a captured buffer: its bytes in hex, and its length
            out = {"hex": bytes(value).hex(), "length": value.length}
            return out | {"truncated": True} if value.truncated else out
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if hasattr(value, "reason"):
        return {"unavailable": value.reason}
    if hasattr(value, "address"):
        return {"unread": value.address}
    return repr(value)
