"""The generic decoder's plan for one function: a short list of copy operations and where each
value lands in the record.

One bounded BPF routine runs these operations for every function (the table-driven decoder for
mass attach, after libbpf's USDT argument specs); user space decodes the record with the same
plan. Each operation copies `size` bytes into the record's data at `dst` from the ctx (`src` is a
ctx offset), from the stack (`src` is an offset from the entry SP), or through a pointer the
record already holds (`src` is the pointer's data offset).

A struct returned through a hidden pointer that the callee does not hand back (arm64's x8,
s390x's r2) can only be found with the pointer the entry saw. The entry copies that pointer into
its record (`carry` says where); the BPF program keeps it with the call and puts it at the exit
record's data offset 0, where the exit's FROM_PTR operation follows it. An exit capture rooted
at an argument (`buf[retval]`) has that argument's word carried the same way. Where an exit needs
more than one word of its entry (`SSL_read_ex: buf[*readbytes]`: buf and readbytes; a returned
struct's pointer beside an argument), the entry's record words from `carry` on are kept
(`carry_span` of them, MAX_CARRY_SPAN at most), and the exit's data starts with a word saying
they were kept (nonzero) and then those words.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from btfgen.decoder import runtime
from btfgen.probe import spec_format
from btfgen.layout import FunctionLayout, ProtoLayout, RegPiece, ValueLayout

FROM_CTX, FROM_STACK, FROM_PTR = 0, 1, 2
# Capture ops (btfgen.typed.capture), in this order for one capture: ROOT takes the pointer at
# data offset `src` and starts the capture's status head at `dst`; each HOP loads the next
# pointer from the one in hand + `src` (its head at `dst`); then one COPY (`size` bytes) or STR (a string of at
# most `size` bytes with its NUL) from the pointer in hand + `src` to data offset `dst`, right
# after the head. Their
# `space` says which memory a load reads (capture.KERNEL, USER, EITHER: kernel, then user).
# A capture's ops share the function's MAX_OPS with its values: that is the bound per function.
# A buffer (`PATH[LEN]`) ends in BUF instead: at most `size` bytes, as many as the integer at
# data offset `src` says (its width and signedness in `space`'s high bits: BUF_WIDTH_SHIFT,
# BUF_SIGNED; the bytes are read at the pointer in hand, offset 0); a length of zero or less
# reads nothing and sets the status CAPTURE_EMPTY.
CAP_ROOT, CAP_HOP, CAP_COPY, CAP_STR, CAP_BUF = 3, 4, 5, 6, 7
BUF_WIDTH_SHIFT = 2  # space bits 2-3: log2 of the length's bytes
BUF_SIGNED = 0x10  # space bit 4: the length is signed
CAPTURE_EMPTY = 4  # a buffer whose length was zero or less: nothing read
MAX_OPS = 32  # per function, entry and exit together: a power of two (the BPF side masks)
DATA_SIZE = spec_format.DATA_SIZE  # record data bytes; an op's dst and size are below half
OP_LIMIT = DATA_SIZE // 2
# The most entry record words an exit takes (spec_format.CARRY_WORDS, less the word saying they
# were kept), and the highest entry offset `carry`'s byte can name.
MAX_CARRY_SPAN = spec_format.CARRY_WORDS - 1
CARRY_LIMIT = 8 * 254
MIN_SHRUNK = 16  # a default string is shrunk to the room left down to this many characters
# Bit of the record's failed mask set when an exit needed a carried pointer that was not saved:
# defined once, by the runtime that reads it (it imports nothing, being copied into modules).
CARRY_MISSING_BIT = runtime.CARRY_MISSING.bit_length() - 1
CAPTURE_HEAD_SIZE = runtime.CAPTURE_HEAD_SIZE


@dataclass(frozen=True, slots=True)
class Op:
    source: int  # FROM_CTX | FROM_STACK | FROM_PTR
    src: int
    dst: int
    size: int
    space: int = 0  # capture ops: where a load reads

    @property
    def spelled(self) -> tuple:
        """As a generated module spells it: the space only where a capture op has one."""
        head = (self.src, self.dst, self.size, self.source)
        return head + (self.space,) if self.space else head


@dataclass(frozen=True, slots=True)
class ValuePlan:
    data_off: int  # where the value's bytes are; -1: only its pointer is in the record
    ptr_off: int  # by_ref: where the pointer is; else -1
    op_mask: int  # the ops (bit i = op i) that must succeed for the value to be good


@dataclass(frozen=True, slots=True)
class CapturePlan:
    head: int  # data offset of its status head (spec_format.CAPTURE_HEAD); the bytes follow
    root_mask: int  # the ops that read the argument it starts from
    size: int = -1  # its bytes where the plan gave it fewer than asked (a default string
    # shrunk to the room left); -1: as asked
    # A buffer's length: (data offset, bytes, signed, the head of the capture that read it or
    # -1, the record's failed bits that spoil it); a constant's is (-1, n, False, -1, 0).
    length: tuple = ()


@dataclass(frozen=True, slots=True)
class GenericPlan:
    entry_ops: tuple[Op, ...]
    exit_ops: tuple[Op, ...]
    entry: tuple[ValuePlan | None, ...]  # per argument (None: not in the record)
    exit: tuple[ValuePlan | None, ...]  # the return value, if any
    skipped: tuple[str, ...]  # why values were left out
    carry: int = -1  # entry data offset of the return pointer the exit needs; -1: none
    captures: tuple[CapturePlan | None, ...] = ()  # per capture asked (None: left out)
    carry_span: int = 0  # 0: the one word at carry; n: n words from carry, after a kept word

    @property
    def sizes(self) -> tuple[int, int]:
        """The record data bytes its entry's ops and its exit's write, each to the furthest
        byte rounded up to 8 (SPEC_HEAD's entry_size, exit_size): what the BPF side sends of
        the record. The exit of a function that carries a pointer also has it at offset 0,
        8 bytes whatever the pointer's size (btfgen_generic_exit). Where the register image
        decodes a kind, it writes more: straight.PlanTable.sizes."""
        entry, exit_ = data_end(self.entry_ops), data_end(self.exit_ops)
        return entry, max(exit_, 8 + 8 * self.carry_span) if self.carry >= 0 else exit_

    @property
    def carry_code(self) -> int:
        """`struct btfgen_spec`'s carry byte: 0, or 1 + the carried pointer's data offset / 8."""
        return 0 if self.carry < 0 else 1 + self.carry // 8


def piece_source(piece, byte_order: str) -> tuple[int, int]:
    """(source, src): where a piece's bytes are. A register piece is the least significant
    `size` bytes of its field: the field's high addresses on a big-endian target."""
    if isinstance(piece, RegPiece):
        return FROM_CTX, piece.ctx_offset + piece.skip(byte_order)
    return FROM_STACK, piece.stack


def _align8(n: int) -> int:
    return (n + 7) & ~7


def data_end(ops: tuple[Op, ...]) -> int:
    """The end of the furthest record data byte `ops` write, rounded up to 8: a capture's ROOT
    and HOP write its status head at `dst`, a STR at most `size` bytes (with its NUL)."""
    end = 0
    for op in ops:  # once or twice a function of a whole kernel: no max() or tuple a step
        source = op.source
        at = op.dst + (CAPTURE_HEAD_SIZE if source == CAP_ROOT or source == CAP_HOP else op.size)
        if at > end:
            end = at
    return (end + 7) & ~7


class _PlanBuilder:
    def __init__(self, byte_order: str, pointer_size: int, first_op: int):
        self.order, self.psize = byte_order, pointer_size
        self.ops: list[Op] = []
        self.first = first_op
        self.cursor = 0
        self.high = 0  # the end of the highest data byte an op writes
        self.skipped: list[str] = []

    def _copy(self, source: int, src: int, dst: int, size: int) -> int:
        """Add a copy; -> the bit of the op that does it. A stack copy that continues the last
        op at the same stride in the stack and in the record (the next stack argument) widens
        that op instead: the BPF side reads a run of stack arguments with one helper call, and
        the bytes between them land in record padding no op writes. A value whose op failed
        fails with every value the op carries, never reads as good."""
        if self.ops and source == FROM_STACK:
            last = self.ops[-1]
            end = last.dst + last.size
            if (last.source == FROM_STACK and end == self.high and dst >= end
                    and src - last.src == dst - last.dst and dst + size - last.dst < OP_LIMIT):
                self.ops[-1] = Op(FROM_STACK, last.src, last.dst, dst + size - last.dst)
                self.high = dst + size
                return 1 << (self.first + len(self.ops) - 1)
        self.ops.append(Op(source, src, dst, size))
        self.high = max(self.high, dst + size)
        return 1 << (self.first + len(self.ops) - 1)

    def value(self, v: ValueLayout, what: str, ret_at: int | None = None) -> ValuePlan | None:
        """`ret_at`: the return value's register is read at this ctx offset, whatever its own
        (a trampoline's return slot: CtxInfo.ret_slot)."""
        if v.unavailable is not None:
            return None
        if ret_at is not None and (len(v.pieces) != 1 or v.by_ref):
            self.skipped.append(f"{what}: not one slot")
            return None
        target_len = self.psize if v.by_ref else v.size
        budget = MAX_OPS - self.first - len(self.ops)
        needed = len(v.pieces) + (1 if v.by_ref else 0)
        if len(v.pieces) > budget or target_len >= OP_LIMIT:
            self.skipped.append(f"{what}: too large for the generic record")
            return None
        start = self.cursor
        one = v.pieces[0] if len(v.pieces) == 1 else None
        if not v.by_ref and isinstance(one, RegPiece) and one.value_offset == 0:
            # Where the whole register word would put its bytes (past the high ones on a
            # big-endian target): then the register image serves the function.
            start += one.skip(self.order)
        if start + target_len > OP_LIMIT:
            self.skipped.append(f"{what}: record full")
            return None
        mask = 0
        for p in v.pieces:
            source, src = piece_source(p, self.order)
            if ret_at is not None and source == FROM_CTX:
                src = ret_at + p.skip(self.order)
            mask |= self._copy(source, src, start + p.value_offset, p.size)
        self.cursor = _align8(start + target_len)
        if not v.by_ref:
            return ValuePlan(start, -1, mask)
        dst = self.cursor
        if needed > budget or v.size >= OP_LIMIT or dst + v.size > DATA_SIZE or dst >= OP_LIMIT:
            self.skipped.append(f"{what}: by-reference value too large, pointer only")
            return ValuePlan(-1, start, mask)
        mask |= self._copy(FROM_PTR, start, dst, v.size)
        self.cursor = _align8(dst + v.size)
        return ValuePlan(dst, start, mask)

    def clone(self) -> "_PlanBuilder":
        """A copy to try placements on (plan's room for the default strings)."""
        other = _PlanBuilder(self.order, self.psize, self.first)
        other.ops, other.skipped = list(self.ops), list(self.skipped)
        other.cursor, other.high = self.cursor, self.high
        return other

    def capture(self, c, root: ValuePlan | None, budget: int,
                length: tuple = ()) -> CapturePlan | None:
        """Ops reading what capture `c` points to, after the value it starts from (`root`):
        None, with the reason in `skipped`, when the record or the op table has no room. A
        default string the room left cannot hold whole (up to data byte `budget`) is shrunk to
        it (down to MIN_SHRUNK characters). `length`: a buffer's (CapturePlan.length), once
        placed."""
        from btfgen.typed.capture import record_bytes

        what = f"capture {c.text}"
        if root is None or root.data_off < 0:
            self.skipped.append(f"{what}: its argument is not in the record")
            return None
        head = self.cursor
        data = head + CAPTURE_HEAD_SIZE
        nbytes = record_bytes(c)
        size = -1
        room = min(DATA_SIZE, budget) - data
        if c.default and c.string and data < OP_LIMIT and MIN_SHRUNK + 2 <= room < nbytes:
            nbytes, size = room, room - 2
        if len(c.hops) + 2 > MAX_OPS - self.first - len(self.ops):
            self.skipped.append(f"{what}: more operations than the {MAX_OPS} of a function")
            return None
        if data >= OP_LIMIT or data + nbytes > min(DATA_SIZE, budget):
            # The budget named where it, not the record, is what is short (--capture-budget).
            short = budget < DATA_SIZE and data < OP_LIMIT and data + nbytes <= DATA_SIZE
            self.skipped.append(f"{what}: no room left in the record" +
                                (f" within the capture budget of {budget} bytes" if short
                                 else ""))
            return None
        if any(h.offset > 0xffff for h in c.hops) or c.offset > 0xffff:
            self.skipped.append(f"{what}: an offset past 64 KiB")
            return None
        self.ops.append(Op(CAP_ROOT, root.data_off + c.within, head, 0))
        for h in c.hops:
            self.ops.append(Op(CAP_HOP, h.offset, head, 0, h.space))
        if c.buffer and c.length.const is None:
            at, width, signed = length[0], length[1], length[2]
            how = c.space | (width.bit_length() - 1) << BUF_WIDTH_SHIFT | \
                (BUF_SIGNED if signed else 0)
            self.ops.append(Op(CAP_BUF, at, data, nbytes, how))
        else:
            self.ops.append(Op(CAP_STR if c.string else CAP_COPY, c.offset, data, nbytes,
                               c.space))
        self.cursor = _align8(data + nbytes)
        self.high = max(self.high, self.cursor)
        return CapturePlan(head, root.op_mask, size, length)

    def length(self, c, values: tuple, place_via) -> tuple | None:
        """Where buffer `c`'s length is in this record (CapturePlan.length), the capture that
        reads it placed first (`place_via`); None, with the reason in `skipped`."""
        n = c.length
        if n.const is not None:
            return (-1, n.const, False, -1, 0)
        if n.via is not None:
            got = place_via(n.via)
            if got is None:
                self.skipped.append(f"capture {c.text}: its length {n.text} has no room")
                return None
            return (got.head + CAPTURE_HEAD_SIZE, n.size, n.signed, got.head, got.root_mask)
        v = values[0] if n.param is None else values[n.param]
        if v is None or v.data_off < 0:
            self.skipped.append(f"capture {c.text}: its length {n.text} is not in the record")
            return None
        return (v.data_off, n.size, n.signed, -1, v.op_mask)

    def carried(self, v: ValueLayout, carry: int, at: int = 0) -> ValuePlan | None:
        """A value behind the pointer the entry carried over, which sits at data offset `at`
        (0, or in a span of words: after them all, where the cursor already is)."""
        if carry < 0:
            self.skipped.append("return value: no room for its pointer in the entry record")
            return None
        mask = 1 << CARRY_MISSING_BIT
        if v.size >= OP_LIMIT or self.first >= MAX_OPS:
            self.skipped.append("return value: by-reference value too large, pointer only")
            return ValuePlan(-1, at, mask)
        dst = max(_align8(self.psize), self.cursor)
        mask |= self._copy(FROM_PTR, at, dst, v.size)
        self.cursor = _align8(dst + v.size)
        return ValuePlan(dst, at, mask)


def record_bytes(c) -> int:
    from btfgen.typed.capture import record_bytes as of

    return of(c)


def _room_before(b: _PlanBuilder, named: list, place, values) -> int:
    """The most record bytes (a multiple of 8) that can go before the `named` captures with as
    many of them placed as with none before them."""

    def placed(shift: int) -> int:
        t = b.clone()
        t.cursor += shift
        return sum(place(t, c, values) is not None for _, c in named)

    if not named:  # the common case (btfgen trace's default strings alone): all the room
        return (DATA_SIZE - b.cursor) // 8 * 8
    want = placed(0)
    lo, hi = 0, (DATA_SIZE - b.cursor) // 8  # in 8-byte steps: placed(8 * lo) == want
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if placed(8 * mid) == want:
            lo = mid
        else:
            hi = mid - 1
    return 8 * lo


def plan(f: FunctionLayout | ProtoLayout, byte_order: str, pointer_size: int,
         captures: tuple = (), budget: int | None = None,
         ret_at: int | None = None) -> GenericPlan:
    """`captures` (btfgen.typed.capture.Capture) take what room the record has after the
    values, up to data byte `budget` (else the captures' own), in order. A capture read at
    exit from an argument (`buf[retval]`) has that argument's value carried from the entry,
    as a struct returned through a hidden pointer has that pointer (several words: a span).
    `ret_at`: a trampoline's ctx reads the return value at this offset (CtxInfo.ret_slot),
    not at its slot, whose index depends on the function; the record is the same either way."""
    if budget is None:
        budget = min((c.budget for c in captures), default=DATA_SIZE) if captures else DATA_SIZE
    b = _PlanBuilder(byte_order, pointer_size, 0)
    entry = tuple(b.value(a, f"argument {i}") for i, a in enumerate(f.args))
    cplans: dict[int, CapturePlan | None] = {}
    ret = f.ret
    carries = (ret is not None and ret.by_ref and not ret.at_exit
               and ret.unavailable is None)
    carry = -1
    if carries:
        # The pointer as a plain value of the entry record (no argument decodes it).
        pointer = replace(ret, by_ref=False, size=pointer_size)
        held = b.value(pointer, "return pointer")
        if held is not None:
            carry = held.data_off
    if not captures:  # most plans (every prototype of a kernel): none of what follows
        x = _PlanBuilder(byte_order, pointer_size, len(b.ops))
        exit_ = ((x.carried(ret, carry),) if carries else
                 (x.value(ret, "return value", ret_at),) if ret is not None else ())
        return GenericPlan(tuple(b.ops), tuple(x.ops), entry, exit_,
                           tuple(b.skipped + x.skipped), carry)
    # The arguments exit captures are rooted at (a buffer's, its length's out-pointer): their
    # values are carried from the entry. One word alone, where nothing else is carried, goes as
    # the returned struct's pointer does (in the session cookie where there is one); more, or
    # one beside that pointer, as a span of the entry record's words.
    roots: dict[int, int] = {}  # argument -> its entry data offset
    lost: dict[int, str] = {}  # argument -> why it cannot be carried
    aligned = True  # every root's pointer at the start of a word (the one-word way)
    for c in captures:
        for r in (c, c.length.via if c.buffer and c.length.via is not None else None):
            if r is None or not r.at_exit or r.param is None:
                continue
            v = entry[r.param]
            if v is None or v.data_off < 0:
                lost[r.param] = "it is not in the entry record"
                continue
            roots[r.param] = v.data_off
            aligned = aligned and v.data_off % 8 == 0 and r.within == 0
    if carries and carry < 0:
        lost.update({p: "the returned struct's pointer has no room in the entry record"
                     for p in roots})
        roots = {}
    single = not carries and len(roots) == 1 and aligned
    span = 0
    exit_at: dict[int, int] = {}  # argument -> the exit data offset of its carried value
    ret_at_exit = 0  # where the exit finds the returned struct's pointer
    if single:
        ((param, carry),) = roots.items()
        exit_at[param] = 0
    elif roots:
        words = {off // 8 for off in roots.values()} | ({carry // 8} if carries and carry >= 0
                                                         else set())
        lo, hi = min(words), max(words)
        # The words holding each root's bytes, whatever its size (a pointer is 8 at most).
        hi = max([hi] + [(off + pointer_size - 1) // 8 for off in roots.values()])
        if hi - lo + 1 > MAX_CARRY_SPAN or 8 * lo >= CARRY_LIMIT:
            why = (f"what the exit needs of its entry is more than {MAX_CARRY_SPAN} words "
                   "of the record apart" if hi - lo + 1 > MAX_CARRY_SPAN
                   else "it is too far into the entry record")
            lost.update({p: why for p in roots})
        else:
            span, carry0 = hi - lo + 1, 8 * lo
            exit_at = {p: 8 + off - carry0 for p, off in roots.items()}
            if carries:
                ret_at_exit = 8 + carry - carry0
            carry = carry0

    def root_of(c, values):
        if not c.at_exit:
            return values[c.param]
        if c.param is None:
            return values[0] if values else None
        at = exit_at.get(c.param)
        return None if at is None else ValuePlan(at, -1, 1 << CARRY_MISSING_BIT)

    def place(x, c, values):
        root = root_of(c, values)
        if root is None and c.at_exit and c.param is not None:
            x.skipped.append(f"capture {c.text}: {c.root} is not kept from entry to exit: "
                             + lost.get(c.param, "no room"))
            return None
        if not c.buffer:
            return x.capture(c, root, budget)
        length = x.length(c, values, lambda via: place(x, via, values))
        if length is None:
            return None
        return x.capture(c, root, budget, length)

    # What the user named comes first: the default strings take the room the named captures
    # leave, shrunk to it. They are laid out before those (a capture's head must start below
    # OP_LIMIT, so the room is the shift the named ones can take and all still fit).
    named = [(i, c) for i, c in enumerate(captures) if not c.at_exit and not c.default]
    unasked = [(i, c) for i, c in enumerate(captures) if not c.at_exit and c.default]
    def after(t) -> dict:  # the named ones, then the default strings (one may pass OP_LIMIT)
        got = {i: place(t, c, entry) for i, c in named}
        return got | {i: t.capture(c, entry[c.param], budget) for i, c in unasked}

    def before(t) -> dict:  # the default strings in the room the named ones leave, then those
        end = t.cursor + _room_before(t, named, place, entry)
        got = {i: t.capture(c, entry[c.param], min(budget, end)) for i, c in unasked}
        return got | {i: place(t, c, entry) for i, c in named}

    def strings(got: dict) -> int:
        return sum(record_bytes(c) if got[i].size < 0 else got[i].size
                   for i, c in unasked if got[i] is not None)

    # Whichever keeps more of the default strings (the named ones are the same either way).
    way = after
    if unasked and named and strings(after(b.clone())) < strings(before(b.clone())):
        way = before
    cplans.update(way(b))
    x = _PlanBuilder(byte_order, pointer_size, len(b.ops))
    exit_: tuple[ValuePlan | None, ...] = ()
    if exit_at:
        # The carried words (a word saying they were kept before a span): at offset 0, each 8
        # bytes whatever its value's size.
        x.cursor = 8 + 8 * span if span else 8
    if carries:
        exit_ = (x.carried(ret, carry, ret_at_exit),)
    elif ret is not None:
        exit_ = (x.value(ret, "return value", ret_at),)
    for i, c in enumerate(captures):
        if c.at_exit:
            cplans[i] = place(x, c, exit_)
    return GenericPlan(tuple(b.ops), tuple(x.ops), entry, exit_,
                       tuple(b.skipped + x.skipped), carry,
                       tuple(cplans[i] for i in range(len(captures))), span)
