"""Captures: what a function's pointer arguments point to, copied into the record at the call.

`--capture 'FUNC: PATH, PATH'` names them (`do_sys_openat2: how->flags`, `vfs_read:
file->f_path.dentry->d_name.name`, `vfs_read: *file`); `btfgen trace` adds a string capture of
every `char *` argument unasked (`char` only, as bpftrace's str(): an `unsigned char *` or a
`u8 *` is more often a buffer than a C string). A capture resolves once, against BTF, into the
pointer loads a decoder makes (`hops`) and one final read:

- a string, when the path ends at a pointer to a one-byte integer: at most `limit` bytes up to
  the NUL, marked truncated when the string is longer;
- else the value the path ends at (`how->flags`), or with a leading `*` the whole pointee
  (`*file`): one level deep. A struct's nested structs and arrays are inside its bytes and come
  with it; its pointers stay addresses (depth counts pointers followed, and `*ARG` follows
  one). Deeper values are paths, `*file->f_path.dentry`, or more stars: `**how` is `*how` and
  what each pointer in it points to (`expand`), `***how` one level more.

Each load says which memory it reads: user (the BTF `user` type tag), kernel (untagged in a BTF
that tags others), or unknown (try kernel, then user); the record says which one was used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from btfgen.btf import types as T
from btfgen.btf.walk import descend, strip
from btfgen.errors import BtfgenError
from btfgen.probe import spec_format
from btfgen.probe.options import CALL_BUDGET, STRING_SIZE
from btfgen.typed import path as paths

# A call's record holds what its captures need, within CALL_BUDGET bytes unless
# --capture-budget says otherwise; STRING_SIZE bytes of a string unless --value-size does
# (probe/options.py: the defaults, for every command that takes them).

# A string is read as up to limit + 1 characters and its NUL (one more than shown: that is how
# a string of exactly `limit` characters is told from a longer, truncated one), in one record
# operation (below generic.OP_LIMIT = 4,096 bytes).
MAX_STRING_SIZE = 4093


MAX_VALUE_SIZE = 4095  # a value's bytes, also in one operation (a buffer's at most too)
# The most --capture-budget may say: the generic record's data bytes.
MAX_BUDGET = spec_format.DATA_SIZE


def string_size_problem(size: int) -> str | None:
    """What is wrong with a --value-size (--string-size), for either command's one line; None:
    nothing."""
    if 1 <= size <= MAX_STRING_SIZE:
        return None
    return (f"--value-size: from 1 to {MAX_STRING_SIZE} bytes (one record operation: below "
            f"half the generic record's {MAX_BUDGET} bytes)")


def budget_problem(budget: int) -> str | None:
    """What is wrong with a --capture-budget; None: nothing."""
    if 64 <= budget <= MAX_BUDGET:
        return None
    return f"--capture-budget: from 64 to {MAX_BUDGET} bytes (the generic record's data)"

KERNEL, USER, EITHER = 0, 1, 2  # where a load reads: the space flag of a capture op


class CaptureError(ValueError):
    """A --capture option that does not fit: the message names the column (1-based) in it."""

    def __init__(self, message: str, column: int, option: str | None = None):
        super().__init__(f"column {column}: {message}")
        self.column = column
        self.option = option  # the --capture option it is about, once known

    def line(self) -> str:
        """The one line a command prints: the option as given, the column, what is wrong."""
        return f"--capture {self.option!r}: {self}" if self.option else str(self)


class CaptureOptionError(BtfgenError):
    """A capture that does not fit, as one line (`CaptureError.line`; exit status 2)."""


@dataclass(frozen=True, slots=True)
class Hop:
    offset: int  # added to the pointer in hand before the load
    space: int  # KERNEL | USER | EITHER
    name: str  # the pointer this load gives, as written (for "NULL at ...")


@dataclass(frozen=True, slots=True)
class Capture:
    text: str  # the path as written: the capture's name in every output
    param: int | None  # the argument it starts from; None: the return value (at exit)
    within: int  # bytes into the argument's own value where the first pointer is
    root: str  # that pointer, as written
    hops: tuple[Hop, ...]  # pointer loads after the first pointer
    string: bool  # a NUL-terminated string at the last pointer
    offset: int  # the final read: at the last pointer + offset
    size: int  # its bytes (a string's limit, without the NUL)
    space: int  # where the final read reads
    type: T.Type | None  # what it reads (None for a string)
    bit_offset: int = 0
    bit_size: int = 0
    # A buffer (`PATH[LEN]`): `size` bytes at most from the last pointer, as many as `length`
    # says at the call. The final read is then at offset 0 of the last pointer, as a string's.
    length: Length | None = None
    exit: bool = False  # read at exit though it starts from an argument (`buf[retval]`)
    default: bool = False  # a default string, not asked for: it gives way first (plan)
    budget: int = CALL_BUDGET  # the record data bytes this function's captures may take

    @property
    def at_exit(self) -> bool:
        return self.param is None or self.exit

    @property
    def buffer(self) -> bool:
        return self.length is not None


@dataclass(frozen=True, slots=True)
class Length:
    """Where a buffer's length is, at the call: `const` bytes; else argument `param`'s value
    (`size` bytes, `signed`), or the return value (param None, at exit), or the value another
    capture reads (`via`: `buf[hdr->len]`)."""

    text: str  # as written: the name a line gives it
    const: int | None = None
    param: int | None = None
    size: int = 0
    signed: bool = False
    via: Capture | None = None


@dataclass(frozen=True, slots=True)
class Sized:
    """`PATH[LEN]` as written: a buffer of LEN bytes at the pointer PATH ends at. A constant
    LEN after a path that is not a buffer's pointer is an index after all (`argv[1]`): `path`
    is then the whole text as a path."""

    base: paths.Syntax
    length: str  # as written
    column: int  # where it starts in the option (1-based)
    path: paths.Syntax | None  # the whole text as a path, where LEN is a constant

    @property
    def text(self) -> str:
        return f"{self.base.text}[{self.length}]"


@dataclass(frozen=True, slots=True)
class Request:
    """One --capture option before it meets a function's types."""

    func: str
    paths: tuple[paths.Syntax | Sized, ...]
    option: str


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what path.lark's NAME takes as a parameter
_HEAD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*:")
# A trailing `[LEN]` (before a `:user` / `:kernel`) whose LEN is not a plain index is a length.
_SIZED = re.compile(r"^(?P<base>.*?)\[(?P<len>[^\[\]]*)\]\s*(?P<mem>:\s*(?:user|kernel))?\s*$")
_INDEX = re.compile(r"\s*(0x[0-9a-fA-F]+|[0-9]+)\s*")
RETVALS = (paths.RETVAL, "retval")


def parse(option: str) -> Request:
    """`FUNC: PATH, PATH` -> a Request, or CaptureError naming the column."""
    m = _HEAD.match(option)
    if m is None:
        raise CaptureError("expected 'FUNC: PATH, PATH'", 1, option)
    syntaxes: list = []
    at = m.end()
    for part in option[at:].split(","):
        start = at + len(part) - len(part.lstrip())
        if not part.strip():
            raise CaptureError("an empty path", start + 1, option)
        try:
            syntaxes.append(_parse_part(part, at + 1))  # columns count from the part's start
        except paths.PathError as e:
            raise CaptureError(str(e).split(": ", 1)[1], e.column, option) from None
        at += len(part) + 1
    return Request(m.group(1), tuple(syntaxes), option)


def _parse_part(part: str, column: int) -> paths.Syntax | Sized:
    """A path, or `PATH[LEN]` whose LEN is not a constant (a constant is an index until the
    types say the path before it is a buffer's pointer: as_sized)."""
    sized = _SIZED.match(part)
    if sized is None or sized.group("base").strip().startswith("*") \
            or _INDEX.fullmatch(sized.group("len")):
        return paths.parse(part, column)
    length = sized.group("len")
    where = column + sized.start("len") + len(length) - len(length.lstrip())
    if not length.strip():
        raise paths.PathError("an empty length", where)
    base = paths.parse(sized.group("base") + (sized.group("mem") or ""), column)
    return Sized(base, length.strip(), where, None)


def as_sized(func: T.Func, syntax: paths.Syntax) -> Sized | None:
    """A path ending in a constant index through a buffer's pointer (`buf[16]`, `buf` a void *
    or a pointer to bytes) as a buffer of that many bytes; None: it is a path."""
    if syntax.star or not syntax.steps or not isinstance(syntax.steps[-1], paths.Index):
        return None
    last = syntax.steps[-1]
    text = syntax.text[:syntax.text.rindex("[")].rstrip()
    base = replace(syntax, steps=syntax.steps[:-1], text=text)
    try:
        p = paths.resolve(func, base)
    except paths.PathError:
        return None  # the whole path says what is wrong
    if p.bit_size or not is_buffer_pointer(p.type):
        return None
    return Sized(base, str(last.index), last.column, syntax)


def is_string_pointer(t: T.Type, plain_char: bool = False) -> bool:
    """A pointer to a one-byte integer (a C string's type); with `plain_char`, to `char` only."""
    p = strip(t)
    if not isinstance(p, T.Ptr):
        return False
    c = strip(p.type)
    if not isinstance(c, T.Int) or c.size != 1 or c.is_bool:
        return False
    return not plain_char or c.name == "char"


def space_of(user: bool | None) -> int:
    return EITHER if user is None else USER if user else KERNEL


def resolve(func: T.Func, syntax: paths.Syntax, limit: int = STRING_SIZE,
            at_exit: bool = False, separate_spaces: str | None = None,
            default: bool = False) -> Capture:
    """The loads and read that capture `syntax` in a call of `func`, or CaptureError.
    `separate_spaces`: as path.resolve's (the arch's name, for a kernel probe on s390x)."""
    try:
        p = paths.resolve(func, syntax, at_exit=at_exit, separate_spaces=separate_spaces)
        string = not p.whole and not p.bit_size and is_string_pointer(p.type)
        if string and p.pointee_user is None and separate_spaces:
            raise paths.memory_unknown(syntax, separate_spaces)
    except paths.PathError as e:
        raise CaptureError(str(e).split(": ", 1)[1], e.column) from None
    pointers = list(p.reads) if string else list(p.reads[:-1])
    if not string and not p.reads:
        raise CaptureError(f"{p.text} is the argument's own value, in every record already "
                           f"(a pointee is *{p.text} or {p.text}->member)",
                           syntax.root_column - syntax.star)
    names = _pointer_names(func, syntax, at_exit)
    hops = tuple(Hop(r.offset, space_of(r.user), names[i + 1])
                 for i, r in enumerate(pointers))
    if string:
        space = space_of(p.pointee_user)
        return Capture(p.text, p.param, p.within, names[0], hops, True, 0, limit, space, None,
                       default=default)
    last = p.reads[-1]
    size = p.size
    if size > MAX_VALUE_SIZE:
        raise CaptureError(f"{p.text}: {size} bytes, more than a record operation holds "
                           f"({MAX_VALUE_SIZE}); capture its members",
                           syntax.root_column - syntax.star)
    return Capture(p.text, p.param, p.within, names[0], hops, False, last.offset, size,
                   space_of(last.user), p.type, p.bit_offset, p.bit_size)


def is_buffer_pointer(t: T.Type) -> bool:
    """A pointer a `PATH[LEN]` reads bytes behind: to void or to a one-byte integer."""
    p = strip(t)
    if not isinstance(p, T.Ptr):
        return False
    c = strip(p.type)
    return isinstance(c, T.Void) or (isinstance(c, T.Int) and c.size == 1 and not c.is_bool)


def _integer(t: T.Type) -> tuple[int, bool] | None:
    """(size, signed) of an integer a length can be: an int or an enum of 1, 2, 4 or 8 bytes."""
    i = strip(t)
    if isinstance(i, (T.Int, T.Enum)) and i.size in (1, 2, 4, 8):
        if isinstance(i, T.Int) and i.is_bool:
            return None
        return i.size, i.signed
    return None


def resolve_buffer(func: T.Func, sized: Sized, limit: int = STRING_SIZE,
                   separate_spaces: str | None = None) -> Capture:
    """The loads and read of `PATH[LEN]`: at most `limit` bytes at the pointer PATH ends at,
    as many as LEN says at the call; read at exit when LEN is the return value or what a
    pointer argument points to then (`*readbytes`). CaptureError naming the column where the
    path or the length does not fit."""
    base = sized.base
    try:
        p = paths.resolve(func, base, separate_spaces=separate_spaces)
    except paths.PathError as e:
        raise CaptureError(str(e).split(": ", 1)[1], e.column) from None
    if p.bit_size or not is_buffer_pointer(p.type):
        raise CaptureError(f"{p.text} is {_spell(p.type)}: a buffer is a void * or a pointer "
                           "to bytes", base.root_column)
    if p.pointee_user is None and separate_spaces:
        e = paths.memory_unknown(base, separate_spaces)
        raise CaptureError(str(e).split(": ", 1)[1], e.column)
    length, exit_ = _length(func, sized, limit, separate_spaces)
    names = _pointer_names(func, base, False)
    hops = tuple(Hop(r.offset, space_of(r.user), names[i + 1]) for i, r in enumerate(p.reads))
    size = min(limit, length.const) if length.const is not None else limit
    return Capture(sized.text, p.param, p.within, names[0], hops, False, 0, size,
                   space_of(p.pointee_user), None, length=length, exit=exit_)


def _length(func: T.Func, sized: Sized, limit: int, separate_spaces: str | None
            ) -> tuple[Length, bool]:
    """A buffer's Length, and whether it is known only at exit."""
    text, column = sized.length, sized.column
    if _INDEX.fullmatch(text):
        n = int(text, 0)
        if n < 1:
            raise CaptureError("a length of 0 bytes captures nothing", column)
        return Length(text, const=n), False
    try:
        syntax = paths.parse(text, column)
    except paths.PathError as e:
        raise CaptureError(f"the length {text!r} is not an integer, an argument, retval or a "
                           "path", e.column) from None
    at_exit = syntax.root in RETVALS or syntax.star > 0
    if syntax.star > 1:
        raise CaptureError(f"the length {text!r}: one star, what a pointer holds at exit",
                           column)
    star = syntax.star == 1  # `*readbytes`: what the out-pointer holds once the call returned
    if star:
        syntax = replace(syntax, star=0, text=syntax.text[1:])
    try:
        lp = paths.resolve(func, syntax, at_exit=at_exit, separate_spaces=separate_spaces)
    except paths.PathError as e:
        raise CaptureError(f"the length: {str(e).split(': ', 1)[1]}", e.column) from None
    if star:
        ptr = strip(lp.type)
        if not isinstance(ptr, T.Ptr):
            raise CaptureError(f"the length {text!r}: {lp.text} is {_spell(lp.type)}, not a "
                               "pointer", column)
        whole = paths.resolve(func, replace(syntax, star=1, text="*" + syntax.text),
                              at_exit=at_exit, separate_spaces=separate_spaces)
        kind = _integer(whole.type)
        what = whole.type
    else:
        kind = None if lp.bit_size else _integer(lp.type)
        what = lp.type
    if kind is None:
        raise CaptureError(f"the length {text!r} is {_spell(what)}, not an integer", column)
    if not lp.reads and not star:  # an argument's or the return value's own value
        return Length(text, param=lp.param, size=kind[0], signed=kind[1]), at_exit
    via_syntax = replace(syntax, star=1, text="*" + syntax.text) if star else syntax
    via = resolve(func, via_syntax, limit, at_exit=False, separate_spaces=separate_spaces)
    return Length(text, size=kind[0], signed=kind[1], via=replace(via, exit=at_exit)), at_exit


def _spell(t: T.Type) -> str:
    from btfgen.btf.cnames import c_spelling

    try:
        return c_spelling(t)
    except T.TypeWalkError:
        return f"type {t.id}"


def _pointer_names(func: T.Func, syntax: paths.Syntax, at_exit: bool) -> list[str]:
    """The pointers a path goes through, as written: `file`, `file->f_path.dentry` for
    `file->f_path.dentry->d_name.name` (and the path itself, the last one, for a string)."""
    text = syntax.root
    names = []
    for k, step in enumerate(syntax.steps):
        if isinstance(step, paths.Arrow):
            names.append(text)
            text += f"->{step.name}"
        elif isinstance(step, paths.Member):
            text += f".{step.name}"
        else:
            # An index through a pointer loads it; one into an array does not.
            prefix = paths.Syntax(text, False, syntax.root, syntax.root_column, syntax.steps[:k])
            if isinstance(strip(paths.resolve(func, prefix, at_exit=at_exit).type), T.Ptr):
                names.append(text)
            text += f"[{step.index}]"
    names.append(text)
    return names


def default_strings(func: T.Func, limit: int = STRING_SIZE,
                    separate_spaces: str | None = None) -> tuple[Capture, ...]:
    """A string capture of each `char *` argument (the trace default). An argument whose BTF
    name no path can spell (not an identifier: a hostile or broken BTF) has none, and neither
    has one whose memory cannot be known (`separate_spaces`: `unguessable` says which)."""
    out = []
    for param in _string_params(func):
        if separate_spaces and _unguessable(param):
            continue
        out.append(resolve(func, paths.parse(param.name), limit, default=True))
    return tuple(out)


def _string_params(func: T.Func):
    return [p for p in func.proto.params
            if _NAME.fullmatch(p.name) and is_string_pointer(p.type, plain_char=True)]


def _unguessable(param: T.Param) -> bool:
    return paths.user_memory(strip(param.type)) is None


def unguessable_strings(funcs) -> list[str]:
    """`FUNC(ARG)` of each default string left out where address spaces overlap: for the note
    that says so."""
    return [f"{f.name}({p.name})" for f in funcs for p in _string_params(f) if _unguessable(p)]


# The most captures one `**PATH` stands for: a function's 32 record operations, shared with its
# arguments, hold about ten captures that follow a pointer, so more could never all be recorded.
MAX_EXPANDED = 16


def expand(func: T.Func, syntax: paths.Syntax, at_exit: bool = False,
           separate_spaces: str | None = None) -> tuple[list[paths.Syntax], list[str]]:
    """The captures `**PATH` stands for (a path with more than one leading star): `*PATH`, then
    for each pointer in that pointee (its members, and those of the structs nested in it), the
    string behind a `char *`, else that pointer's pointee with one star less: depth first, in
    member order. -> the paths, and what was left out and why (said, never silently dropped).

    Left out: pointers in unions and arrays (a union's pointer may not be the member in use:
    reading through it would print what is not there), pointees only declared in this BTF,
    and what passes MAX_EXPANDED. Pointers to void or to functions stay addresses, in the
    pointee's bytes: there is no type to read them by. A path with one star is itself."""
    if syntax.star < 2:
        return [syntax], []
    out: list[paths.Syntax] = []
    left: list[str] = []
    top = replace(syntax, star=1, text=syntax.text[syntax.star - 1:])

    def add(s: paths.Syntax) -> bool:
        if len(out) < MAX_EXPANDED:
            out.append(s)
            return True
        left.append(f"{s.text}: past the {MAX_EXPANDED} captures one path stands for")
        return False

    def visit(s: paths.Syntax, stars: int) -> None:
        if not add(s):
            return
        if stars < 2:
            return
        try:
            pointee = paths.resolve(func, s, at_exit=at_exit,
                                    separate_spaces=separate_spaces).type
        except paths.PathError:
            return  # resolve() says why, for this path, when it is captured
        try:
            for text, ptr in _pointers_in(pointee, s.text[1:] + "->", left):
                follow(text, ptr, stars)
        except T.TypeWalkError as e:  # a struct nested in itself: hostile BTF
            left.append(f"{s.text}: {e}")

    def follow(text: str, ptr: T.Ptr, stars: int) -> None:
        target = strip(ptr.type)
        if isinstance(target, (T.Void, T.FuncProto)):
            return
        if isinstance(target, T.Fwd):
            left.append(f"{text}: its type is only declared in this BTF, not defined")
            return
        if isinstance(target, T.Unknown):
            left.append(f"{text}: its type is of {target.reason}")
            return
        member = paths.parse(("" if is_string_pointer(ptr, plain_char=True) else "*") + text)
        member = replace(member, memory=syntax.memory)
        if member.star:
            visit(member, stars - 1)
        else:
            add(member)

    visit(top, syntax.star)
    return out, left


def _pointers_in(t: T.Type, prefix: str, left: list[str], depth: int = 0):
    """(path, pointer type) of each pointer among a struct's members and its nested structs'.
    `prefix` ends with the `->` or `.` its members follow; TypeWalkError past walk's depth."""
    s = strip(t)
    if isinstance(s, T.Union):
        if _has_pointer(s, depth):
            where = prefix[:-1] if prefix.endswith(".") else prefix[:-2]
            left.append(f"{where}: pointers in a union (which member is in use is not known)")
        return
    if not isinstance(s, T.Struct):
        return
    below = descend(s, depth)
    for m in s.members:
        if m.bitfield_size:
            continue
        mt = strip(m.type)
        if not m.name:  # an anonymous struct or union: C names its members as the parent's
            yield from _pointers_in(mt, prefix, left, below)
            continue
        if not _NAME.fullmatch(m.name):  # a broken or hostile BTF: no path can spell it
            if _has_pointer(mt, below):
                left.append(f"{prefix}{m.name!r}: not a name a path can spell")
            continue
        here = prefix + m.name
        if isinstance(mt, T.Ptr):
            yield here, mt
        elif isinstance(mt, T.Composite):
            yield from _pointers_in(mt, here + ".", left, below)
        elif isinstance(mt, T.Array) and _has_pointer(mt, below):
            left.append(f"{here}: pointers in an array")


def _has_pointer(t: T.Type, depth: int = 0) -> bool:
    """Whether a value of `t` holds a pointer (TypeWalkError past walk's depth)."""
    s = strip(t)
    if isinstance(s, T.Ptr):
        return True
    if isinstance(s, T.Array):
        return _has_pointer(s.elem, descend(s, depth))
    if isinstance(s, T.Composite):
        below = descend(s, depth)
        return any(_has_pointer(m.type, below) for m in s.members)
    return False


def for_functions(funcs, requests: list[Request], limit: int = STRING_SIZE,
                  strings: bool = False, separate_spaces: str | None = None,
                  notes: list[str] | None = None,
                  budget: int = CALL_BUDGET) -> dict[str, tuple[Capture, ...]]:
    """Each function's captures (by name): its `requests` in the order asked, then the default
    strings when `strings` (what the user named comes first in the record: a default string
    gives way, shrinking first, where the budget runs out). A request for a function not among
    `funcs`, or a path that does not fit one, is a CaptureError naming the option.
    `separate_spaces`: path.resolve's. `notes` gets a line for each capture a `**PATH` left
    out, and why. `budget`: the record data bytes a call's captures may take."""
    by_name: dict[str, T.Func] = {}
    for f in funcs:
        by_name.setdefault(f.name, f)
    out: dict[str, list[Capture]] = {}
    for r in requests:
        f = by_name.get(r.func)
        if f is None:
            raise CaptureError(f"{r.func!r} is not among the functions traced", 1, r.option)
        mine = out.setdefault(r.func, [])
        for asked in r.paths:
            sized = asked if isinstance(asked, Sized) else as_sized(f, asked)
            if sized is not None:
                try:
                    got = resolve_buffer(f, sized, limit, separate_spaces)
                except CaptureError as e:
                    e.option = r.option
                    raise
                mine[:] = [d for d in mine if d.text != got.text]
                mine.append(replace(got, budget=budget))
                continue
            at_exit = asked.root in RETVALS
            expanded, left = expand(f, asked, at_exit, separate_spaces)
            for k, s in enumerate(expanded):
                try:
                    c = resolve(f, s, limit, at_exit=at_exit, separate_spaces=separate_spaces)
                except CaptureError as e:
                    if k == 0:  # the path as asked: the option is wrong
                        e.option = r.option
                        raise
                    left.append(f"{s.text}: {str(e).split(': ', 1)[1]}")
                    continue
                mine[:] = [d for d in mine if d.text != c.text]
                mine.append(replace(c, budget=budget))
            if notes is not None:
                notes += [f"{r.func}: {asked.text} leaves out {why}" for why in left]
    if strings:
        for name, f in by_name.items():
            # Asked for by name, a default string is not made again (its memory may be named).
            asked_for = {c.text for c in out.get(name, ())}
            caps = [c if budget == CALL_BUDGET else replace(c, budget=budget)
                    for c in default_strings(f, limit, separate_spaces)
                    if c.text not in asked_for]
            if caps:
                out.setdefault(name, []).extend(caps)
    return {k: tuple(v) for k, v in out.items() if v}


def for_options(funcs, options: list[str], limit: int = STRING_SIZE, strings: bool = False,
                separate_spaces: str | None = None,
                budget: int = CALL_BUDGET) -> tuple[dict, list[str]]:
    """`--capture` options (and `--capture-strings`) resolved for `funcs`, as both commands
    take them: (for_functions' captures, the lines saying what `**PATH`s left out), or one
    CaptureOptionError naming the option and the column."""
    if problem := string_size_problem(limit) or budget_problem(budget):
        raise CaptureOptionError(problem)
    notes: list[str] = []
    try:
        found = for_functions(funcs, [parse(option) for option in options], limit, strings,
                              separate_spaces=separate_spaces, notes=notes, budget=budget)
    except CaptureError as e:
        raise CaptureOptionError(e.line()) from None
    return found, notes


def record_bytes(c: Capture) -> int:
    """The bytes its read writes into the record (a string: the limit, one more, the NUL; a
    buffer: at most its limit)."""
    return c.size + 2 if c.string else c.size
