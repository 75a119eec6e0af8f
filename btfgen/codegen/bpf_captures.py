"""The view model of a function's captures in the generated BPF header: `struct
btfgen_captures_F` (a member per capture, spelled out, and its status) and the straight-line
reads `btfgen_capture_F(a, c)` makes from the arguments `btfgen_entry_F` decoded (exit
captures, `$retval` paths: `struct btfgen_exit_captures_F`, `btfgen_capture_exit_F(r, c)`).

A companion struct rather than members of `struct btfgen_args_F`: a 256-byte string does not
fit twice on a 512-byte BPF stack, the argument struct is the save slot of every entry (its
layout, the filters over it and its map's value size stay as they are), and a BPF author puts
the captures where they fit (a ring-buffer reservation, a per-CPU array).

Offsets are those of the BTF given at generation time, fixed in the code: no CO-RE relocation
(the self-contained header's types carry sanitised names, which the loader could not match
with the kernel's), so the header is for the kernel build whose BTF made it.
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.btf import types as T
from btfgen.btf.walk import strip
from btfgen.codegen.cdecl import CTypes
from btfgen.codegen.names import Namespace, c_comment
from btfgen.typed import capture as typed_capture

SPACE = {typed_capture.KERNEL: "BTFGEN_SPACE_KERNEL", typed_capture.USER: "BTFGEN_SPACE_USER",
         typed_capture.EITHER: "BTFGEN_SPACE_EITHER"}
_SPACE_WORD = {typed_capture.KERNEL: "kernel", typed_capture.USER: "user",
               typed_capture.EITHER: "kernel, then user"}


@dataclass(frozen=True, slots=True)
class HopView:
    offset: int  # added to the pointer in hand before the load
    space: str  # BTFGEN_SPACE_*
    comment: str  # the pointer the load gives


@dataclass(frozen=True, slots=True)
class CaptureView:
    field: str  # the value's member
    status: str  # its struct btfgen_capture_status member
    comment: str
    decl: str | None  # the value member's declaration; None: unavailable (comment says why)
    root: str  # the address of the first pointer, in the decoded struct (`a` or `r`)
    hops: tuple[HopView, ...]
    kind: str  # "str", "copy" (bytes into the member) or "bits" (a bit-field, extracted)
    offset: int  # the final read: at the last pointer + offset
    size: int  # its bytes (a string: its array's, one more than kept to tell truncation)
    space: str
    limit: int = 0  # a string's characters kept
    shift_up: int = 0  # a bit-field: (raw << up) >> down, in 64 bits
    shift_down: int = 0
    signed: bool = False  # a bit-field sign-extended
    check: bool = False  # assert the member's size (its declaration names a vmlinux.h type)
    length: str = ""  # a buffer ("buf"): the expression of its length, in the decoded struct


def member_name(text: str) -> str:
    """A capture's member name from its path as written: `file->f_path.dentry->d_name.name`
    -> `file__f_path_dentry__d_name_name`, `*how` -> `how_pointee`, `argv[1]` -> `argv_1`
    (then made a unique C identifier by the caller's Namespace)."""
    star = text.startswith("*")
    name = text.lstrip("*").lstrip("$").replace(" ", "")
    name = name.replace("->", "__").replace(".", "_").replace("[", "_").replace("]", "")
    return name + "_pointee" if star else name


def capture_views(captures, fields: tuple[str | None, ...], ret_field: str | None,
                  unavailable: dict, ctypes: CTypes, big: bool) -> tuple[tuple[CaptureView, ...],
                                                           tuple[CaptureView, ...]]:
    """The entry captures' views and the exit ones'. `fields`: each parameter's member in
    `struct btfgen_args_F` (None: the placement could not read it, why in `unavailable` by
    index; None for the return value); `ret_field`: the return struct's member, or None."""
    names = {False: Namespace(), True: Namespace()}
    out: dict[bool, list[CaptureView]] = {False: [], True: []}
    for c in captures:
        ns = names[c.at_exit]
        field = ns.take(member_name(c.text))
        status = ns.take(f"{field}_status")
        holder = ret_field if c.param is None else fields[c.param]
        if c.buffer:
            why = _buffer_problem(c, fields)
            if why is not None:
                out[c.at_exit].append(_unavailable(c, field, status, why))
                continue
        if holder is None:
            why = unavailable.get(c.param, "not decoded")
            out[c.at_exit].append(_unavailable(c, field, status, why))
            continue
        where = "r" if c.at_exit else "a"
        root = f"(const char *)&{where}->{holder} + {c.within}"
        length = "" if not c.buffer else str(c.length.const) \
            if c.length.const is not None else f"a->{fields[c.length.param]}"
        out[c.at_exit].append(_view(c, field, status, root, ctypes, big, length))
    return tuple(out[False]), tuple(out[True])


def _buffer_problem(c, fields) -> str | None:
    """Why the header cannot read buffer `c` (its capture functions read one struct: the
    arguments at entry, the return value at exit); None: it can."""
    n = c.length
    if c.at_exit:
        return ("read at exit through an argument: the exit's capture function has the "
                "return value only (btfgen trace reads it; here, keep the pointer with "
                "btfgen_save_slot() and read it at exit)")
    if n.via is not None:
        return f"its length {n.text} is read through a pointer: capture it, then read the buffer"
    if n.const is None and fields[n.param] is None:
        return f"its length {n.text} is not decoded"
    return None


def _unavailable(c, field: str, status: str, why: str) -> CaptureView:
    comment = c_comment(f"{c.text}: unavailable: {why}")
    return CaptureView(field, status, comment, None, "", (), "copy", 0, 0, "", 0)


def _view(c, field: str, status: str, root: str, ctypes: CTypes, big: bool,
          length: str = "") -> CaptureView:
    hops = tuple(HopView(h.offset, SPACE[h.space], c_comment(h.name)) for h in c.hops)
    loads = f"{len(hops)} pointer load{'s' if len(hops) != 1 else ''}" if hops else \
        "no pointer load"
    space = SPACE[c.space]
    if c.buffer:
        n = c.length
        comment = c_comment(f"{c.text}: a buffer of up to {c.size} bytes, as many as {n.text} "
                            f"says, after {loads} ({_SPACE_WORD[c.space]} memory)")
        return CaptureView(field, status, comment, f"__u8 {field}[{c.size}]", root, hops, "buf",
                           0, c.size, space, limit=c.size, length=length)
    if c.string:
        size = typed_capture.record_bytes(c)
        comment = c_comment(f"{c.text}: a string of up to {c.size} characters after {loads} "
                            f"({_SPACE_WORD[c.space]} memory)")
        return CaptureView(field, status, comment, f"char {field}[{size}]", root, hops, "str",
                           c.offset, size, space, limit=c.size)
    decl = ctypes.declare(c.type, field)
    check = ctypes.external
    what = "a bit-field" if c.bit_size else "the whole pointee" if c.text.startswith("*") \
        else "a value"
    comment = c_comment(f"{c.text}: {what} of {c.size} bytes after {loads} "
                        f"({_SPACE_WORD[c.space]} memory)")
    if not c.bit_size:
        return CaptureView(field, status, comment, decl, root, hops, "copy", c.offset, c.size,
                           space, check=check)
    # The bytes are copied to the start of a 64-bit word: on a little-endian target they are
    # its low bytes and bit 0 is the first; big-endian: its high bytes, the first bit on top.
    up = c.bit_offset if big else 64 - c.bit_offset - c.bit_size
    return CaptureView(field, status, comment, decl, root, hops, "bits", c.offset, c.size,
                       space, shift_up=up, shift_down=64 - c.bit_size,
                       signed=_signed(c.type))


def _signed(t: T.Type) -> bool:
    s = strip(t)
    return bool(getattr(s, "signed", False))
