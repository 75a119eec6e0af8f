"""Compare btfgen's placement with what the compiled code really did.

For each argument (at entry) and the return value (at the return address) read the bytes where
the layout says they are and compare them, padding masked, with the bytes the caller passed or
the target returned. A disagreement says where the value really was (searched in the captured
registers and memory), which is what whoever fixes an ABI description needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.layout import FunctionLayout, RegPiece, ValueLayout

from .capture import Capture
from .snapshot import MemoryError_, Snapshot

# Arches whose FP arguments and returns travel in FP/vector registers the trace ctx lacks.
HARD_FLOAT = {"x86_64", "arm64"}


@dataclass(frozen=True, slots=True)
class Finding:
    capture: Capture
    value: str  # "p3" or "ret"
    problem: str

    def report(self) -> str:
        c = self.capture
        return (f"{c.arch}: {c.func} {self.value}: {self.problem}\n"
                + "\n".join("    " + line for line in c.proto.describe().splitlines()))


@dataclass(slots=True)
class Tally:
    functions: int = 0
    values: int = 0  # arguments and return values compared
    agreed: int = 0
    unavailable: int = 0
    findings: list[Finding] = field(default_factory=list)


# -- masks ------------------------------------------------------------------------------------
def value_mask(t: T.Type, size: int, byte_order: str) -> bytes:
    """1-bits where `t`'s bytes carry its value (padding and unused bits clear)."""
    mask = bytearray(size)
    _mark(walk.strip(t), 0, mask, byte_order)
    return bytes(mask)


def _mark(t: T.Type, bit: int, mask: bytearray, order: str, depth: int = 0) -> None:
    if depth > 32:
        raise ValueError("type nested too deeply")
    t = walk.strip(t)
    if isinstance(t, T.Composite):
        for m in t.members:
            if m.bitfield_size:
                _bits(bit + m.bit_offset, m.bitfield_size, mask, order)
            else:
                _mark(m.type, bit + m.bit_offset, mask, order, depth + 1)
    elif isinstance(t, T.Array):
        step = measure.size_of(t.elem) * 8
        for i in range(t.nelems):
            _mark(t.elem, bit + i * step, mask, order, depth + 1)
    else:
        start = bit // 8
        for i in range(start, min(start + measure.size_of(t), len(mask))):
            mask[i] = 0xFF


def _bits(first: int, count: int, mask: bytearray, order: str) -> None:
    # BTF bit offsets count from the first byte's least significant bit on little-endian
    # targets and from its most significant bit on big-endian ones (as DWARF and gcc do).
    for k in range(first, first + count):
        if k // 8 < len(mask):
            mask[k // 8] |= (1 << (k % 8)) if order == "little" else (0x80 >> (k % 8))


def contains_float(t: T.Type, depth: int = 0) -> bool:
    t = walk.strip(t)
    if isinstance(t, T.Float):
        return True
    if isinstance(t, T.Composite) and depth < 32:
        return any(contains_float(m.type, depth + 1) for m in t.members)
    if isinstance(t, T.Array) and depth < 32:
        return contains_float(t.elem, depth + 1)
    return False


def same(found: bytes, expected: bytes, mask: bytes) -> bool:
    return len(found) == len(expected) and all(
        (f ^ e) & m == 0 for f, e, m in zip(found, expected, mask))


# -- reading a layout's pieces ------------------------------------------------------------
def low_bytes(value: int, width: int, size: int, order: str) -> bytes:
    """The least significant `size` bytes of a `width`-byte register, in target byte order."""
    raw = value.to_bytes(width, order)
    return raw[:size] if order == "little" else raw[width - size:]


def read_pieces(c: Capture, snap: Snapshot, entry_sp: int, pieces, size: int) -> bytes:
    m = c.machine
    out = bytearray(size)
    covered = 0
    for p in pieces:
        if isinstance(p, RegPiece):
            name = m.canonical(p.hwreg)
            if name not in snap.regs:
                raise LookupError(f"register {p.hwreg} was not captured")
            data = low_bytes(snap.regs[name], m.ptr, p.size, m.byte_order)
        else:
            data = snap.memory.read(entry_sp + p.stack, p.size)
        if p.value_offset + p.size > size:
            raise LookupError(f"piece {p} lies outside the {size}-byte value")
        out[p.value_offset:p.value_offset + p.size] = data
        covered += p.size
    if covered != size:
        raise LookupError(f"pieces cover {covered} of {size} bytes")
    return bytes(out)


def where(pieces, by_ref: bool = False) -> str:
    parts = []
    for p in pieces:
        at = p.hwreg if isinstance(p, RegPiece) else f"SP+{p.stack}"
        parts.append(f"{at}[{p.value_offset}:{p.value_offset + p.size}]")
    text = " ".join(parts) or "nowhere"
    return f"behind the pointer in {text}" if by_ref else text


# -- where a value really was -------------------------------------------------------------
def locate(c: Capture, snap: Snapshot, expected: bytes, mask: bytes) -> str:
    """Where the value's bytes are in `snap`: register chunks, stack offsets, pointers to it."""
    m = c.machine
    found = []
    stack_base, stack = snap.memory.regions[0]
    # The whole value in memory, and who points to it.
    probe_at, probe = _probe(expected, mask)
    addrs = []
    for hit in snap.memory.find(probe) if probe else []:
        start = hit - probe_at
        try:
            if same(snap.memory.read(start, len(expected)), expected, mask):
                addrs.append(start)
        except MemoryError_:
            pass
    # Stack hits first; a short value also matches by chance all over the data: a few will do.
    addrs.sort(key=lambda a: not (stack_base <= a < stack_base + len(stack)))
    for a in addrs[:4]:
        where_ = f"SP+{a - c.sp}" if stack_base <= a < stack_base + len(stack) else f"{a:#x}"
        refs = [r for r in m.regs if snap.regs[r] == a]
        for off in range(0, len(stack) - m.ptr + 1, m.ptr):
            if int.from_bytes(stack[off:off + m.ptr], m.byte_order) == a:
                refs.append(f"SP+{stack_base + off - c.sp}")
        found.append(f"whole value at {where_}"
                     + (f" (pointed to by {', '.join(refs)})" if refs else ""))
    # Register-sized chunks in registers (a value split over registers, or over reg + stack).
    for off in range(0, len(expected), m.ptr):
        n = min(m.ptr, len(expected) - off)
        want, msk = expected[off:off + n], mask[off:off + n]
        if not any(msk):
            continue
        regs = [r for r in m.regs if same(low_bytes(snap.regs[r], m.ptr, n, m.byte_order),
                                          want, msk)]
        if regs:
            found.append(f"bytes [{off}:{off + n}] in {'/'.join(regs)}")
        elif not addrs:
            hits = [h for h in snap.memory.find(_probe(want, msk)[1] or b"\xff" * 99)
                    if stack_base <= h < stack_base + len(stack)]
            if hits:
                found.append(f"bytes [{off}:{off + n}] near " +
                             ", ".join(f"SP+{h - c.sp}" for h in hits[:3]))
    if not any("SP+" in f or " in " in f for f in found):
        # Only the caller's source pattern (in the data) has it: a register the snapshot lacks.
        found.append("in no general register and not on the stack (an FP/vector register?)")
    return "; ".join(found)


def _probe(expected: bytes, mask: bytes) -> tuple[int, bytes]:
    """The longest run (up to 8) of fully significant bytes, to search memory for."""
    best = (0, b"")
    i = 0
    while i < len(expected):
        if mask[i] != 0xFF:
            i += 1
            continue
        j = i
        while j < len(expected) and mask[j] == 0xFF and j - i < 8:
            j += 1
        if j - i > len(best[1]):
            best = (i, expected[i:j])
        i = j
    return best


# -- the check ----------------------------------------------------------------------------
def _legit_unavailable(c: Capture, t: T.Type, is_ret: bool) -> bool:
    if not contains_float(t):
        return False
    # i386 returns float/double in st(0); its float arguments are on the stack.
    return c.arch in HARD_FLOAT or (c.arch == "i386" and is_ret)


def check_value(c: Capture, vl: ValueLayout, expected: bytes, label: str, tally: Tally) -> None:
    m = c.machine
    is_ret = label == "ret"
    mask = value_mask(vl.type, len(expected), m.byte_order)
    snap = c.exit if is_ret else c.entry
    tally.values += 1

    def fail(problem: str) -> None:
        tally.findings.append(Finding(c, label, problem))

    if vl.size != len(expected):
        return fail(f"btfgen says {vl.size} bytes, the compiler's sizeof is {len(expected)}")
    if vl.unavailable is not None:
        tally.unavailable += 1
        if not _legit_unavailable(c, vl.type, is_ret):
            fail(f"btfgen says unavailable ({vl.unavailable}); compiler put it: "
                 f"{locate(c, snap, expected, mask)}")
        return
    try:
        if vl.by_ref:
            ptr_snap = c.exit if (is_ret and vl.at_exit) else c.entry
            raw = read_pieces(c, ptr_snap, c.sp, vl.pieces, m.ptr)
            ptr = int.from_bytes(raw, m.byte_order)
            found = snap.memory.read(ptr, len(expected))
        else:
            found = read_pieces(c, snap, c.sp, vl.pieces, len(expected))
    except (LookupError, MemoryError_) as err:
        return fail(f"btfgen says {where(vl.pieces, vl.by_ref)}: {err}; compiler put it: "
                    f"{locate(c, snap, expected, mask)}")
    if same(found, expected, mask):
        tally.agreed += 1
        return
    fail(f"btfgen says {where(vl.pieces, vl.by_ref)}, which holds {found.hex()} instead of "
         f"{expected.hex()} (mask {mask.hex()}); compiler put it: "
         f"{locate(c, snap, expected, mask)}")


def check_function(c: Capture, layout: FunctionLayout, tally: Tally) -> None:
    tally.functions += 1
    if len(layout.args) != len(c.args):
        tally.findings.append(Finding(c, "args", f"btfgen has {len(layout.args)} parameters, "
                                      f"the prototype {len(c.args)}"))
        return
    for i, (vl, expected) in enumerate(zip(layout.args, c.args)):
        check_value(c, vl, expected, f"p{i}", tally)
    if (layout.ret is None) != (c.ret is None):
        tally.findings.append(Finding(c, "ret", "void-ness differs"))
    elif layout.ret is not None:
        check_value(c, layout.ret, c.ret, "ret", tally)


# -- running btfgen over the captures -----------------------------------------------------
def layouts(captures: list[Capture], ctx: str = "pt_regs") -> list[tuple[Capture, FunctionLayout]]:
    """btfgen's layout of every captured target, read from the BTF pahole made for it."""
    from btfgen.abi.arches import load_arch
    from btfgen.btf.reader import open_btf
    from btfgen.place import place_functions

    out = []
    by_object: dict = {}
    for c in captures:
        by_object.setdefault(c.btf_path, []).append(c)
    for path, group in by_object.items():
        btf = open_btf(str(path))
        funcs = []
        for c in group:
            found = btf.find_funcs(c.func)
            if len(found) != 1:
                raise LookupError(f"{path}: {len(found)} BTF FUNCs named {c.func}")
            funcs.append(found[0])
        placed = place_functions(btf, load_arch(group[0].arch), funcs, ctx=ctx)
        out += zip(group, placed.functions)
    return out


def check_arch(captures: list[Capture], ctx: str = "pt_regs") -> Tally:
    tally = Tally()
    for c, layout in layouts(captures, ctx):
        check_function(c, layout, tally)
    return tally
