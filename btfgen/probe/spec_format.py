"""The binary layouts BPF writes and Python reads, defined once.

`struct btfgen_op`, the head of `struct btfgen_spec` (its `ops` array follows), the head of
`struct btfgen_record` (its `data` follows) and the head of `btfgen trace`'s `struct
trace_event` (its `btfgen_record` follows), and the size of the tracer's specs map. The BPF
header prints the generic structs from these fields (templates/bpf_common.h.j2); the tracer's
event struct is printed from them into btfgen/trace/trace_event.h (`python -m
btfgen.probe.spec_format` writes it; a test checks the copy and compiles it); the Python side
packs and unpacks with the `struct` formats derived from them (the generated module's `spec()`,
the runtime's record header, the trace run side and `btfgen decode`). Byte order is the
target's, so the formats carry none.

Standard library only and importing nothing of btfgen: a generated module embeds this file's
text before the runtime's, and it travels with the rest of the run side (btfgen.probe) into
every trace directory; btfgen.decoder and btfgen.codegen import it from there.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

_CODES = {"__u8": "B", "__u16": "H", "__u32": "I", "__u64": "Q", "char": "s"}


class Field(NamedTuple):  # not a dataclass: generated modules run this text unregistered
    ctype: str  # one of _CODES
    name: str
    comment: str = ""
    count: int = 0  # an array of `count` elements (only char: bytes); 0 for a scalar

    @property
    def code(self) -> str:
        """The `struct` module's letter for the field (standard sizes, no padding)."""
        return f"{self.count}{_CODES[self.ctype]}" if self.count else _CODES[self.ctype]

    @property
    def declaration(self) -> str:
        return f"{self.ctype} {self.name}[{self.count}]" if self.count else \
            f"{self.ctype} {self.name}"


OP = (Field("__u16", "src"), Field("__u16", "dst"), Field("__u16", "size"),
      Field("__u8", "from"), Field("__u8", "space", "capture ops: 0 kernel, 1 user, 2 either"))
SPEC_HEAD = (
    Field("__u32", "btf_id"),
    Field("__u8", "nentry", "ops[0, nentry) run at entry"),
    Field("__u8", "nexit", "ops[nentry, nentry + nexit) run at exit"),
    Field("__u8", "ptr_size"),
    Field("__u8", "carry", "0, or 1 + entry data offset / 8 of the return pointer the exit needs"),
    Field("__u16", "entry_plan", "the entry's straight-line decoder; 0: the ops interpreter"),
    Field("__u16", "exit_plan", "the exit's straight-line decoder; 0: the ops interpreter"),
    Field("__u16", "entry_size", "record data bytes its entry's decoder writes (to 8)"),
    Field("__u16", "exit_size", "record data bytes its exit's decoder writes (to 8)"),
    Field("__u8", "carry_span", "0: the exit's data starts with the one word at carry; n: with "
          "a word saying it was kept, then the n words from carry"),
    Field("__u8", "pad"),
    Field("__u16", "pad2"),
)
# The most words an exit takes from its entry's record (carry_span), with the word saying they
# were kept: what the BPF side keeps a call, copied whole (generic.MAX_CARRY_SPAN).
CARRY_WORDS = 8
RECORD_HEAD = (
    Field("__u32", "btf_id"),
    Field("__u32", "kind", "0: entry, 1: exit"),
    Field("__u64", "failed", "bit i: operation i failed (its bytes are zero)"),
)
# Before each capture's bytes in the record's data (generic.CAP_ROOT writes it). The capture's
# ops keep their state here, not in BPF registers: the verifier then sees one state per op of
# the generic loop, where state carried in registers multiplied its paths past its limit.
CAPTURE_HEAD = (
    Field("__u8", "status", "0: not made, 1: read, 2: a NULL pointer, 3: a read faulted"),
    Field("__u8", "hop", "the pointer that was NULL or faulted: 0 the first, i after i loads"),
    Field("__u8", "space", "the memory the last read read: 0 kernel, 1 user"),
    Field("__u8", "pad"),
    Field("__u16", "len", "bytes read (a string's: with its NUL)"),
    Field("__u16", "pad2"),
    Field("__u64", "ptr", "the pointer in hand: the last one loaded"),
)
# The straight-line decoder every table numbers 1 (entry_plan, exit_plan): the register image,
# the argument (return) register words copied whole (btfgen/codegen/straight.py).
IMAGE_PLAN = 1


class Cookie(NamedTuple):
    """A function's attach cookie under mass attach, 64 bits: the key of its spec in the
    program's specs map (bits 0-31, the cookie as a __u32), and, for a function the register
    image decodes, its BTF id (bits 32-61) and a bit per kind (63: its entry, 62: its exit) on
    the image. A call with its kind's bit set is decoded with no lookup of its spec: what the
    record needs, its BTF id, is here. The bits are clear where the exit needs its entry (a
    carried return pointer) or the BTF id does not fit. The entry's is the sign bit, and the
    exit's the sign bit once shifted left by one: either is tested in one instruction."""

    key: int
    btf_id: int
    image: tuple[bool, bool]  # (entry, exit)

    ID_SHIFT = 32
    ID_BITS = 30
    ENTRY_BIT = 63  # the exit's is the next lower one

    @property
    def value(self) -> int:
        bits = self.image[0] << self.ENTRY_BIT | self.image[1] << (self.ENTRY_BIT - 1)
        return self.key | (self.btf_id << self.ID_SHIFT | bits if bits else 0)

    @classmethod
    def of(cls, key: int, head: dict) -> "Cookie":
        """The cookie of the function whose spec head (read_head) is `head`, at `key`."""
        if not 0 <= key < 1 << cls.ID_SHIFT:
            raise ValueError(f"spec key {key} does not fit an attach cookie's 32 bits")
        btf_id = head["btf_id"]
        if head["carry"] or btf_id >= 1 << cls.ID_BITS:
            return cls(key, 0, (False, False))
        image = (head["entry_plan"] == IMAGE_PLAN, head["exit_plan"] == IMAGE_PLAN)
        return cls(key, btf_id if any(image) else 0, image)

    @classmethod
    def from_value(cls, value: int) -> "Cookie":
        """The cookie whose 64 bits are `value`, as bpf_get_attach_cookie() gives it."""
        if not 0 <= value < 1 << 64:
            raise ValueError(f"attach cookie {value:#x} is not 64 bits")
        btf_id = value >> cls.ID_SHIFT & ((1 << cls.ID_BITS) - 1)
        image = (bool(value >> cls.ENTRY_BIT & 1), bool(value >> (cls.ENTRY_BIT - 1) & 1))
        return cls(value & ((1 << cls.ID_SHIFT) - 1), btf_id, image)


def cookie(key: int, spec: bytes, byte_order: str) -> int:
    """The attach cookie (Cookie) of the function whose spec is `spec`, at `key`."""
    return Cookie.of(key, read_head(spec, byte_order)).value


def cookies(specs: bytes, n: int, byte_order: str) -> list[int]:
    """cookie() of each of the `n` specs in `specs` (of one size, one after the other), each
    keyed by its place: Cookie.of's rule over the heads unpacked in one pass. (A dict and a
    Cookie a function cost a whole kernel's 43,000 about 1.1 s of attach in a TCG guest.)"""
    if not n:
        return []
    head = _HEADS[byte_order]
    if n >= 1 << Cookie.ID_SHIFT:
        raise ValueError(f"spec key {n - 1} does not fit an attach cookie's 32 bits")
    spec = struct.Struct(head.format + f"{len(specs) // n - head.size}x")
    at = {f.name: i for i, f in enumerate(SPEC_HEAD)}  # (no array field: one value each)
    i_id, i_carry, i_entry, i_exit = at["btf_id"], at["carry"], at["entry_plan"], at["exit_plan"]
    out = []
    top, shift, entry, ex = 1 << Cookie.ID_BITS, Cookie.ID_SHIFT, Cookie.ENTRY_BIT, IMAGE_PLAN
    for key, h in enumerate(spec.iter_unpack(memoryview(specs)[:n * spec.size])):
        btf_id, carry, entry_plan, exit_plan = h[i_id], h[i_carry], h[i_entry], h[i_exit]
        bits = 0 if carry or btf_id >= top else \
            (entry_plan == ex) << entry | (exit_plan == ex) << (entry - 1)
        out.append(key | btf_id << shift | bits if bits else key)
    return out


# `btfgen trace`: who made the call and when, before the call's btfgen_record.
EVENT_HEAD = (
    Field("__u32", "tgid"),
    Field("__u32", "pid", "the thread: entries and exits are paired by it"),
    Field("char", "comm", count=16),
    Field("__u64", "ns", "bpf_ktime_get_ns: CLOCK_MONOTONIC"),
    Field("__u32", "cpu"),
    Field("__u32", "flags", "EVENT_* bits: losses this thread's pairing must know of"),
)
# trace_event.flags. A record lost to a full ring buffer can be any thread's entry or exit, and
# pairing by thread would then close the wrong call: an exit paired with the entry of an earlier
# call whose exit was lost, its duration spanning both. So the BPF side marks the thread's next
# record, and user space forgets the calls that thread had open before pairing it.
EVENT_THREAD_LOST = 1  # this thread lost records since its previous one
EVENT_SOME_LOST = 2  # a record was lost whose thread could not be noted: any thread's may be
# Not losses: how a record of the BPF trampoline may be paired. The kernel's recursion check
# skips an entry or an exit program on its own (trace.bpf.c's trace_session), so:
EVENT_NO_ENTRY = 4  # an fsession's exit whose entry the kernel skipped: paired with nothing
EVENT_UNPAIRED = 8  # fentry.multi / fexit.multi: nothing tells such an exit, so none is paired
EVENT_NOT_PAIRED = EVENT_NO_ENTRY | EVENT_UNPAIRED
# The bytes of struct btfgen_record's data array: the most a record can hold. The BPF side sends
# a record's head and then only the data its function's decoder writes (SPEC_HEAD's entry_size
# and exit_size), so a record is as large as its values and captures: the size bounds one
# capture (below half of it, generic.OP_LIMIT: the BPF side masks an operation's offset and
# size by that), not what a call costs. A struct of it is a scratch per CPU (per thread for
# uprobes) on the BPF side; a reader that reserves one in a ring (examples/project) pays it
# per event.
DATA_SIZE = 8192
# Entries of the tracer's specs map: functions one trace directory can attach (the attach
# cookie is the index).
MAX_FUNCTIONS = 4096


def struct_format(fields: tuple[Field, ...]) -> str:
    """The fields' `struct` format without a byte-order prefix (so no padding either: the C
    structs are laid out without any)."""
    return "".join(f.code for f in fields)


def size_of(fields: tuple[Field, ...]) -> int:
    return struct.calcsize("<" + struct_format(fields))


def offset_of(fields: tuple[Field, ...], name: str) -> int:
    """Where field `name` starts."""
    for at, f in enumerate(fields):
        if f.name == name:
            return size_of(fields[:at])
    raise KeyError(name)


def structs(fields: tuple[Field, ...]) -> dict[str, struct.Struct]:
    """The fields' `struct.Struct` in each byte order, by its name ("little", "big")."""
    fmt = struct_format(fields)
    return {"little": struct.Struct("<" + fmt), "big": struct.Struct(">" + fmt)}


_HEADS = structs(SPEC_HEAD)
_EVENT_HEADS = size_of(EVENT_HEAD) + size_of(RECORD_HEAD)


def event_size(desc, kind: int) -> int:
    """The bytes of the `btfgen trace` event of function `desc` (the generated module's
    FunctionDesc) at `kind` (0: its entry, 1: its exit) that the BPF side sends: struct
    trace_event's head, the record's head and the data its decoder writes (a multiple of 8),
    what a reader finds as the record's length in the ring. The one place the run side learns
    it. A descriptor made before record sizes were (sizes None): the whole record, which its
    BPF side sent."""
    sizes = desc.record.sizes
    return _EVENT_HEADS + (DATA_SIZE if sizes is None else sizes[kind])


def spec_event_sizes(spec: bytes, byte_order: str) -> tuple[int, int]:
    """event_size's (entry, exit) for the function whose struct btfgen_spec is `spec` (its head
    says the data bytes the BPF side sends: the descriptor's sizes, the same numbers)."""
    head = read_head(spec, byte_order)
    return _EVENT_HEADS + head["entry_size"], _EVENT_HEADS + head["exit_size"]


def read_head(spec: bytes, byte_order: str) -> dict[str, int]:
    """A spec's head (struct btfgen_spec before its ops), field by name."""
    return dict(zip((f.name for f in SPEC_HEAD), _HEADS[byte_order].unpack_from(spec)))


TRACE_HEADER = "trace_event.h"  # beside trace.bpf.c, which includes it


def trace_header() -> str:
    """btfgen/trace/trace_event.h: the tracer's event struct and map size for trace.bpf.c."""
    body = "".join(f"\t{f.declaration};" + (f" /* {f.comment} */" if f.comment else "") + "\n"
                   for f in EVENT_HEAD)
    return ("/* Generated from btfgen/probe/spec_format.py (EVENT_HEAD, MAX_FUNCTIONS) by\n"
            " * `python -m btfgen.probe.spec_format`. DO NOT EDIT. */\n"
            "#ifndef BTFGEN_TRACE_EVENT_H\n#define BTFGEN_TRACE_EVENT_H\n"
            f"#define BTFGEN_TRACE_MAX_FUNCTIONS {MAX_FUNCTIONS}\n\n"
            "struct trace_event {\n" + body + "\tstruct btfgen_record rec;\n};\n"
            "#endif /* BTFGEN_TRACE_EVENT_H */\n")


if __name__ == "__main__":
    print(trace_header(), end="")
