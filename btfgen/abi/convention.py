"""A calling convention as data: the frozen `Convention` a `.abi` description parses into
(btfgen/abi/dsl.py), and the conditions and actions of its rules, each saying itself what it
means to the placement engine (btfgen/place.py). The language these are written in is
docs/abi-language.md."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

# What a condition may test (see btfgen/abi/classify.py for their meaning).
CLASSES = frozenset({"integer", "bool", "enum", "pointer", "float", "aggregate", "scalar"})
FLAGS = frozenset({"signed", "variadic", "hfa", "sysv_memory", "sysv_sse", "int_mode",
                   "float_mode"})
NUMERIC = frozenset({"size", "align", "hfa_members", "bitfield_align", "float_fields"})
REG_OPTIONS = frozenset({"even", "split", "per_member", "per_field", "after_args", "below"})
REG_NUMBERED = frozenset({"below"})  # options that take a number: `below 6`

_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
        "==": operator.eq, "!=": operator.ne}


# -- conditions: each says itself whether a classified value (a `Shape`) meets it --------------
@dataclass(frozen=True, slots=True)
class Flag:
    """A class or flag (`variadic` is the function's); `not FLAG` is negated."""

    name: str
    negated: bool = False

    def holds(self, shape, variadic: bool) -> bool:
        value = variadic if self.name == "variadic" else shape.flag(self.name)
        return value != self.negated


@dataclass(frozen=True, slots=True)
class Compare:
    name: str  # one of NUMERIC
    op: str  # one of _OPS
    value: int

    def holds(self, shape, variadic: bool) -> bool:
        return _OPS[self.op](shape.number(self.name), self.value)


@dataclass(frozen=True, slots=True)
class Member:
    name: str  # one of NUMERIC
    values: tuple[int, ...]

    def holds(self, shape, variadic: bool) -> bool:
        return shape.number(self.name) in self.values


Cond = Flag | Compare | Member


# -- actions: where a value may go, tried left to right ----------------------------------------
# Each action says itself what it means to the engine (btfgen.place), as conditions say whether
# they hold: `arg` places an argument, `ret` plans a return value, both by calling back the
# engine's `Placer` methods. The engine keeps the allocation state and builds its own records,
# and knows no action by name; this module does not import it.
# (raw pieces, by_ref, unavailable reason or None, refused): an argument's placement; refused:
# the reason is why the ctx cannot take the function at all (`refuse`), not this value alone
ArgPlace = tuple


class Placer(Protocol):
    """What an action asks of the placement engine. The methods that locate bytes and `no_room`
    raise the engine's own "no room" signal, upon which the rule's next action is tried."""

    def regs(self, act: Regs, shape, alloc) -> list: ...
    def chunks(self, act: Chunks, shape, alloc) -> list: ...
    def stack(self, act: Stack, shape, alloc) -> list: ...
    def no_room(self) -> NoReturn: ...
    def new_alloc(self): ...  # a return value is placed from a fresh allocation state
    def by_ref(self, alloc, variadic: bool, nested: bool) -> ArgPlace: ...
    def ret_located(self, raw: list): ...
    def ret_sret(self): ...
    def ret_unavailable(self, reason: str): ...
    def ret_refused(self, reason: str): ...


class _Locates:
    """An action that puts the value's bytes somewhere (`locate`): in the argument's allocation
    state for an argument, in a fresh one for a return value."""

    __slots__ = ()

    def locate(self, placer: Placer, shape, alloc) -> list:
        raise NotImplementedError

    def arg(self, placer: Placer, shape, alloc, variadic: bool, nested: bool) -> ArgPlace:
        return self.locate(placer, shape, alloc), False, None, False

    def ret(self, placer: Placer, shape):
        return placer.ret_located(self.locate(placer, shape, placer.new_alloc()))


@dataclass(frozen=True, slots=True)
class Regs(_Locates):
    pool: str
    even: bool = False  # start at an even register index
    split: bool = False  # what does not fit goes on the stack
    per_member: bool = False  # one register per HFA member
    per_field: bool = False  # one register per float field (float_fields), at its own offset
    # (ret only) start at the number of registers the arguments took, all pools together: a
    # trampoline's return slot follows the argument slots
    after_args: bool = False
    # only where the value fits wholly in the pool's first `below` registers (0: anywhere):
    # x86-64's trampoline refuses a struct that reaches past the six argument registers
    below: int = 0
    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)

    @property
    def pools(self) -> tuple[str, ...]:
        return (self.pool,)

    def locate(self, placer: Placer, shape, alloc) -> list:
        return placer.regs(self, shape, alloc)


@dataclass(frozen=True, slots=True)
class Chunks(_Locates):
    """Each chunk (the description's `chunk` bytes: x86-64's eightbyte) from the pool of its
    class."""

    int_pool: str
    fp_pool: str
    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)

    @property
    def pools(self) -> tuple[str, ...]:
        return (self.int_pool, self.fp_pool)

    def locate(self, placer: Placer, shape, alloc) -> list:
        return placer.chunks(self, shape, alloc)


@dataclass(frozen=True, slots=True)
class Stack(_Locates):
    align: int | str | None = None  # a number, "natural", or None (the slot size)
    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)
    pools = ()

    def locate(self, placer: Placer, shape, alloc) -> list:
        return placer.stack(self, shape, alloc)


@dataclass(frozen=True, slots=True)
class NoPlace(_Locates):
    """`none`: the value takes no location (an empty struct)."""

    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)
    pools = ()

    def locate(self, placer: Placer, shape, alloc) -> list:
        return []


@dataclass(frozen=True, slots=True)
class ByRef:
    """A copy in memory; its pointer is placed by the same rules."""

    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)
    pools = ()

    def arg(self, placer: Placer, shape, alloc, variadic: bool, nested: bool) -> ArgPlace:
        return placer.by_ref(alloc, variadic, nested)

    def ret(self, placer: Placer, shape):
        placer.no_room()  # a return value is never passed by reference: `sret` is that


@dataclass(frozen=True, slots=True)
class Sret:
    """(ret only) returned through the hidden pointer."""

    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)
    pools = ()

    def arg(self, placer: Placer, shape, alloc, variadic: bool, nested: bool) -> ArgPlace:
        placer.no_room()  # rejected in an argument list by the parser: never reached

    def ret(self, placer: Placer, shape):
        return placer.ret_sret()


@dataclass(frozen=True, slots=True)
class Unavailable:
    reason: str
    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)
    pools = ()

    def arg(self, placer: Placer, shape, alloc, variadic: bool, nested: bool) -> ArgPlace:
        return [], False, self.reason, False

    def ret(self, placer: Placer, shape):
        return placer.ret_unavailable(self.reason)


@dataclass(frozen=True, slots=True)
class Refuse:
    """The ctx cannot take the function at all (a trampoline the kernel will not build for it):
    this value is unavailable and so is every other of the function, each saying why."""

    reason: str
    line: int = field(default=0, kw_only=True)
    column: int = field(default=0, kw_only=True)
    pools = ()

    def arg(self, placer: Placer, shape, alloc, variadic: bool, nested: bool) -> ArgPlace:
        return [], False, self.reason, True

    def ret(self, placer: Placer, shape):
        return placer.ret_refused(self.reason)


Action = Regs | Chunks | Stack | ByRef | Sret | NoPlace | Unavailable | Refuse


@dataclass(frozen=True, slots=True)
class Rule:
    conds: tuple[Cond, ...]  # all must hold; empty for `otherwise`
    actions: tuple[Action, ...]  # tried in order, the first that finds a place wins
    line: int
    column: int
    file: str = ""  # the file it is written in, when an include put it in another description

    def matches(self, shape, variadic: bool) -> bool:
        return all(c.holds(shape, variadic) for c in self.conds)

    def where(self, path: str) -> str:
        return f"{self.file or path}:{self.line}:{self.column}"


@dataclass(frozen=True, slots=True)
class CtxEntry:
    hwreg: str
    field: str  # C member access suffix: `ctx->{field}`
    offset: int  # default byte offset (used when the BTF in hand lacks the struct)
    size: int


@dataclass(frozen=True, slots=True)
class CtxSpec:
    name: str  # "pt_regs" | "ftrace_regs"
    structs: tuple[str, ...]  # struct names to look for in the BTF, first non-opaque wins
    size: int  # default size of the struct
    entries: tuple[CtxEntry, ...]  # includes the stack pointer (hwreg "sp") unless `slots`
    # An array of words (`ctx NAME slots POOL`: a trampoline's u64 *ctx), not a struct: nothing
    # to look up in the BTF, no stack pointer, and the rules are the ctx's own (`ctx_rules`).
    slots: bool = False
    # `without args "why"`: the arch's kernel never hands this ctx to a callback with the
    # argument registers in it (x86-32's ftrace_regs: no DYNAMIC_FTRACE_WITH_ARGS); "" where it
    # does. Placing for it still works (the layout is the struct's); kernel C refuses it.
    without_args: str = ""


@dataclass(frozen=True, slots=True)
class DwarfFacts:
    """What reading DWARF locations needs from the arch: the CFA at entry and register numbers."""

    cfa: int  # the CFA at a function's first instruction, bytes above the entry SP
    regs: dict[int, str]  # DWARF register number -> register name (as the pools spell it)

    @property
    def sp(self) -> int:
        return next(n for n, name in self.regs.items() if name == "sp")


@dataclass(frozen=True, slots=True)
class SymbolEntry:
    """How a function symbol's address leads to the first instruction DWARF names."""

    nops: tuple[bytes, ...] = ()  # no-op encodings that may stand between the two
    thumb_nops: tuple[bytes, ...] = ()  # non-empty: bit 0 of a function symbol means Thumb


@dataclass(frozen=True, eq=False)
class Convention:
    name: str
    path: str
    names: tuple[str, ...]
    families: tuple[str, ...]
    elf_machine: str | None
    pointer_size: int
    byte_order: str  # "little" | "big"
    max_align: int  # largest alignment a scalar gets (i386 4, arm 8, 64-bit arches 16)
    slot: int  # stack slot size
    stack_base: int  # where stack arguments start, relative to the entry SP
    shared_slots: bool  # registers are the first stack slots (ppc64 ELFv2 parameter save area)
    pools: dict[str, tuple[str, ...]]
    close_on_miss: frozenset[str]
    sret_mode: str  # "arg": hidden first argument; "reg": in `sret_reg`, no argument shifted
    sret_reg: str | None
    sret_exit: str | None  # register that holds the sret pointer at exit, if the ABI says so
    arg_rules: tuple[Rule, ...]
    ret_rules: tuple[Rule, ...]
    ctxs: dict[str, CtxSpec] = field(default_factory=dict)
    # `args NAME { }` / `ret NAME { }`: a ctx's own rules, (args, ret), used in place of the
    # native ones when placing for that ctx (a trampoline's slots are not the ABI's registers)
    ctx_rules: dict[str, tuple[tuple[Rule, ...], tuple[Rule, ...]]] = field(default_factory=dict)
    dwarf: DwarfFacts | None = None
    symbol_entry: SymbolEntry = SymbolEntry()
    # What classify.py computes beyond class, size and alignment: 0 turns a classification off.
    hfa_max_members: int = 0
    sysv_max_size: int = 0
    clang_triple: str = ""  # libclang's target for C headers; "": headers unsupported
    libc_dirs: tuple[str, ...] = ()
    bpf_syscall: int | None = None  # the bpf() syscall's number; None: not described
    address_spaces: str = "shared"  # "separate": kernel and user addresses overlap (s390x)

    @property
    def target_arch(self) -> str:
        """libbpf's __TARGET_ARCH_<x> spelling: the family (the kernel's ARCH), else the name."""
        return self.families[0] if self.families else self.name

    def __repr__(self) -> str:
        return f"Convention({self.name!r}, {self.path!r})"
