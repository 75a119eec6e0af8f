""".eh_frame: the call frame information (CFI) every object keeps for exceptions, read with the
standard library (the run side has no pyelftools): its CIEs and FDEs, and the row of the CFA
table at an address, the rules `unwind.py` follows from a frame to its caller.

The format is DWARF's .debug_frame with GCC's changes (the LSB's "Exception Frames"): a CIE id
of 0, a CIE pointer relative to where it is read, augmentation data ('z', 'R' the pointer
encoding of the FDEs' addresses, 'P', 'L', 'S'), pointers encoded by DW_EH_PE_* bytes."""

from __future__ import annotations

import bisect
import struct
from typing import NamedTuple

# A register's rule in a row: where its value at the caller is.
UNDEFINED, SAME, OFFSET, VAL_OFFSET, REGISTER, EXPRESSION = range(6)


class CfiError(ValueError):
    """CFI this reader cannot follow: one line."""


class Row(NamedTuple):
    """The CFA rule (a register plus an offset; cfa_reg None where a DWARF expression gives
    it, which is not followed) and each register's rule (rule, operand) at one address."""

    cfa_reg: int | None
    cfa_offset: int
    rules: dict  # register -> (rule, operand)
    ra: int  # the return address's column


class _Cie(NamedTuple):
    code_align: int
    data_align: int
    ra: int
    encoding: int  # the FDEs' address encoding ('R'), DW_EH_PE_absptr without one
    augmented: bool  # 'z': FDEs have augmentation data
    initial: bytes  # initial instructions


class _Fde(NamedTuple):
    start: int
    end: int
    cie: _Cie
    program: bytes


class EhFrame:
    """One object's .eh_frame (`data`, loaded at `addr`), its FDEs by address."""

    def __init__(self, data: bytes, addr: int, order: str, wide: bool) -> None:
        self.data, self.addr, self.wide = data, addr, wide
        self._e = "<" if order == "little" else ">"
        self._cies: dict[int, _Cie] = {}
        fdes = []
        at = 0
        while at + 4 <= len(data):
            length, = struct.unpack_from(self._e + "I", data, at)
            if length == 0:  # the terminator
                break
            head = 4
            if length == 0xffffffff:
                length, = struct.unpack_from(self._e + "Q", data, at + 4)
                head = 12
            body = at + head
            end = body + length
            if end > len(data):
                break
            cie_id, = struct.unpack_from(self._e + "I", data, body)
            if cie_id:
                try:
                    fde = self._fde(body, end, body - cie_id)
                except (CfiError, struct.error, IndexError):
                    fde = None
                if fde is not None and fde.end > fde.start:
                    fdes.append(fde)
            at = end
        fdes.sort(key=lambda f: f.start)
        self._starts = [f.start for f in fdes]
        self._fdes = fdes
        # rows already worked out, by address: a loop's calls unwind through the same few
        self._rows: dict[int, Row | None] = {}

    def _cie(self, at: int) -> _Cie:
        cie = self._cies.get(at)
        if cie is not None:
            return cie
        length, = struct.unpack_from(self._e + "I", self.data, at)
        head = 4 if length != 0xffffffff else 12
        if head == 12:
            length, = struct.unpack_from(self._e + "Q", self.data, at + 4)
        end = at + head + length
        p = at + head + 4  # after the CIE id
        version = self.data[p]
        p += 1
        aug_end = self.data.index(b"\0", p)
        aug = self.data[p:aug_end].decode(errors="replace")
        p = aug_end + 1
        if "eh" in aug:
            p += 8 if self.wide else 4
        code_align, p = _uleb(self.data, p)
        data_align, p = _sleb(self.data, p)
        if version == 1:
            ra, p = self.data[p], p + 1
        else:
            ra, p = _uleb(self.data, p)
        encoding = 0
        if aug.startswith("z"):
            n, p = _uleb(self.data, p)
            q = p
            for c in aug[1:]:
                if c == "R":
                    encoding = self.data[q]
                    q += 1
                elif c == "P":
                    enc = self.data[q]
                    _, q = self._pointer(q + 1, enc)
                elif c == "L":
                    q += 1
                elif c not in "SB":
                    break  # an augmentation not known: its data is skipped as a whole
            p += n
        elif aug:
            raise CfiError(f"a CIE with augmentation {aug!r}")
        cie = self._cies[at] = _Cie(code_align, data_align, ra, encoding, aug.startswith("z"),
                                    self.data[p:end])
        return cie

    def _fde(self, body: int, end: int, cie_at: int) -> _Fde:
        cie = self._cie(cie_at)
        start, p = self._pointer(body + 4, cie.encoding)
        size, p = self._pointer(p, cie.encoding & 0x0f)
        if cie.augmented:
            n, p = _uleb(self.data, p)
            p += n
        return _Fde(start, start + size, cie, self.data[p:end])

    def _pointer(self, at: int, enc: int) -> tuple[int, int]:
        """The pointer encoded by DW_EH_PE `enc` at `at`, and where it ends."""
        if enc == 0xff:  # DW_EH_PE_omit
            return 0, at
        kind, app = enc & 0x0f, enc & 0x70
        e = self._e
        if kind == 0x00:
            fmt = "Q" if self.wide else "I"
            value, = struct.unpack_from(e + fmt, self.data, at)
            after = at + struct.calcsize(fmt)
        elif kind in (0x01, 0x09):
            value, after = (_uleb if kind == 0x01 else _sleb)(self.data, at)
        else:
            fmt = {0x02: "H", 0x03: "I", 0x04: "Q", 0x0a: "h", 0x0b: "i", 0x0c: "q"}.get(kind)
            if fmt is None:
                raise CfiError(f"pointer encoding {enc:#x}")
            value, = struct.unpack_from(e + fmt, self.data, at)
            after = at + struct.calcsize(fmt)
        if app == 0x10:  # DW_EH_PE_pcrel: from where the pointer is
            value += self.addr + at
        elif app:
            raise CfiError(f"pointer encoding {enc:#x}")
        return value & ((1 << (64 if self.wide else 32)) - 1), after

    def row(self, pc: int) -> Row | None:
        """The CFA table's row at address `pc` (the object's own addresses); None where no
        FDE covers it. (Rows are shared: not to be changed.)"""
        try:
            return self._rows[pc]
        except KeyError:
            row = self._rows[pc] = self._row(pc)
            return row

    def _row(self, pc: int) -> Row | None:
        i = bisect.bisect_right(self._starts, pc) - 1
        if i < 0 or not self._fdes[i].start <= pc < self._fdes[i].end:
            return None
        fde = self._fdes[i]
        cie = fde.cie
        state = _State()
        self._run(cie.initial, cie, state, None, fde.start)
        initial = dict(state.rules)
        self._run(fde.program, cie, state, pc, fde.start, initial)
        return Row(state.cfa_reg, state.cfa_offset, state.rules, cie.ra)

    def _run(self, program: bytes, cie: _Cie, st: "_State", pc: int | None, loc: int,
             initial: dict | None = None) -> None:
        """Run the CFA `program` from `loc` until the row holding `pc` (all of it: None)."""
        d, p, n = program, 0, len(program)
        ca, da = cie.code_align, cie.data_align
        while p < n:
            op = d[p]
            p += 1
            high, low = op & 0xc0, op & 0x3f
            advance = None
            if high == 0x40:
                advance = low * ca
            elif high == 0x80:
                off, p = _uleb(d, p)
                st.rules[low] = (OFFSET, off * da)
            elif high == 0xc0:
                st.restore(low, initial)
            elif op == 0x00:
                pass
            elif op == 0x01:
                new, p = self._pointer_in(d, p, cie.encoding)
                advance = new - loc
            elif op in (0x02, 0x03, 0x04):
                size = {0x02: 1, 0x03: 2, 0x04: 4}[op]
                advance = int.from_bytes(d[p:p + size], "little" if self._e == "<" else "big")
                advance *= ca
                p += size
            elif op in (0x05, 0x11, 0x14, 0x15):  # offset(_extended)(_sf), val_offset(_sf)
                reg, p = _uleb(d, p)
                off, p = (_sleb if op in (0x11, 0x15) else _uleb)(d, p)
                st.rules[reg] = (VAL_OFFSET if op in (0x14, 0x15) else OFFSET, off * da)
            elif op == 0x06:
                reg, p = _uleb(d, p)
                st.restore(reg, initial)
            elif op in (0x07, 0x08):
                reg, p = _uleb(d, p)
                st.rules[reg] = (UNDEFINED if op == 0x07 else SAME, 0)
            elif op == 0x09:
                reg, p = _uleb(d, p)
                other, p = _uleb(d, p)
                st.rules[reg] = (REGISTER, other)
            elif op == 0x0a:
                st.stack.append((dict(st.rules), st.cfa_reg, st.cfa_offset))
            elif op == 0x0b:
                if st.stack:
                    st.rules, st.cfa_reg, st.cfa_offset = st.stack.pop()
            elif op in (0x0c, 0x12):  # def_cfa(_sf)
                st.cfa_reg, p = _uleb(d, p)
                off, p = (_sleb if op == 0x12 else _uleb)(d, p)
                st.cfa_offset = off * (da if op == 0x12 else 1)
            elif op == 0x0d:
                st.cfa_reg, p = _uleb(d, p)
            elif op in (0x0e, 0x13):  # def_cfa_offset(_sf)
                off, p = (_sleb if op == 0x13 else _uleb)(d, p)
                st.cfa_offset = off * (da if op == 0x13 else 1)
            elif op == 0x0f:  # def_cfa_expression: not followed
                size, p = _uleb(d, p)
                p += size
                st.cfa_reg = None
            elif op in (0x10, 0x16):  # expression, val_expression
                reg, p = _uleb(d, p)
                size, p = _uleb(d, p)
                p += size
                st.rules[reg] = (EXPRESSION, 0)
            elif op == 0x2e:  # GNU_args_size
                _, p = _uleb(d, p)
            elif op == 0x2f:  # GNU_negative_offset_extended
                reg, p = _uleb(d, p)
                off, p = _uleb(d, p)
                st.rules[reg] = (OFFSET, -off * da)
            elif op == 0x2d:  # AARCH64_negate_ra_state (the return address signed: stripped
                pass          # where it is read, unwind.py)
            else:
                raise CfiError(f"CFA instruction {op:#x}")
            if advance is not None:
                if pc is not None and loc + advance > pc:
                    return
                loc += advance

    def _pointer_in(self, d: bytes, p: int, enc: int) -> tuple[int, int]:
        # DW_CFA_set_loc's operand, as an FDE's start is read (pc-relative to the program's
        # bytes is not known here: absolute encodings only)
        if enc & 0x70:
            raise CfiError("DW_CFA_set_loc with a relative encoding")
        kind = enc & 0x0f
        fmt = {0x00: "Q" if self.wide else "I", 0x03: "I", 0x04: "Q", 0x0b: "i"}.get(kind)
        if fmt is None:
            raise CfiError(f"pointer encoding {enc:#x}")
        value, = struct.unpack_from(self._e + fmt, d, p)
        return value, p + struct.calcsize(fmt)


class _State:
    __slots__ = ("cfa_reg", "cfa_offset", "rules", "stack")

    def __init__(self) -> None:
        self.cfa_reg: int | None = None
        self.cfa_offset = 0
        self.rules: dict = {}
        self.stack: list = []

    def restore(self, reg: int, initial: dict | None) -> None:
        if initial is not None and reg in initial:
            self.rules[reg] = initial[reg]
        else:
            self.rules.pop(reg, None)


def _uleb(d: bytes, p: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = d[p]
        p += 1
        value |= (b & 0x7f) << shift
        shift += 7
        if not b & 0x80:
            return value, p


def _sleb(d: bytes, p: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = d[p]
        p += 1
        value |= (b & 0x7f) << shift
        shift += 7
        if not b & 0x80:
            if b & 0x40:
                value -= 1 << shift
            return value, p
