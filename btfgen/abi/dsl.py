"""The ABI description language: parse a `.abi` file into a frozen `Convention`.

The grammar is `grammars/abi.lark` (LALR). Every rule and action keeps its line and column so the
engine can say which rule placed a value and a broken description points at its own text. No
parse tree leaves this module; every syntax or meaning error is an `AbiError` "file:line:col: ...".

The language, statement by statement (`#` starts a comment):

  arch NAME { ... }            one architecture; NAME is its canonical name
  names N...;                  other exact names (uname -m spellings: a trace directory runs on
                               a machine whose `uname -m` is one of them)
  bpf_syscall N;               the bpf() syscall's number in this arch's syscall table
  address_spaces shared|separate;  separate: kernel and user memory overlap in addresses
                               (s390x), so a pointer the BTF does not tag cannot be tried in
                               one and then the other
  family N...;                 shared names (kernel ARCH, __TARGET_ARCH_*) picked by pointer size
  elf EM_...;                  the ELF e_machine that means this arch
  pointer N; endian little|big; max_align N; slot N;
  hfa_max_members N;           AArch64: the most members a homogeneous FP aggregate has (else 0)
  sysv_max_size N;             x86-64: the largest aggregate classified by eightbytes (else 0)
  clang "TRIPLE"; libc "DIR"...;  libclang's target for C headers; the libc include dirs
  include "FILE";              the statements of FILE (relative to this one), read here
A number `Nw` is N words (N x `pointer`, declared before it): what scales with the word.
  stack_base N;                where stack arguments start, bytes above the entry SP
  shared_slots yes;            registers are the first stack slots (ppc64 parameter save area)
  regs POOL = R, R, ...;       an ordered register pool
  close_on_miss POOL;          after one failed allocation the pool gives nothing more
  sret arg; | sret reg R;      hidden struct-return pointer: as a first argument, or in R
  sret_exit R;                 the callee returns that pointer in R (readable at exit); R of
                               either must be named by a pool, a ctx or the dwarf list
  args { RULE... }  ret { RULE... }
  ctx pt_regs|ftrace_regs "struct" ... size N { HWREG = FIELD @ OFFSET [size N]; ... sp = ...; }
  ctx ftrace_regs "struct" ... wraps pt_regs as MEMBER;   the registers of a ctx described above,
                               in a struct that holds it at offset 0 as MEMBER
  dwarf cfa N { HWREG = DWARFNO; ... sp = DWARFNO; }
                               DWARF facts: at the first instruction the CFA (call frame address,
                               what DW_OP_call_frame_cfa and most frame bases mean) is the entry
                               SP + N; the psABI's DWARF numbers of the registers that matter
  symbol_entry { nop "HEX"...; thumb_nop "HEX"...; }
                               where DWARF's first instruction may lie past a function symbol:
                               only the no-ops listed (bytes in memory order) stand between
                               (GCC's -fpatchable-function-entry); `thumb_nop`: bit 0 of a
                               function symbol is the Thumb bit, and Thumb's no-ops

Every statement but `names`, `family`, `regs`, `close_on_miss` and `include` is said at most
once (a property, `sret`, `args`, `ctx pt_regs`, ...): a second one is an error, not a silent
replacement.

A RULE is `when COND, COND... => ACTION | ACTION...;` or `otherwise => ...;`. Conditions:
a class (integer bool enum pointer float aggregate scalar), a flag (signed, variadic = the
function is variadic, hfa = AArch64 homogeneous FP aggregate (unions included), sysv_memory =
x86-64 class MEMORY, int_mode / float_mode = GCC gives the value an integer machine mode of at
most 8 bytes / a floating-point one: for an aggregate, int_mode fails when it holds an array of
a size no mode has (char[3]: BLKmode), float_mode holds for a struct one float field spans,
struct { double d; }, nesting included), `not FLAG`,
`size|align|hfa_members|bitfield_align|float_fields OP N` or `... in (N, ...)`; bitfield_align =
the largest natural alignment of the declared type of a direct bitfield member (0 without one),
which packing does not lower; float_fields = the number of direct members of a struct whose
direct members are all floating scalars (0 for anything else: arrays, nesting, unions). Actions, tried left to
right until one finds room:

  regs(POOL[, even][, split][, per_member][, per_field])  ceil(size/word) consecutive registers;
        `even` starts at an even index; `split` puts what does not fit on the stack (only while
        the stack is still empty, or always with shared_slots); `per_member` one register per HFA
        member; `per_field` one register per float field, each holding that field (MIPS n64)
  chunks(INTPOOL, FPPOOL)   x86-64: each eightbyte from the pool of its class, all or nothing
  stack | stack(align N|natural)   a slot of size rounded up to `slot`, aligned to the slot, N or
        the value's own alignment; big-endian values narrower than a slot are right-justified
  byref      a copy in memory; its pointer is placed by the same rules
  sret       (ret only) returned through the hidden pointer
  none       takes no location (empty structs)
  unavailable("reason")
A register the ctx does not hold (FP/vector registers) makes the value unavailable, after the
register has been allocated, so later arguments still land where the compiler puts them.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NoReturn, Protocol

import lark
from lark import v_args

from btfgen.errors import AbiError
from btfgen.layout import CTX_NAMES
from btfgen.resources import data_dir

# What a condition may test (see btfgen/abi/classify.py for their meaning).
CLASSES = frozenset({"integer", "bool", "enum", "pointer", "float", "aggregate", "scalar"})
FLAGS = frozenset({"signed", "variadic", "hfa", "sysv_memory", "int_mode", "float_mode"})
NUMERIC = frozenset({"size", "align", "hfa_members", "bitfield_align", "float_fields"})
REG_OPTIONS = frozenset({"even", "split", "per_member", "per_field"})

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
ArgPlace = tuple  # (raw pieces, by_ref, unavailable reason or None): an argument's placement


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


class _Locates:
    """An action that puts the value's bytes somewhere (`locate`): in the argument's allocation
    state for an argument, in a fresh one for a return value."""

    __slots__ = ()

    def locate(self, placer: Placer, shape, alloc) -> list:
        raise NotImplementedError

    def arg(self, placer: Placer, shape, alloc, variadic: bool, nested: bool) -> ArgPlace:
        return self.locate(placer, shape, alloc), False, None

    def ret(self, placer: Placer, shape):
        return placer.ret_located(self.locate(placer, shape, placer.new_alloc()))


@dataclass(frozen=True, slots=True)
class Regs(_Locates):
    pool: str
    even: bool = False  # start at an even register index
    split: bool = False  # what does not fit goes on the stack
    per_member: bool = False  # one register per HFA member
    per_field: bool = False  # one register per float field (float_fields), at its own offset
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
        return [], False, self.reason

    def ret(self, placer: Placer, shape):
        return placer.ret_unavailable(self.reason)


Action = Regs | Chunks | Stack | ByRef | Sret | NoPlace | Unavailable


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
    entries: tuple[CtxEntry, ...]  # includes the stack pointer (hwreg "sp")


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


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = (data_dir("grammars") / "abi.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False,
                     start=["start", "body"])


def parse_file(path: str | Path, display: str | None = None) -> Convention:
    """`display` names the file in messages and layouts (default: `path` as given)."""
    path = Path(path)
    name = display or str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise AbiError(f"{name}: {e.strerror or e}") from None
    return parse_text(text, name, path.parent)


def parse_text(text: str, path: str = "<abi>", directory: Path | None = None) -> Convention:
    """`directory`: where the files an `include` names are (default: the current one)."""
    return _transform(_parse(text, path, "start"), _ToConvention(path, directory or Path(".")))


def _parse(text: str, path: str, start: str) -> lark.Tree:
    try:
        return _parser().parse(text, start=start)
    except lark.UnexpectedInput as e:
        raise AbiError(f"{path}:{e.line}:{e.column}: {_describe(e, text)}") from None


def _transform(tree: lark.Tree, transformer: lark.Transformer):
    try:
        return transformer.transform(tree)
    except lark.exceptions.VisitError as e:
        if isinstance(e.orig_exc, AbiError):
            raise e.orig_exc from None
        raise


def _describe(e: lark.UnexpectedInput, text: str) -> str:
    if isinstance(e, lark.UnexpectedToken):
        got = "end of file" if e.token.type == "$END" else repr(str(e.token))
        expected = sorted(_spell_terminal(t) for t in e.expected if not t.startswith("__"))
        return f"expected {' or '.join(expected) or 'something else'}, got {got}"
    if isinstance(e, lark.UnexpectedCharacters):
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        return f"unexpected character {ch!r}"
    return "unexpected end of file"


def _spell_terminal(name: str) -> str:
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return name
    if isinstance(pattern, lark.lexer.PatternStr):
        return repr(pattern.value)
    return name


@dataclass
class _Draft:
    """What the statements of one description said, before the checks that need all of them."""

    props: dict = field(default_factory=dict)  # PROP -> its value's text
    said: dict = field(default_factory=dict)  # a statement said once -> "file:line" it is at
    names: list = field(default_factory=list)
    families: list = field(default_factory=list)
    elf: str | None = None
    pools: dict = field(default_factory=dict)  # name -> registers
    closes: list = field(default_factory=list)  # tokens
    sret_mode: str = "arg"
    sret_reg: str | None = None
    sret_exit: str | None = None
    # Registers statements name outside the pools, checked once everything is declared:
    # (statement, register token, the file it is written in).
    named_regs: list = field(default_factory=list)
    clang: str = ""
    libc: tuple = ()
    rules: dict = field(default_factory=dict)  # "args" | "ret" -> (RULESET token, rules)
    ctxs: dict = field(default_factory=dict)
    dwarf: DwarfFacts | None = None
    symbol_entry: SymbolEntry = SymbolEntry()


@v_args(meta=True)
class _ToConvention(lark.Transformer):
    """Tree -> Convention: one method per grammar rule (or alias), checking meaning as it goes.
    Statements fill a `_Draft`; `start` checks what needs the whole description and builds the
    frozen `Convention`. A new statement is one grammar rule and one method here."""

    def __init__(self, path: str, directory: Path, draft: _Draft | None = None,
                 including: tuple[str, ...] = ()):
        super().__init__()
        self.path = path
        self.directory = directory
        self.draft = draft or _Draft()
        self.including = including  # the files whose include led here (a loop is an error)

    def err(self, at, what: str) -> AbiError:
        return AbiError(f"{self.path}:{getattr(at, 'line', 0)}:{getattr(at, 'column', 0)}: {what}")

    def _address_spaces(self, text: str, at) -> str:
        if text not in ("shared", "separate"):
            raise self.err(at, f"address_spaces: shared or separate, not {text!r}")
        return text

    def number(self, tok, at=None) -> int:
        text = str(tok)
        words = text.endswith("w")
        try:
            n = int(text[:-1] if words else text, 0)
        except ValueError:
            raise self.err(at or tok, f"expected a number, got {text!r}") from None
        if not words:
            return n
        if "pointer" not in self.draft.props or self.draft.props["pointer"].endswith("w"):
            raise self.err(at or tok, f"{text}: words before the `pointer` size is known")
        return n * int(self.draft.props["pointer"], 0)

    def once(self, what: str, at) -> None:
        """Refuse a second statement that would silently replace the first."""
        first = self.draft.said.get(what)
        if first is not None:
            raise self.err(at, f"{what} given twice (first at {first})")
        line, column = getattr(at, "line", 0), getattr(at, "column", 0)
        self.draft.said[what] = f"{self.path}:{line}:{column}"

    # -- statements ----------------------------------------------------------------------------
    def names(self, meta, kids):
        self.draft.names += map(str, kids)

    def family(self, meta, kids):
        self.draft.families += map(str, kids)

    def elf(self, meta, kids):
        self.once("elf", meta)
        self.draft.elf = str(kids[0])

    def prop(self, meta, kids):
        self.once(str(kids[0]), kids[0])
        value = str(kids[1])
        if value.endswith("w"):  # in words: resolved now, while `pointer` is the one above
            value = str(self.number(kids[1]))
        self.draft.props[str(kids[0])] = value

    def include(self, meta, kids):
        name = str(kids[0])[1:-1]
        file = self.directory / name
        shown = str(Path(self.path).parent / name)
        if shown in self.including or shown == self.path:
            raise self.err(kids[0], f"include {name}: includes itself")
        try:
            text = file.read_text()
        except OSError as e:
            raise self.err(kids[0], f"include {name}: {e.strerror or e}") from None
        sub = _ToConvention(shown, file.parent, self.draft, (*self.including, self.path))
        _transform(_parse(text, shown, "body"), sub)

    def body(self, meta, kids):
        return None

    def regs(self, meta, kids):
        name = str(kids[0])
        if name in self.draft.pools:
            raise self.err(kids[0], f"register pool {name} declared twice")
        self.draft.pools[name] = tuple(map(str, kids[1:]))

    def close(self, meta, kids):
        self.draft.closes.append(kids[0])

    def sret_arg(self, meta, kids):
        self.once("sret", meta)
        self.draft.sret_mode, self.draft.sret_reg = "arg", None

    def sret_reg(self, meta, kids):
        self.once("sret", meta)
        self.draft.sret_mode, self.draft.sret_reg = "reg", str(kids[0])
        self.draft.named_regs.append(("sret", kids[0], self.path))

    def sret_exit(self, meta, kids):
        self.once("sret_exit", meta)
        self.draft.sret_exit = str(kids[0])
        self.draft.named_regs.append(("sret_exit", kids[0], self.path))

    def clang(self, meta, kids):
        self.once("clang", meta)
        self.draft.clang = str(kids[0])[1:-1]

    def libc(self, meta, kids):
        self.once("libc", meta)
        self.draft.libc = tuple(str(t)[1:-1] for t in kids)

    def rules(self, meta, kids):
        which, *rules = kids
        self.once(f"{which} rules", which)
        for rule in rules:
            for act in rule.actions:
                if isinstance(act, Sret) and str(which) != "ret":
                    raise self.err(act, "`sret` is a return action")
        self.draft.rules[str(which)] = tuple(rules)

    def ctx(self, meta, kids):
        name_tok, *rest = kids
        if str(name_tok) not in CTX_NAMES:
            raise self.err(name_tok, f"ctx must be one of {', '.join(CTX_NAMES)}")
        self.once(f"ctx {name_tok}", name_tok)
        structs = [str(t)[1:-1] for t in rest if isinstance(t, lark.Token) and t.type == "STRING"]
        size = self.number(rest[len(structs)])
        entries = tuple(rest[len(structs) + 1:])
        if not any(e.hwreg == "sp" for e in entries):
            raise self.err(meta, f"ctx {name_tok}: no `sp` entry (the entry stack pointer)")
        self.draft.ctxs[str(name_tok)] = CtxSpec(str(name_tok), tuple(structs), size, entries)

    def dwarf(self, meta, kids):
        cfa, *pairs = kids
        self.once("dwarf", meta)
        regs: dict[int, str] = {}
        for name, num in zip(pairs[::2], pairs[1::2]):
            n = self.number(num)
            if n in regs or str(name) in regs.values():
                raise self.err(name, f"DWARF register {name} = {n} given twice")
            regs[n] = str(name)
        if "sp" not in regs.values():
            raise self.err(meta, "dwarf: no `sp` entry (the stack pointer's number)")
        self.draft.dwarf = DwarfFacts(self.number(cfa), regs)

    def entry_nops(self, meta, kids):
        kind, *encodings = kids
        nops = []
        for tok in encodings:
            try:
                nops.append(bytes.fromhex(str(tok)[1:-1]))
            except ValueError:
                raise self.err(tok, f"{kind}: {tok} is not hex bytes") from None
            if not nops[-1]:
                raise self.err(tok, f"{kind}: an empty encoding")
        return str(kind), tuple(nops)

    def symbol_entry(self, meta, kids):
        found: dict[str, tuple[bytes, ...]] = {"nop": (), "thumb_nop": ()}
        for kind, nops in kids:
            found[kind] += nops
        self.draft.symbol_entry = SymbolEntry(found["nop"], found["thumb_nop"])

    def ctx_wraps(self, meta, kids):
        name_tok, *structs, inner, member = kids
        if str(name_tok) not in CTX_NAMES:
            raise self.err(name_tok, f"ctx must be one of {', '.join(CTX_NAMES)}")
        self.once(f"ctx {name_tok}", name_tok)
        wrapped = self.draft.ctxs.get(str(inner))
        if wrapped is None:
            raise self.err(inner, f"ctx {name_tok} wraps {inner}, which is not described above")
        entries = tuple(replace(e, field=f"{member}.{e.field}") for e in wrapped.entries)
        self.draft.ctxs[str(name_tok)] = CtxSpec(str(name_tok), tuple(str(s)[1:-1] for s in structs),
                                                 wrapped.size, entries)

    def ctx_entry(self, meta, kids):
        hw, fld, off, *sz = kids
        return CtxEntry(str(hw), str(fld), self.number(off), self.number(sz[0]) if sz else 0)

    # -- rules ---------------------------------------------------------------------------------
    def rule(self, meta, kids):
        conds = tuple(k for k in kids if isinstance(k, (Flag, Compare, Member)))
        acts = tuple(k for k in kids if not isinstance(k, (Flag, Compare, Member)))
        return Rule(conds, acts, meta.line, meta.column, self._included_from())

    def otherwise(self, meta, kids):
        return Rule((), tuple(kids), meta.line, meta.column, self._included_from())

    def _included_from(self) -> str:
        return self.path if self.including else ""

    def _flag_name(self, tok) -> str:
        if str(tok) not in CLASSES | FLAGS:
            known = ", ".join(sorted(CLASSES | FLAGS))
            raise self.err(tok, f"unknown condition {str(tok)!r} (known: {known})")
        return str(tok)

    def _quantity(self, tok) -> str:
        if str(tok) not in NUMERIC:
            known = ", ".join(sorted(NUMERIC))
            raise self.err(tok, f"unknown quantity {str(tok)!r} (known: {known})")
        return str(tok)

    def flag(self, meta, kids):
        return Flag(self._flag_name(kids[0]))

    def not_flag(self, meta, kids):
        return Flag(self._flag_name(kids[0]), negated=True)

    def compare(self, meta, kids):
        return Compare(self._quantity(kids[0]), str(kids[1]), self.number(kids[2]))

    def member(self, meta, kids):
        return Member(self._quantity(kids[0]), tuple(self.number(t) for t in kids[1:]))

    # -- actions -------------------------------------------------------------------------------
    def regs_action(self, meta, kids):
        for t in kids[1:]:
            if str(t) not in REG_OPTIONS:
                known = ", ".join(sorted(REG_OPTIONS))
                raise self.err(t, f"unknown regs() option {str(t)!r} (known: {known})")
        options = {str(t) for t in kids[1:]}
        return Regs(str(kids[0]), "even" in options, "split" in options,
                    "per_member" in options, "per_field" in options,
                    line=meta.line, column=meta.column)

    def chunks(self, meta, kids):
        return Chunks(str(kids[0]), str(kids[1]), line=meta.line, column=meta.column)

    def stack(self, meta, kids):
        align: int | str | None = None
        if kids:
            text = str(kids[0])
            if text == "natural":
                align = "natural"
            elif text[0].isdigit():
                align = self.number(kids[0])
            else:
                raise self.err(kids[0], f"stack alignment is a number or natural, not {text}")
        return Stack(align, line=meta.line, column=meta.column)

    def byref(self, meta, kids):
        return ByRef(line=meta.line, column=meta.column)

    def sret_action(self, meta, kids):
        return Sret(line=meta.line, column=meta.column)

    def none(self, meta, kids):
        return NoPlace(line=meta.line, column=meta.column)

    def unavailable(self, meta, kids):
        return Unavailable(str(kids[0])[1:-1], line=meta.line, column=meta.column)

    # -- the whole description -----------------------------------------------------------------
    def start(self, meta, kids):
        name_tok = kids[0]
        d = self.draft
        props = d.props
        for tok in d.closes:
            if str(tok) not in d.pools:
                raise self.err(tok, f"unknown register pool {tok}")
        for key in ("pointer", "endian", "slot", "stack_base"):
            if key not in props:
                raise self.err(meta, f"arch {name_tok}: missing `{key}`")
        pointer_size = self.number(props["pointer"], meta)
        # A ctx field's size defaults to the word.
        ctxs = {k: replace(c, entries=tuple(replace(e, size=e.size or pointer_size)
                                            for e in c.entries))
                for k, c in d.ctxs.items()}
        endian = props["endian"]
        if endian not in ("little", "big"):
            raise self.err(meta, f"endian must be little or big, not {endian}")
        if "args" not in d.rules or "ret" not in d.rules:
            raise self.err(meta, f"arch {name_tok}: needs both `args` and `ret` rules")
        for rules in d.rules.values():
            for rule in rules:
                for act in rule.actions:
                    for pool in act.pools:
                        if pool not in d.pools:
                            raise self.err(act, f"unknown register pool {pool}")
        # A register is known when a pool, a ctx or the DWARF facts name it (arm64's x8 is in
        # no pool: no argument is ever placed in it).
        known = {r for regs in d.pools.values() for r in regs}
        known.update(e.hwreg for c in d.ctxs.values() for e in c.entries)
        known.update(d.dwarf.regs.values() if d.dwarf else ())
        for what, tok, path in d.named_regs:
            if str(tok) not in known:
                raise AbiError(f"{path}:{tok.line}:{tok.column}: unknown {what} register {tok} "
                               "(in no register pool, ctx or dwarf list)")
        return Convention(
            name=str(name_tok),
            path=self.path,
            names=tuple(d.names),
            families=tuple(d.families),
            elf_machine=d.elf,
            pointer_size=pointer_size,
            byte_order=endian,
            max_align=self.number(props.get("max_align", props["pointer"]), meta),
            slot=self.number(props["slot"], meta),
            stack_base=self.number(props["stack_base"], meta),
            shared_slots=props.get("shared_slots", "no") == "yes",
            pools=dict(d.pools),
            close_on_miss=frozenset(str(t) for t in d.closes),
            sret_mode=d.sret_mode,
            sret_reg=d.sret_reg,
            sret_exit=d.sret_exit,
            arg_rules=d.rules["args"],
            ret_rules=d.rules["ret"],
            ctxs=ctxs,
            dwarf=d.dwarf,
            symbol_entry=d.symbol_entry,
            hfa_max_members=self.number(props.get("hfa_max_members", "0"), meta),
            sysv_max_size=self.number(props.get("sysv_max_size", "0"), meta),
            clang_triple=d.clang,
            libc_dirs=d.libc,
            bpf_syscall=(self.number(props["bpf_syscall"], meta) if "bpf_syscall" in props
                         else None),
            address_spaces=self._address_spaces(props.get("address_spaces", "shared"), meta),
        )
