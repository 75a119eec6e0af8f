"""An event's line at the rate events come: made by a handler compiled once per function and
kind (entry or exit) and output mode (text or JSON, with or without who made the call, or
--errors).

Where every value of the kind is a whole integer, pointer, bool or enum at its own place in
the record and every capture a string read whole, one precompiled struct reads the event's
head, its record's head, the values and each capture's status and length at once, and one
format string makes the line. The handler is Python source made here and compiled (as
collections.namedtuple does): per event it runs only what depends on the event, with no loop
over values, no lookup of what a value is and no dict of arguments. With --errors, an entry is
kept as its bytes and an exit that did not fail prints nothing: neither is decoded. A handler
takes (buf, at, end), the event being buf[at:end]: a recording's records are read where they
lie in their span, no view made of each (one made and kept cost as much as reading its head).

Anything the handler does not make as output.Printer's general path would -- a value a failed
read left out, a capture that was not read, a record shorter than its decoder reads, names that
repeat, a failed call under --errors -- it hands back to that general path (`general(raw)`,
the event's bytes)
before doing anything else (no call opened or closed), so the lines are the general path's,
byte for byte (tests/probe/test_batch_lines.py compares them).

A bare handler (the text a recording's export puts in its own line) of integers, pointers,
bools and enums is made by the optional C module _btfgen_lines (lines.c) where it is installed:
about half of an exported event's time went to turning its values into digits. It is the same
handler, given the same pieces, and goes the general way for the same events
(tests/probe/test_line_extension.py compares the two); BTFGEN_PURE_PYTHON=1 leaves it unused.

Standard library only: part of the run side, copied into every trace directory (where
_btfgen_lines is used if the target's Python has it, else not).
"""

from __future__ import annotations

import json
import os
import re
import struct

from . import spec_format
from .event import (
    CAPTURE_HEADER,
    CAPTURE_LEN,
    CAPTURE_STATUS,
    DATA,
    HEAD_FORMAT,
    HEAD_ITEMS,
    MAX_ERRNO,
    head_format,
)

CAPTURE_READ = 1  # CAPTURE_HEAD's status of a capture that was read (the decoder's CAPTURE_OK)
TGID, TID, COMM, NS, CPU = (HEAD_ITEMS.index(n) for n in ("tgid", "pid", "comm", "ns", "cpu"))
FAILED = HEAD_ITEMS.index("failed")
_BARE_HEAD = head_format(("failed",))  # a bare handler's heads: `failed` alone (item 0)
_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
# Distinct strings a capture keeps its line text of (a path, a name: most repeat); past this
# many the memo starts again, so that a stream of distinct strings costs no more memory.
STRING_MEMO = 4096

# Compiled handler code kept by its source (_compiled).
CODE_MEMO = 4096
_CODE: dict = {}

# The C module's Line arguments this module gives (its INTERFACE).
LINE_INTERFACE = 2


def line_extension():
    """The C module making bare handlers, or None: absent, of another interface (a trace
    directory's copy of this module beside another btfgen's), or BTFGEN_PURE_PYTHON set."""
    if os.environ.get("BTFGEN_PURE_PYTHON"):
        return None
    try:
        import _btfgen_lines
    except ImportError:
        return None
    return _btfgen_lines if getattr(_btfgen_lines, "INTERFACE", None) == LINE_INTERFACE \
        else None


EXTENSION = line_extension()

_STRING = json.encoder.encode_basestring_ascii  # output._STRING: what json.dumps writes
_QUOTED = json.encoder.encode_basestring  # output._QUOTED: the same, non-ASCII kept


class _Field:
    """One item the struct reads: a value, or a capture's status or length."""

    __slots__ = ("offset", "code", "size")

    def __init__(self, offset: int, code: str) -> None:
        self.offset, self.code = offset, code
        self.size = struct.calcsize("<" + code)


def compile_handler(fn, kind: int, order: str, shape, general, *, as_json: bool, who: bool,
                    comm, comms: dict, open_calls, bare: bool = False, **_):
    """A function (event bytes) -> its line, for events of `fn` of `kind` (0 entry, 1 exit);
    None where this function's events all go the general way (a value that is not a whole
    integer, pointer, bool or enum in the record, a capture that is not a string, names that
    repeat). `shape`: output's _Shape of `fn`; `general(raw)`: the line the general path makes;
    `comm(bytes)`: a comm's (text, JSON text), kept in `comms`; `open_calls`: the printer's
    calls.OpenCalls. `bare`: the line without its head (JSON: the object's members past
    "kind", its braces left out; text: without who made the call) and no call opened or
    closed (an exit's line without a duration): what an export of paired calls puts in its own
    (recordings/callwalk.py), `general` giving the same."""
    desc = _desc(fn)
    if desc is None:
        return None
    if kind == 0:
        values, plans, names = desc.args, desc.record.entry, shape.names
    else:
        values = (desc.ret.value,) if desc.ret else ()
        plans, names = desc.record.exit, ()
    if len(plans) != len(values):
        return None
    caps = tuple(c for c in getattr(desc, "captures", ()) if c.at_exit == bool(kind))
    if len({c.name for c in caps}) != len(caps):
        return None  # the general path's dict keeps one of them
    if as_json and kind == 0 and shape.json_keys is None:
        return None
    env = {"general": general, "fn": fn, "comms_get": comms.get, "comm": comm,
           "enter": open_calls.enter, "exit_": open_calls.exit}
    fields, mask, shown, pieces = [], 0, [], []
    for n, (v, plan) in enumerate(zip(values, plans)):
        t = v.type
        code = _INT_CODES.get(t.size) if t.tag in ("int", "ptr", "bool", "enum") else None
        if code is None or plan is None or v.unavailable is not None or v.by_ref \
                or plan.data_off < 0:
            return None
        signed = t.tag in ("int", "enum") and t.signed
        fields.append(_Field(DATA + plan.data_off, code if signed else code.upper()))
        spec, expr, written, *extra = _value(t, n, signed, as_json, env)
        shown.append((spec, expr))
        pieces.append((written, fields[-1].offset, fields[-1].size, *extra))
        mask |= plan.op_mask
    strings = []
    for c in caps:
        if c.kind != "str" or c.head < 0:
            return None
        status = _Field(DATA + c.head + CAPTURE_STATUS, "B")
        length = _Field(DATA + c.head + CAPTURE_LEN, "H")
        fields += [status, length]
        strings.append((c, status, length))
        mask |= c.root_mask
    # One struct over the event: its heads, then the fields by offset (none may overlap).
    head = ("<" if order == "little" else ">") + (_BARE_HEAD if bare else HEAD_FORMAT)
    heads = 1 if bare else len(HEAD_ITEMS)  # the items the heads make
    made = _struct(head, heads, fields)
    if made is None:
        return None
    env["unpack"], item, at = made
    values = [(spec, expr.format(f"t[{item[id(f)]}]")) for (spec, expr), f in zip(shown, fields)]
    # What the struct reads is within what the decoder needs (the plans' and captures' ends).
    need = max(at, DATA + fn._needs[kind])
    # What the C module reads of each value, by the expression the format's argument is
    by_expr = {expr: piece for (_, expr), piece in zip(values, pieces)}
    if bare and not strings and EXTENSION is not None:
        line = _extension_handler(fn, kind, shape, names, values, by_expr, mask, need, order,
                                  general, as_json)
        if line is not None:
            return line
    c_lines = None
    if EXTENSION is not None:
        # The C module reads the values itself: the handler's struct then reads the heads and
        # the captures' status and length alone, and the whole one only where Python writes
        # the line (a line the module refuses).
        env["unpack_all"] = env["unpack"]
        env["unpack"], short, _ = _struct(head, heads, [f for _, *sl in strings for f in sl])
        item.update(short)
        c_lines = (by_expr, order, heads)
    return _source(fn, kind, shape, names, values, strings, item, mask, need, env,
                   as_json=as_json, who=who and not bare, bare=bare, c_lines=c_lines)


def _struct(head: str, heads: int, fields: list):
    """(unpack_from of one struct over the event: `head`, then `fields` by offset; each
    field's item in it, by id; where it ends), or None where two fields overlap."""
    fmt, at, item = [head], DATA, {}
    for f in sorted(fields, key=lambda f: f.offset):
        if f.offset < at:
            return None
        fmt.append(f"{f.offset - at}x{f.code}" if f.offset > at else f.code)
        at = f.offset + f.size
        item[id(f)] = heads + len(item)
    return struct.Struct("".join(fmt)).unpack_from, item, at


# A conversion of the formats _entry and _exit make (a literal % is doubled by _lit); one of
# no other kind leaves the handler to Python.
_CONVERSION = re.compile(r"%(%|d|#x|s|\.3f)?")
# The heads' integers a whole line shows (a bare one has none), by their expression in a
# handler: (the C module's kind, offset, size), as the struct reads them.
_HEAD_PIECES = {f"t[{n}]": ("d" if f.code.islower() else "u",
                            spec_format.offset_of(spec_format.EVENT_HEAD + spec_format.RECORD_HEAD,
                                                  f.name), struct.calcsize("<" + f.code))
                for n, f in enumerate(spec_format.EVENT_HEAD + spec_format.RECORD_HEAD)
                if f.code in ("b", "B", "h", "H", "i", "I", "q", "Q")}
_, FAILED_AT, FAILED_SIZE = _HEAD_PIECES[f"t[{FAILED}]"]  # the record head's `failed` mask
MAX_TEXTS = 64  # a Line's str arguments (lines.c)


def _cut(template: str, args: list, by_expr: dict, bare: bool):
    """The format and its arguments as the C module's pieces: the literal texts, each value's
    piece, each head integer's; any other argument (a comm, a capture's string, a duration)
    passed as a text, its expression made a str as the conversion would. (pieces, the texts'
    expressions), or None where a conversion or an argument does not fit."""
    made, text, at, texts = [], [], 0, []
    args = iter(args)
    for m in _CONVERSION.finditer(template):
        text.append(template[at:m.start()])
        at = m.end()
        conv = m.group(1)
        if conv == "%":
            text.append("%")
            continue
        arg = next(args, None)
        if conv is None or arg is None:
            return None
        piece = by_expr.get(arg)
        if piece is None and not bare and conv == "d":
            piece = _HEAD_PIECES.get(arg)
        if piece is None:
            if len(texts) == MAX_TEXTS:
                return None
            piece = ("a", len(texts), 0)
            texts.append(arg if conv == "s" else f'"%{conv}" % ({arg},)')
        made += ["".join(text), piece]
        text = []
    if next(args, None) is not None:
        return None
    made.append("".join(text) + template[at:])
    return [p for p in made if p != ""], texts


def _reads_heads(exprs: list, heads: int) -> bool:
    """Whether these expressions read of `t` the heads' items alone."""
    return all(int(n) < heads for e in exprs for n in re.findall(r"\bt\[(\d+)\]", e))


def _c_line(order: str, need: int, mask: int, pieces: list, general):
    """The C module's Line of these pieces, or None where it refuses one (a text it cannot
    hold as UTF-8, a number past its range): the Python handler then."""
    try:
        return EXTENSION.Line(order == "big", need, FAILED_AT, FAILED_SIZE, mask, pieces,
                              general)
    except (TypeError, ValueError, OverflowError):  # UnicodeEncodeError is a ValueError
        return None


def _extension_handler(fn, kind, shape, names, values, by_expr, mask, need, order, general,
                       as_json):
    """The bare handler _source would make, made by the C module whole: the same format cut
    at its conversions, each filled by the value's piece (nothing is captured: no text is
    passed). None where it cannot: the Python handler then."""
    if kind == 0:
        template, args = _entry(fn, shape, names, (), values, as_json, False, True)
    else:
        template, _, args = _exit(fn, shape, (), values, as_json, False, True)
    cut = _cut(template, args, by_expr, True)
    if cut is None or cut[1]:
        return None
    return _c_line(order, need, mask, cut[0], general)


def compile_errors_handler(fn, kind: int, order: str, shape, general, *, open_calls,
                           errors_are=None, every: bool = False, **_):
    """compile_handler's for --errors, where most calls print nothing: an entry is kept as
    its bytes, decoded only if its call fails (checked whole first: a record too short goes
    the general way, which refuses it, as at any entry); an exit whose return is a whole
    integer, pointer, bool or enum is tested as read, and only a failed call goes the general
    way (which prints it): by the kernel's convention, or, with `errors_are` (output.ERRORS_ARE's
    keys), as it says. `every`: every exit fails (a filter on $retval chose them). None: every
    event the general way."""
    desc = _desc(fn)
    if desc is None or (every and kind == 1):
        return None
    head = ("<" if order == "little" else ">") + HEAD_FORMAT
    env = {"general": general, "fn": fn, "enter": open_calls.enter, "exit_": open_calls.exit,
           "unpack": struct.Struct(head).unpack_from}
    body = [f"    if end - at < {DATA + fn._needs[kind]}:",
            "        return general(buf[at:end])"]
    if kind == 0:
        body += ["    t = unpack(buf, at)",
                 f"    enter(t[{TID}], fn, (t[{NS}], bytes(buf[at:end])))", "    return None"]
        return _compiled(body, env, "errors, entry")
    ret = desc.ret.value if desc.ret else None
    if ret is not None:
        rtype, plan = ret.type, desc.record.exit[0]
        code = _INT_CODES.get(rtype.size) if rtype.tag in ("int", "ptr", "bool", "enum") \
            else None
        if code is None or plan is None or ret.unavailable is not None or ret.by_ref \
                or plan.data_off < 0:
            return None
        signed = rtype.tag in ("int", "enum") and rtype.signed
        env["unpack"] = struct.Struct(head + (f"{plan.data_off}x" if plan.data_off else "")
                                      + (code if signed else code.upper())).unpack_from
        value = f"t[{len(HEAD_ITEMS)}]"
        body += ["    t = unpack(buf, at)", f"    if t[{FAILED}] & {plan.op_mask}:",
                 "        return general(buf[at:end])"]
        # output.failed: a NULL or ERR_PTR pointer, or -4095..-1 from a signed integer;
        # output.failed_as: what errors_are says.
        if errors_are is not None:
            test = None
            if rtype.tag == "ptr" and "null" in errors_are:
                test = f"{value} == 0"
            elif rtype.tag == "int" and rtype.signed and "negative" in errors_are:
                test = f"{value} < 0"
            elif rtype.tag == "int" and rtype.signed and "-1" in errors_are:
                test = f"{value} == -1"
            if test:
                body += [f"    if {test}:", "        return general(buf[at:end])"]
        elif rtype.tag == "ptr":
            body += [f"    if {value} == 0 or {value} >= {(1 << 8 * rtype.size) - MAX_ERRNO}:",
                     "        return general(buf[at:end])"]
        elif rtype.tag == "int" and rtype.signed:
            body += [f"    if {-MAX_ERRNO} <= {value} <= -1:",
                     "        return general(buf[at:end])"]
    else:
        body.append("    t = unpack(buf, at)")
    body += [f"    exit_(t[{TID}], fn)", "    return None"]
    return _compiled(body, env, "errors, exit")


def _desc(fn):
    """A generated Function's checked FunctionDesc, where it has one and says how many record
    bytes it reads of each kind (its _needs: a record shorter than that it refuses, never
    misreads, and so do the handlers, leaving it to the general path); else None."""
    desc = getattr(fn, "desc", None)
    return desc if desc is not None and hasattr(fn, "_needs") else None


def _compiled(body: list, env: dict, what: str):
    """The handler (buf, at, end) whose body is `body`, run in `env`. Functions of one layout
    (a whole kernel has tens of thousands, and a few thousand layouts) share its compiled
    code: compile() took 0.1 ms a handler, twice a function's first events."""
    source = "def handler(buf, at, end):\n" + "\n".join(body) + "\n"
    code = _CODE.get(source)
    if code is None:
        if len(_CODE) >= CODE_MEMO:
            _CODE.clear()
        code = _CODE[source] = compile(source, f"<btfgen line handler: {what}>", "exec")
    exec(code, env)  # noqa: S102 (integers only in the source: see _source)
    return env["handler"]


def _value(t, n: int, signed: bool, as_json: bool, env: dict) -> tuple:
    """How a value of type `t` is shown -- what output prints of what the decoder gives
    (runtime/readers.py) -- as (its % conversion, its argument: an expression of {}, the
    struct's item) and as the C module writes it (its kind, and a bool's texts or an enum's
    mapping)."""
    if t.tag == "int":
        return "%d", "{}", "d" if signed else "u"
    if t.tag == "ptr":
        return ("%d", "{}", "u") if as_json else ("%#x", "{}", "x")  # hex(v)
    if t.tag == "bool":  # any of its bytes set: True
        texts = ("false", "true") if as_json else ("False", "True")
        return "%s", '("%s", "%s")[{} != 0]' % texts, "b", texts
    enum = env[f"enum{n}"] = _Enum(t.names, as_json)
    return "%s", f"enum{n}[{{}}]", "e" if signed else "E", enum


class _Enum(dict):
    """An enum's value -> its text: output.typed's {"value", "name"} object in JSON, the
    decoder's Enumerator's repr in text. Kept for named values (a bounded set)."""

    __slots__ = ("names", "as_json")

    def __init__(self, names: dict, as_json: bool) -> None:
        super().__init__()
        self.names, self.as_json = names, as_json

    def __missing__(self, value: int) -> str:
        name = self.names.get(value)
        if self.as_json:
            text = '{"value": %d, "name": %s}' % (value, "null" if name is None else
                                                   _STRING(name))
        else:
            text = f"{name}({value})" if name else f"<enum {value}>"
        if name is not None:
            self[value] = text
        return text


def _source(fn, kind, shape, names, values, strings, item, mask, need, env, *, as_json, who,
            bare, c_lines=None):
    """The handler as Python source: only integers (indexes, offsets, masks) and constants of
    this module are written into it; every text of the function (names, which a recording
    brings and could make anything) is in the format strings, passed to it as values, each %
    of them doubled."""
    # handler(buf, at, end): the event is buf[at:end], read in place (a recording's walk and
    # printer make no view of each record); a capture's bytes stop at its end, as a view's would
    body = [f"    if end - at < {need}:", "        return general(buf[at:end])",
            "    t = unpack(buf, at)", f"    if t[{0 if bare else FAILED}] & {mask}:",
            "        return general(buf[at:end])"]
    caps = []  # the line's capture texts, by variable
    for n, (c, status, length) in enumerate(strings):
        first = DATA + c.head + CAPTURE_HEADER
        env[f"memo{n}_get"], env[f"string{n}"] = _string(c.size, as_json)
        taken = f"t[{item[id(length)]}] - 1"
        body += [f"    if t[{item[id(status)]}] != {CAPTURE_READ}:",
                 "        return general(buf[at:end])",
                 f"    b = bytes(buf[at + {first}:min(at + {first} + {taken}, end)])",
                 f"    s{n} = memo{n}_get(b)", f"    if s{n} is None:",
                 f"        s{n} = string{n}(b)"]
        caps.append((c.name, f"s{n}"))
    if (as_json or who) and not bare:
        body += [f"    c = comms_get(t[{COMM}])", "    if c is None:",
                 f"        c = comm(t[{COMM}])"]
    def line(template: str, args: list, indent: str = "    ") -> list:
        """The lines returning the line: the C module's where it can (None from it: a line
        it does not make, such as one past its buffer), else the format's."""
        if c_lines is None:
            return [f"{indent}return {_const(env, template)} % ({_items(args)})"]
        out = []
        cut = _cut(template, args, c_lines[0], bare)
        # The texts Python passes read the heads alone (t holds no value here).
        made = None if cut is None or not _reads_heads(cut[1], c_lines[2]) else \
            _c_line(c_lines[1], need, mask, cut[0], None)
        if made is not None:
            call = _const(env, made) + "(buf, at, end" + "".join(", " + e for e in cut[1]) + ")"
            out += [f"{indent}s = {call}", f"{indent}if s is not None:", f"{indent}    return s"]
        return out + [f"{indent}t = unpack_all(buf, at)",
                      f"{indent}return {_const(env, template)} % ({_items(args)})"]

    if kind == 0:
        if not bare:
            body.append(f"    enter(t[{TID}], fn, t[{NS}])")
        template, args = _entry(fn, shape, names, caps, values, as_json, who, bare)
        body += line(template, args)
    else:
        plain, timed, args = _exit(fn, shape, caps, values, as_json, who, bare)
        if bare:
            body += line(plain, args)
            return _compiled(body, env, "bare exit")
        body.append(f"    e = exit_(t[{TID}], fn)")
        took = f"(t[{NS}] - e)" + ("" if as_json else " / 1000")
        body += ["    if e is None:", *line(plain, args, "        "), *line(timed, args + [took])]
    return _compiled(body, env, ("bare " if bare else "") + ("entry" if kind == 0 else "exit"))


def _items(exprs: list) -> str:
    """A tuple's items as source (a 1-tuple's comma too)."""
    return "".join(e + ", " for e in exprs)


def _const(env: dict, text: str) -> str:
    """A name in the handler's globals for `text`."""
    name = f"T{sum(k.startswith('T') for k in env)}"
    env[name] = text
    return name


def _lit(text: str) -> str:
    """Text of a format string as itself."""
    return text.replace("%", "%%")


def _json_head(shape, kind: str) -> tuple[str, list]:
    """output._json_head's text as a format, and its arguments."""
    return ('{"timestamp": %d, "cpu": %d, "pid": %d, "tid": %d, "comm": %s, "function": '
            + _lit(shape.json_name) + f', "kind": "{kind}"',
            [f"t[{NS}]", f"t[{CPU}]", f"t[{TGID}]", f"t[{TID}]", "c[1]"])


def _who(who: bool) -> tuple[str, list]:
    """output.Printer._prefix as a format and its arguments."""
    return ("%s[%d] ", ["c[0]", f"t[{TGID}]"]) if who else ("", [])


def _entry(fn, shape, names, caps, values, as_json, who, bare):
    captured = dict(caps)
    if as_json:
        text, head = ("", None) if bare else _json_head(shape, "entry")
        text += (", " if text else "") + '"args": {' + ", ".join(
            _lit(k) + spec for k, (spec, _) in zip(shape.json_keys, values)) + "}"
        args = ([] if bare else head) + [expr for _, expr in values]
        if caps:
            text += ', "captures": {' + ", ".join(_lit(_STRING(p)) + ": %s" for p, _ in caps) \
                + "}"
            args += [v for _, v in caps]
        return text + ("" if bare else "}"), args
    text, args = _who(who)
    # output._Shape.shown: a captured argument shows its capture, the other captures follow.
    shown = []
    for name, (spec, expr) in zip(names, values):
        if name in captured:
            shown.append(_lit(name) + "=%s")
            args.append(captured[name])
        else:
            shown.append(_lit(name) + "=" + spec)
            args.append(expr)
    for path, v in caps:
        if path not in names:
            shown.append(_lit(path) + "=%s")
            args.append(v)
    return text + _lit(fn.name) + "(" + ", ".join(shown) + ")", args


def _exit(fn, shape, caps, values, as_json, who, bare):
    """(the format without a duration, the one with, their arguments but the duration)."""
    if values:
        spec, args = values[0][0], [values[0][1]]
    else:  # void: the decoder's None
        spec, args = ("null" if as_json else "None"), []
    if as_json:
        text, head = ("", None) if bare else _json_head(shape, "exit")
        text += (", " if text else "") + '"return": ' + spec
        args = args if bare else head + args
        if caps:
            text += ', "captures": {' + ", ".join(_lit(_STRING(p)) + ": %s" for p, _ in caps) \
                + "}"
            args += [v for _, v in caps]
        end = "" if bare else "}"
        return text + end, text + ', "duration_ns": %d}', args
    text, prefix = _who(who)
    text += _lit(fn.name) + " -> " + spec
    args = prefix + args
    if caps:
        text += " " + ", ".join(_lit(p) + "=%s" for p, _ in caps)
        args += [v for _, v in caps]
    # "%.3f" % (took / 1000): the digits of output's f"{took / 1000:.3f}".
    return text, text + " (%.3f us)", args


def _string(size: int, as_json: bool):
    """(the memo's get, a function making and keeping a capture's text) for a whole string of
    at most `size` characters: its bytes as read (the NUL-counting length less one) to what
    output prints of the decoder's CapturedString (decoder/runtime/captures.py)."""
    memo: dict = {}

    def string(b: bytes) -> str:
        text, truncated = b, len(b) > size
        if truncated:
            text = text[:size]
        if b"\0" in text:
            text = text.split(b"\0", 1)[0]
        s = text.decode("utf-8", "backslashreplace")
        if as_json:
            out = '{"string": ' + _STRING(s) + ', "truncated": true}' if truncated else \
                _STRING(s)
        else:
            out = _QUOTED(s) + ("..." if truncated else "")
        if len(memo) >= STRING_MEMO:
            memo.clear()
        memo[b] = out
        return out

    return memo.get, string
