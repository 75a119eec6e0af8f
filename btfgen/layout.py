"""Where a function's values live at entry and exit: the placement engine's result.

This is the contract between placement (`btfgen.place`), the code generators and the decoders,
and it is what `btfgen layout --json` prints. Nothing here is arch-specific: a register piece
already names its trace-ctx field and that field's byte offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.btf.types import Type

# The trace contexts a layout can refer to (every description describes the first two; the
# trampoline's u64 slots only the arches whose BPF JIT builds trampolines).
CTX_NAMES = ("pt_regs", "ftrace_regs", "trampoline")


@dataclass(frozen=True, slots=True)
class RegPiece:
    """The least significant `size` bytes of a register hold value bytes
    [value_offset, value_offset + size) in target byte order."""

    field: str  # ctx field name, e.g. "di" (x86_64 pt_regs), "regs[0]" (arm64), "a0" (riscv)
    hwreg: str  # the architecture's register name, e.g. "rdi", "x0", "a0", "r2"
    ctx_offset: int  # byte offset of that field in the ctx struct
    reg_size: int  # width of the field in the ctx (bytes)
    value_offset: int
    size: int

    def skip(self, byte_order: str) -> int:
        """Bytes of the field before its least significant `size`: the high ones, which come
        first on a big-endian target (the one place that rule lives)."""
        return self.reg_size - self.size if byte_order == "big" else 0


@dataclass(frozen=True, slots=True)
class StackPiece:
    """Value bytes [value_offset, value_offset + size) at entry SP + `stack`."""

    stack: int
    value_offset: int
    size: int


Piece = RegPiece | StackPiece


@dataclass(frozen=True, slots=True, eq=False)
class ValueLayout:
    """One placed value. Placement hands the same object to every prototype where the value
    (its type, name and allocation state) recurs, so like ProtoLayout it compares and hashes by
    identity and outputs cache per-value work under it."""

    name: str  # parameter name ("" for the return value or an unnamed parameter)
    type: Type
    type_name: str  # C spelling
    size: int
    pieces: tuple[Piece, ...]
    # True: `pieces` locate a pointer (pointer-sized); the value is the memory it points to.
    by_ref: bool = False
    # False: the value cannot be read at function exit without a copy saved at entry.
    at_exit: bool = False
    # Set when the value cannot be decoded from the trace ctx at all (FP register, variadic
    # tail, a kind the description has no rule for); `pieces` is then empty.
    unavailable: str | None = None
    signed: bool = False  # sign-extend from `size` bytes (scalars only)
    # Which source placed the value where DWARF was consulted: "abi" (the arch description
    # applied to the prototype) or "dwarf" (the compiler's own word: the function's compiled
    # convention differs from its prototype); None when no DWARF was consulted.
    source: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ProtoLayout:
    """Where the values of one prototype live. Placed once per distinct prototype and shared by
    every function that has it (a kernel has about half as many prototypes as functions), so it
    is the key every output caches its per-prototype work under. Compared and hashed by
    identity: one object is one placement."""

    args: tuple[ValueLayout, ...]
    ret: ValueLayout | None  # None: void
    variadic: bool
    # Why the ctx cannot take the function at all (a BPF trampoline the kernel would not build
    # for it: a struct over 16 bytes, too many slots, ...), "argN (name): reason" or "return
    # value: reason"; every value is then unavailable. None: taken.
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class FunctionLayout:
    name: str
    btf_id: int
    proto: ProtoLayout

    @property
    def args(self) -> tuple[ValueLayout, ...]:
        return self.proto.args

    @property
    def ret(self) -> ValueLayout | None:
        return self.proto.ret

    @property
    def variadic(self) -> bool:
        return self.proto.variadic

    @property
    def refused(self) -> str | None:
        """Why the layout's ctx cannot take this function (see ProtoLayout.refused)."""
        return self.proto.refused


def arg_slots(proto: ProtoLayout) -> int:
    """The ctx words a prototype's arguments take, counted up to the last one used: in a
    trampoline's ctx (u64 slots) the kernel's argument count (bpf_get_func_arg_cnt), after
    which the return value's slot is. Of a refused prototype, 0 (nothing is placed)."""
    ends = [p.ctx_offset + p.reg_size for a in proto.args for p in a.pieces
            if isinstance(p, RegPiece)]
    return -(-max(ends) // 8) if ends else 0


def by_prototype(functions) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """How `functions` share prototypes, for work done once per ProtoLayout: the position of each
    distinct prototype's first function, in order, and for every function the index of its
    prototype in that list."""
    last = _LAST_GROUPING
    if type(functions) is tuple and last and last[0] is functions:
        return last[1]  # the same ArchLayout's functions: every output asks (a whole kernel's
        # outputs asked six times, 12 ms each)
    grouping = _group(functions)
    if type(functions) is tuple:  # immutable: the answer cannot go stale while it is held
        _LAST_GROUPING[:] = (functions, grouping)
    return grouping


_LAST_GROUPING: list = []  # [functions, their grouping], the last tuple asked about


def _group(functions) -> tuple[tuple[int, ...], tuple[int, ...]]:
    index: dict[ProtoLayout, int] = {}
    firsts: list[int] = []
    at = []
    for i, f in enumerate(functions):
        k = index.get(f.proto)
        if k is None:
            k = index[f.proto] = len(firsts)
            firsts.append(i)
        at.append(k)
    return tuple(firsts), tuple(at)


@dataclass(frozen=True, slots=True)
class CtxRegister:
    """One register the trace ctx holds: the field that holds it and where."""

    hwreg: str
    field: str  # C member access suffix: `ctx->{field}`
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class CtxInfo:
    """Which trace context the register pieces refer to, and where its description came from."""

    name: str  # "pt_regs" | "ftrace_regs"
    struct_name: str  # the C struct the offsets are in, e.g. "pt_regs", "__arch_ftrace_regs"
    size: int
    source: str  # "btf" (read from the BTF in hand) | "default" (the arch description's)
    sp_field: str  # ctx field holding the stack pointer at entry
    sp_offset: int | None  # None: the ctx does not hold it, so no stack argument is readable
    registers: tuple[CtxRegister, ...]  # every argument/return register and the stack pointer
    # The ctx is an array of u64 slots (a BPF trampoline's: `ctx` is `u64 *`, a register is
    # ctx[K]), read in BPF through bpf_get_func_arg / bpf_get_func_ret, not a struct's fields.
    slots: bool = False
    # Why the arch's kernel never hands this ctx to a callback with the arguments in it
    # (CtxSpec.without_args); "" where it does.
    without_args: str = ""

    @property
    def ret_slot(self) -> int | None:
        """A trampoline's ctx: the offset, one word past every slot, at which the generic
        decoder's table reads the return value (register RET_SLOT). The return slot's index is
        the function's argument slot count, which the kernel knows (bpf_get_func_ret reads
        ctx[bpf_get_func_arg_cnt]) and one table for every function would have to guess; read
        there, every function's return value is one op, the same op. None: another ctx."""
        for r in self.registers:
            if r.hwreg == RET_SLOT:
                return r.offset if self.slots else None
        return None


# The pseudo-register of a trampoline's ctx that is the return slot wherever the argument count
# puts it (CtxInfo.ret_slot): ctx[nargs].
RET_SLOT = "retval"


@dataclass(frozen=True, slots=True)
class ArchLayout:
    arch: str  # canonical name
    byte_order: str  # "little" | "big"
    pointer_size: int
    ctx: CtxInfo
    functions: tuple[FunctionLayout, ...]
    # From the arch description, for code that lays types out or names the target: the largest
    # alignment a scalar gets, and libbpf's __TARGET_ARCH_<x> spelling.
    max_scalar_align: int = 16
    target_arch: str = ""
    address_spaces: str = "shared"  # Convention.address_spaces
