"""`btfgen trace --count / --latency --by KEY`, the build's part: each function's key, made into
the `struct sum_keyspec` the BPF side reads (summary.bpf.h) and the manifest entry the run side
decodes keys with (btfgen.probe.summary).

A key is the thread's comm (`--by comm`), an argument (`--by 'f_int: c'`), or a capture path
(`--by 'vfs_read: file->f_path.dentry->d_name.name'`): the path is captured as `--capture`
would, and the key is the capture's bytes in the entry's record, so the generated decoder
decodes it (an enum by name, a string as text). A `char *` argument is keyed as the trace
prints it, by its string (a capture of the argument); `(void *)ARG` keys its pointer. A member
of a struct passed by value (`--by 'hl_tick: p.lo'`) is bytes of the argument's own value in the
record: no capture. `$retval` keys a call by its return value, made at the exit from the exit's
record (the call is then counted at its exit, as under a filter on $retval).
"""

from __future__ import annotations

import fnmatch
import re
import struct

from btfgen.probe import event
from btfgen.probe import summary as run_summary
from btfgen.typed import path as paths
from btfgen.typed.capture import is_string_pointer

# A string key's characters by default: the key is hashed on every call, and lives on the BPF
# stack (512 bytes, shared with the decoder's calls).
KEY_STRING_SIZE = 64
MAX_KEY = 200  # key bytes after the function's id and failed bits
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `(void *)ARG`: a `char *` argument keyed by its pointer, not by the string the trace prints
_AS_POINTER = re.compile(r"\(\s*void\s*\*\s*\)\s*")


class KeyError_(ValueError):
    """A --by that does not fit: one line naming the option and the column (exit 2)."""


class By:
    """One --by option: `comm`, or `FUNC: KEY, KEY` (FUNC a name or glob; several keys make one
    combined key, up to run_summary.PARTS)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.parts: list[Part] = []
        if text.strip() == "comm":
            self.func = "*"
            return
        func, colon, rest = text.partition(":")
        if not colon or not func.strip() or not rest.strip():
            raise KeyError_(f"--by {text!r}: column 1: expected `comm` or `FUNC: KEY, KEY` (an "
                            "argument, a member of one, a capture path or $retval)")
        self.func = func.strip()
        at = len(func) + 1  # where each key starts in `text` (0-based)
        for piece in rest.split(","):
            column = at + 1 + len(piece) - len(piece.lstrip())
            if not piece.strip():
                raise KeyError_(f"--by {text!r}: column {column}: an empty key")
            self.parts.append(Part(text, piece.strip(), column))
            at += len(piece) + 1
        if len(self.parts) > run_summary.PARTS:
            raise self.parts[run_summary.PARTS].error(
                f"a key of at most {run_summary.PARTS} parts")
        seen: dict[str, Part] = {}
        for part in self.parts:
            if part.name in seen:
                raise part.error(f"{part.name} is in this key already")
            seen[part.name] = part

    @property
    def comm(self) -> bool:
        return not self.parts

    @property
    def retval(self) -> bool:
        return any(p.retval for p in self.parts)

    def error(self, why: str, column: int = 1) -> KeyError_:
        return KeyError_(f"--by {self.text!r}: column {column}: {why}")


class Part:
    """One key of a --by (`tag`, `(void *)tag`, `p.lo`, `j->name`, `$retval`), at `column` of
    the option `text`."""

    def __init__(self, text: str, path: str, column: int) -> None:
        self.text, self.path, self.column = text, path, column
        self.pointer = False  # `(void *)ARG`: the argument's own value, whatever it points to
        # a member of an argument passed by value, per function: its bytes in the record
        self.members: dict[str, Member] = {}
        if cast := _AS_POINTER.match(self.path):
            self.pointer = True
            self.path = self.path[cast.end():]
            self.column += cast.end()
            if not _IDENT.fullmatch(self.path):
                raise self.error("(void *) keys an argument's own value: `(void *)ARG`")

    @property
    def retval(self) -> bool:
        return self.path == "$retval"

    @property
    def name(self) -> str:
        """The key's name in every output: `(void *)ARG` where the pointer was asked for."""
        return f"(void *){self.path}" if self.pointer else self.path

    def error(self, why: str, column: int | None = None) -> KeyError_:
        return KeyError_(f"--by {self.text!r}: column {column or self.column}: {why}")


class Member:
    """A key that is part of an argument's own value (`p.lo`, `p.pair[1]`): `size` bytes
    `within` it, found in the decoded argument by `steps` (member names and indexes)."""

    def __init__(self, param: int, within: int, size: int, steps: list) -> None:
        self.param, self.within, self.size, self.steps = param, within, size, steps


def parse(texts: list[str]) -> list[By]:
    return [By(t) for t in texts]


def captures(bys: list[By], funcs) -> dict[str, str]:
    """The --capture options the keys that are paths need (an argument's value is in every
    record already, but a `char *`'s string is not: the trace prints the string, so the key is
    its capture), each with the --by it is for: a capture's error is said as the --by's, at
    the same column (the option is spaced so). Raises KeyError_ for a function no traced one
    matches, or a path that cannot be a key."""
    out: dict[str, str] = {}
    for by in bys:
        if by.comm:
            continue
        matched = [f for f in funcs if fnmatch.fnmatchcase(f.name, by.func)]
        if not matched:
            raise by.error(f"no traced function {by.func!r}", 1)
        for part in by.parts:
            for f in _captured(part, matched):
                pad = " " * max(1, part.column - len(f.name) - 2)
                out[f"{f.name}:{pad}{part.path}"] = by.text
    return out


def _captured(part: Part, matched: list) -> list:
    """The functions among `matched` whose key `part` is a capture's."""
    if part.retval:
        return []  # keys() says when a function returns nothing
    if part.path.startswith(("$retval", "retval")):
        raise part.error("a key from the return value is `$retval`, the value itself (a "
                         "path from it is no key: it is made at entry)")
    if not _IDENT.fullmatch(part.path):
        return [] if _members(part, matched) else matched
    if part.pointer:
        return []  # keys() says when it is no argument
    return [f for f in matched
            if any(p.name == part.path and is_string_pointer(p.type, plain_char=True)
                   for p in f.proto.params)]


def _members(by: Part, funcs) -> bool:
    """Whether `by` is a member of an argument passed by value in each of `funcs` (kept in
    by.members): a path with no load, ending at no string (a `char *` member's string is a
    capture, as `--capture` takes it). A path that does not resolve is left to the capture,
    whose error names its column."""
    try:
        syntax = paths.parse(by.path, by.column)
    except paths.PathError:
        return False
    if syntax.star or syntax.memory or syntax.root in ("$retval", "retval"):
        return False
    for f in funcs:
        try:
            p = paths.resolve(f, syntax)
        except paths.PathError:
            return False
        if p.reads or is_string_pointer(p.type):
            return False
        if p.bit_size:
            raise by.error(f"{by.path} is a bitfield: a key is whole bytes of the argument "
                           f"(key on {syntax.root})")
        steps = [s.name if isinstance(s, paths.Member) else s.index for s in syntax.steps]
        by.members[f.name] = Member(p.param, p.within, p.size, steps)
    return True


def exit_keyed(bys: list[By], names: list[str]) -> frozenset[int]:
    """The functions (by index) whose key is made at their exit ($retval): counted there."""
    return frozenset(at for at, name in enumerate(names)
                     if any(b.retval and fnmatch.fnmatchcase(name, b.func) for b in bys))


def keys(bys: list[By], names: list[str], descs: list, pointer_size: int,
         byte_order: str, at_exit: frozenset[int] = frozenset()
         ) -> tuple[list[dict | None], bytes, int]:
    """(each function's key for the manifest, their sum_keyspec structs in cookie order, the
    key bytes the BPF side needs). `at_exit`: the functions (by index) whose calls are counted
    at exit, where their filter tests the return value (KEY_AT_EXIT in their keyspec)."""
    order = "<" if byte_order == "little" else ">"
    spec = struct.Struct(order + run_summary.KEYSPEC_FORMAT)
    per: list[dict | None] = []
    blob = bytearray()
    size = 8
    comm = any(b.comm for b in bys)
    for at, (name, desc) in enumerate(zip(names, descs)):
        flag = run_summary.KEY_AT_EXIT if at in at_exit else 0
        mine = [b for b in bys if not b.comm and fnmatch.fnmatchcase(name, b.func)]
        if len(mine) > 1:
            raise mine[1].error(f"{name} has a key already ({mine[0].text!r}): one --by a "
                                "function (a combined key: --by 'FUNC: KEY, KEY')")
        if mine:
            key, how, parts, used = _combined(mine[0], desc)
            if mine[0].retval:
                flag = run_summary.KEY_AT_EXIT
            size = max(size, used)
            blob += spec.pack(how | flag, 0, 0, 0, *parts)
        elif comm:
            key = {"by": "comm", "name": "comm"}
            size = max(size, 16)
            blob += spec.pack(run_summary.KEY_COMM | flag, 0, 0, 0, *_NO_PARTS)
        else:
            key = None
            blob += spec.pack(flag, 0, 0, 0, *_NO_PARTS)
        per.append(key)
    size = (size + 7) & ~7
    if size > MAX_KEY:
        raise KeyError_(f"--by: a key of {size} bytes, past the {MAX_KEY} the BPF side keeps "
                        f"(a string key: --string-size {KEY_STRING_SIZE} or less)")
    return per, bytes(blob), size


_NO_PARTS = (0,) * (5 * run_summary.PARTS)


def _combined(by: By, desc) -> tuple[dict, int, tuple, int]:
    """(the function's key for the manifest, its parts' how together, the parts' fields for
    the sum_keyspec, the key bytes they take): the parts one after the other."""
    keys, fields, how, dst = [], [], 0, 0
    for part in by.parts:
        key, (off, size, part_how, mask) = _key(part, desc)
        keys.append({**key, "dst": dst, "size": size})
        fields += [off, size, part_how, dst, mask]
        how |= part_how
        dst += size
    fields += _NO_PARTS[len(fields):]
    if len(keys) == 1:
        return {k: v for k, v in keys[0].items() if k not in ("dst", "size")}, how, \
            tuple(fields), dst
    return ({"by": "parts", "name": ", ".join(k["name"] for k in keys), "parts": keys}, how,
            tuple(fields), dst)


def _key(by: Part, desc) -> tuple[dict, tuple]:
    if by.retval:
        return _retval_key(by, desc)
    if desc.name in by.members:
        return _member_key(by, desc, by.members[desc.name])
    if not by.pointer and _IDENT.fullmatch(by.path) and any(
            c.name == by.path and c.kind == "str" and not c.at_exit for c in desc.captures):
        return _capture_key(by, desc)  # a `char *` argument: its string, as printed
    if _IDENT.fullmatch(by.path):
        names = [a.name for a in desc.args]
        if by.path not in names:
            raise by.error(f"no argument {by.path!r} in {desc.name} (its arguments: "
                           f"{', '.join(names) or 'none'})")
        at = names.index(by.path)
        plan = desc.record.entry[at] if at < len(desc.record.entry) else None
        value = desc.args[at]
        if plan is None or plan.data_off < 0 or value.unavailable is not None:
            raise by.error(f"{by.path} of {desc.name} is not in the record "
                           f"({value.unavailable or 'a struct passed by reference'}): key on "
                           "one of its members (ARG->member or ARG.member)")
        if by.pointer and value.type.tag != "ptr":
            raise by.error(f"{by.path} of {desc.name} is no pointer: key it as `{by.path}`")
        key = {"by": "arg", "name": by.name, "index": at}
        if value.type.tag == "ptr":
            key["pointer"] = True  # shown in hex, as the trace shows a pointer argument
        return key, (plan.data_off, value.size, run_summary.KEY_RECORD, plan.op_mask)
    return _capture_key(by, desc)


def _retval_key(by: Part, desc) -> tuple[dict, tuple]:
    if desc.ret is None:
        raise by.error(f"{desc.name} returns void: no $retval to key on")
    plan = desc.record.exit[0] if desc.record.exit else None
    value = desc.ret.value
    if plan is None or plan.data_off < 0 or value.unavailable is not None:
        raise by.error(f"the return value of {desc.name} is not in the exit's record "
                       f"({value.unavailable or 'a struct returned by reference'})")
    key = {"by": "retval", "name": by.path}
    if value.type.tag in ("ptr", "int"):
        key[value.type.tag] = True  # a pointer in hex; an int named as an errno (the kernel's)
    return key, (plan.data_off, value.size, run_summary.KEY_RETVAL, plan.op_mask)


def _member_key(by: Part, desc, m: Member) -> tuple[dict, tuple]:
    plan = desc.record.entry[m.param] if m.param < len(desc.record.entry) else None
    value = desc.args[m.param]
    if plan is None or plan.data_off < 0 or value.unavailable is not None:
        raise by.error(f"{desc.args[m.param].name} of {desc.name} is not in the record "
                       f"({value.unavailable or 'a struct passed by reference'}): no key in it")
    return ({"by": "member", "name": by.path, "index": m.param, "within": m.within,
             "steps": m.steps},
            (plan.data_off + m.within, m.size, run_summary.KEY_RECORD, plan.op_mask))


def _capture_key(by: Part, desc) -> tuple[dict, tuple]:
    caps = [c for c in desc.captures if c.name == by.path]
    if not caps:
        raise by.error(f"{by.path} is more than one value of {desc.name}: a key is one (a "
                       "path, or `*PATH` for one pointee)")
    c = caps[0]
    if c.at_exit:
        raise by.error("a key is made at entry: a path from $retval has no value then")
    if c.head < 0:
        raise by.error(f"{by.path} did not fit {desc.name}'s record")
    how = run_summary.KEY_RECORD | run_summary.KEY_CAPTURE
    size = event.CAPTURE_HEADER + c.size
    if c.kind == "str":
        how |= run_summary.KEY_STRING
        size += 2  # the character past the limit, and the NUL
    return {"by": "capture", "name": by.path}, (c.head, size, how, c.root_mask)
