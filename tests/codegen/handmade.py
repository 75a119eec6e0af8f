"""Hand-built type tables and layouts: inputs for the code generators that do not depend on the
BTF reader or placement (the x86_64 pt_regs offsets are the kernel's, checked against the running
kernel's BTF by test_handmade_ctx_matches_kernel)."""

from __future__ import annotations

from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.btf.made import MadeTypes
from btfgen.layout import (
    ArchLayout,
    CtxInfo,
    CtxRegister,
    FunctionLayout,
    ProtoLayout,
    RegPiece,
    StackPiece,
    ValueLayout,
)


class Table(MadeTypes):
    """A TypeSource: id -> Type, built by the helper methods."""

    def _add(self, cls, *args, **kw) -> int:
        i = len(self)
        self[i] = cls(i, args[0], self, *args[1:], **kw)
        return i

    def int_(self, name: str, size: int, signed: bool = True, bool_: bool = False) -> int:
        enc = (T.INT_SIGNED if signed else 0) | (T.INT_BOOL if bool_ else 0)
        return self._add(T.Int, name, size, enc, 0, size * 8)

    def ptr(self, to: int) -> int:
        return self._add(T.Ptr, "", to)

    def typedef(self, name: str, to: int) -> int:
        return self._add(T.Typedef, name, to)

    def const(self, to: int) -> int:
        return self._add(T.Const, "", to)

    def array(self, elem: int, n: int) -> int:
        return self._add(T.Array, "", elem, 0, n)

    def struct(self, name: str, size: int, members, union: bool = False) -> int:
        """members: (name, type id, bit offset[, bitfield size])."""
        ms = tuple(T.Member(m[0], m[1], m[2], m[3] if len(m) > 3 else 0, self) for m in members)
        cls = T.Union if union else T.Struct
        return self._add(cls, name, size, ms, any(len(m) > 3 for m in members))

    def enum(self, name: str, size: int, values, signed: bool = False) -> int:
        vs = tuple(T.EnumValue(n, v) for n, v in values)
        return self._add(T.Enum, name, size, signed, vs)

    def float_(self, name: str, size: int) -> int:
        return self._add(T.Float, name, size)

    def fwd(self, name: str) -> int:
        return self._add(T.Fwd, name, False)


# x86_64 struct pt_regs: field -> offset (arch/x86/include/asm/ptrace.h)
X86_64_PT_REGS = {
    "r15": 0, "r14": 8, "r13": 16, "r12": 24, "bp": 32, "bx": 40, "r11": 48, "r10": 56,
    "r9": 64, "r8": 72, "ax": 80, "cx": 88, "dx": 96, "si": 104, "di": 112, "orig_ax": 120,
    "ip": 128, "cs": 136, "flags": 144, "sp": 152, "ss": 160,
}
X86_64_ARGS = (("di", "rdi"), ("si", "rsi"), ("dx", "rdx"), ("cx", "rcx"), ("r8", "r8"),
               ("r9", "r9"))


def x86_64_ctx() -> CtxInfo:
    regs = tuple(CtxRegister(hw, f, X86_64_PT_REGS[f], 8)
                 for f, hw in X86_64_ARGS + (("ax", "rax"), ("sp", "rsp")))
    return CtxInfo("pt_regs", "pt_regs", 168, "default", "sp", 152, regs)


def reg(field: str, hw: str, value_offset: int, size: int, offsets=X86_64_PT_REGS,
        reg_size: int = 8) -> RegPiece:
    return RegPiece(field, hw, offsets[field], reg_size, value_offset, size)


def stack(off: int, value_offset: int, size: int) -> StackPiece:
    return StackPiece(off, value_offset, size)


def value(table: Table, name: str, type_id: int, pieces, *, by_ref: bool = False,
          at_exit: bool = False, unavailable: str | None = None) -> ValueLayout:
    t = table[type_id]
    size = measure.size_of(t)
    return ValueLayout(name, t, _spell(t), size, tuple(pieces), by_ref, at_exit,
                       unavailable, _signed(t))


def _signed(t: T.Type) -> bool:
    s = walk.strip(t)
    return isinstance(s, (T.Int, T.Enum)) and s.signed


def _spell(t: T.Type) -> str:
    s = walk.strip(t)
    return t.name or s.name or s.kind.name.lower()


def func(name: str, btf_id: int, args, ret=None, variadic: bool = False) -> FunctionLayout:
    return FunctionLayout(name, btf_id, ProtoLayout(tuple(args), ret, variadic))


def arch_layout(functions, *, arch="x86_64", byte_order="little", pointer_size=8,
                ctx: CtxInfo | None = None) -> ArchLayout:
    return ArchLayout(arch, byte_order, pointer_size, ctx or x86_64_ctx(), tuple(functions))
