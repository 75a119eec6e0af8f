"""The ABI description language: parse a `.abi` file into a frozen `Convention`.

The grammar is `grammars/abi.lark` (LALR). Every rule and action keeps its line and column so the
engine can say which rule placed a value and a broken description points at its own text. No
parse tree leaves this module; every syntax or meaning error is an `AbiError` "file:line:col: ...".

The language, statement by statement (`#` starts a comment):

  arch NAME { ... }            one architecture; NAME is its canonical name
  names N...;                  other exact names (uname -m spellings)
  family N...;                 shared names (kernel ARCH, __TARGET_ARCH_*) picked by pointer size
  elf EM_...;                  the ELF e_machine that means this arch
  pointer N; endian little|big; max_align N; slot N;
  stack_base N;                where stack arguments start, bytes above the entry SP
  shared_slots yes;            registers are the first stack slots (ppc64 parameter save area)
  regs POOL = R, R, ...;       an ordered register pool
  close_on_miss POOL;          after one failed allocation the pool gives nothing more
  sret arg; | sret reg R;      hidden struct-return pointer: as a first argument, or in R
  sret_exit R;                 the callee returns that pointer in R (readable at exit)
  args { RULE... }  ret { RULE... }
  ctx pt_regs|ftrace_regs "struct" ... size N { HWREG = FIELD @ OFFSET [size N]; ... sp = ...; }
  dwarf cfa N { HWREG = DWARFNO; ... sp = DWARFNO; }
                               DWARF facts: at the first instruction the CFA (call frame address,
                               what DW_OP_call_frame_cfa and most frame bases mean) is the entry
                               SP + N; the psABI's DWARF numbers of the registers that matter

A RULE is `when COND, COND... => ACTION | ACTION...;` or `otherwise => ...;`. Conditions:
a class (integer bool enum pointer float aggregate scalar), a flag (signed, variadic = the
function is variadic, hfa = AArch64 homogeneous FP aggregate (unions included), sysv_memory =
x86-64 class MEMORY, int_mode / float_mode = GCC gives the value an integer machine mode of at
most 8 bytes / a floating-point one: for an aggregate, int_mode fails when it holds an array of
a size no mode has (char[3]: BLKmode), float_mode holds for a struct one float field spans,
struct { double d; }, nesting included), `not FLAG`, `size|align|hfa_members|bitfield_align OP N`
or `... in (N, ...)`; bitfield_align = the largest natural alignment of the declared type of a
direct bitfield member (0 without one), which packing does not lower. Actions, tried left to
right until one finds room:

  regs(POOL[, even][, split][, per_member])  ceil(size/word) consecutive registers; `even` starts
        at an even index; `split` puts what does not fit on the stack (only while the stack is
        still empty, or always with shared_slots); `per_member` one register per HFA member
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
from dataclasses import dataclass, field
from pathlib import Path

import lark

from btfgen.errors import AbiError
from btfgen.resources import data_dir

# What a condition may test (see btfgen/abi/classify.py for their meaning).
CLASSES = frozenset({"integer", "bool", "enum", "pointer", "float", "aggregate", "scalar"})
FLAGS = frozenset({"signed", "variadic", "hfa", "sysv_memory", "int_mode", "float_mode"})
NUMERIC = frozenset({"size", "align", "hfa_members", "bitfield_align"})
REG_OPTIONS = frozenset({"even", "split", "per_member"})
CTX_NAMES = ("pt_regs", "ftrace_regs")
_COND_KINDS = ("flag", "not_flag", "compare", "member")


@dataclass(frozen=True, slots=True)
class Cond:
    kind: str  # "flag" | "not_flag" | "compare" | "member"
    name: str
    op: str = ""
    values: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Action:
    kind: str  # "regs" | "chunks" | "stack" | "byref" | "sret" | "none" | "unavailable"
    pools: tuple[str, ...] = ()
    options: frozenset[str] = frozenset()
    align: int | str | None = None  # stack: a number, "natural", or None (the slot size)
    reason: str = ""
    line: int = 0
    column: int = 0


@dataclass(frozen=True, slots=True)
class Rule:
    conds: tuple[Cond, ...]  # all must hold; empty for `otherwise`
    actions: tuple[Action, ...]  # tried in order, the first that finds a place wins
    line: int
    column: int

    def where(self, path: str) -> str:
        return f"{path}:{self.line}:{self.column}"


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

    @property
    def target_arch(self) -> str:
        """libbpf's __TARGET_ARCH_<x> spelling: the family (the kernel's ARCH), else the name."""
        return self.families[0] if self.families else self.name

    def __repr__(self) -> str:
        return f"Convention({self.name!r}, {self.path!r})"


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = (data_dir("grammars") / "abi.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def parse_file(path: str | Path, display: str | None = None) -> Convention:
    """`display` names the file in messages and layouts (default: `path` as given)."""
    path = Path(path)
    name = display or str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise AbiError(f"{name}: {e.strerror or e}") from None
    return parse_text(text, name)


def parse_text(text: str, path: str = "<abi>") -> Convention:
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedInput as e:
        raise AbiError(f"{path}:{e.line}:{e.column}: {_describe(e, text)}") from None
    return _Builder(path).build(tree)


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


class _Builder:
    """Tree → Convention, checking meaning (known pools, conditions, registers) as it goes."""

    def __init__(self, path: str):
        self.path = path

    def err(self, meta_or_token, what: str) -> AbiError:
        line = getattr(meta_or_token, "line", 0)
        col = getattr(meta_or_token, "column", 0)
        return AbiError(f"{self.path}:{line}:{col}: {what}")

    def build(self, tree: lark.Tree) -> Convention:
        name_tok, *stmts = tree.children
        props: dict[str, str] = {}
        names: list[str] = []
        families: list[str] = []
        elf = None
        pools: dict[str, tuple[str, ...]] = {}
        close: set[str] = set()
        sret_mode, sret_reg, sret_exit = "arg", None, None
        rules: dict[str, tuple[Rule, ...]] = {}
        ctxs: dict[str, CtxSpec] = {}
        closes = []
        dwarf = None
        for st in stmts:
            kind = st.data
            kids = st.children
            if kind == "names":
                names += [str(t) for t in kids]
            elif kind == "family":
                families += [str(t) for t in kids]
            elif kind == "elf":
                elf = str(kids[0])
            elif kind == "prop":
                props[str(kids[0])] = str(kids[1])
            elif kind == "regs":
                if str(kids[0]) in pools:
                    raise self.err(kids[0], f"register pool {kids[0]} declared twice")
                pools[str(kids[0])] = tuple(str(t) for t in kids[1:])
            elif kind == "close":
                closes.append(kids[0])
            elif kind == "sret_arg":
                sret_mode, sret_reg = "arg", None
            elif kind == "sret_reg":
                sret_mode, sret_reg = "reg", str(kids[0])
            elif kind == "sret_exit":
                sret_exit = str(kids[0])
            elif kind == "rules":
                rules[str(kids[0])] = tuple(self.rule(r) for r in kids[1:])
            elif kind == "ctx":
                spec = self.ctx(st)
                ctxs[spec.name] = spec
            elif kind == "dwarf":
                dwarf = self.dwarf(st)
        for tok in closes:
            if str(tok) not in pools:
                raise self.err(tok, f"unknown register pool {tok}")
            close.add(str(tok))
        for key in ("pointer", "endian", "slot", "stack_base"):
            if key not in props:
                raise self.err(tree.meta, f"arch {name_tok}: missing `{key}`")
        pointer_size = self.number(props["pointer"], tree.meta)
        # A ctx field's size defaults to the word.
        ctxs = {
            k: CtxSpec(c.name, c.structs, c.size, tuple(
                CtxEntry(e.hwreg, e.field, e.offset, e.size or pointer_size) for e in c.entries))
            for k, c in ctxs.items()
        }
        endian = props["endian"]
        if endian not in ("little", "big"):
            raise self.err(tree.meta, f"endian must be little or big, not {endian}")
        if "args" not in rules or "ret" not in rules:
            raise self.err(tree.meta, f"arch {name_tok}: needs both `args` and `ret` rules")
        all_regs = {r for regs in pools.values() for r in regs}
        for which, rs in rules.items():
            for rule in rs:
                for act in rule.actions:
                    for pool in act.pools:
                        if pool not in pools:
                            raise self.err(act, f"unknown register pool {pool}")
                    if act.kind == "sret" and which != "ret":
                        raise self.err(act, "`sret` is a return action")
        if sret_reg is not None and sret_reg not in all_regs | {sret_reg}:
            raise self.err(tree.meta, f"unknown sret register {sret_reg}")
        return Convention(
            name=str(name_tok),
            path=self.path,
            names=tuple(names),
            families=tuple(families),
            elf_machine=elf,
            pointer_size=pointer_size,
            byte_order=endian,
            max_align=self.number(props.get("max_align", props["pointer"]), tree.meta),
            slot=self.number(props["slot"], tree.meta),
            stack_base=self.number(props["stack_base"], tree.meta),
            shared_slots=props.get("shared_slots", "no") == "yes",
            pools=pools,
            close_on_miss=frozenset(close),
            sret_mode=sret_mode,
            sret_reg=sret_reg,
            sret_exit=sret_exit,
            arg_rules=rules["args"],
            ret_rules=rules["ret"],
            ctxs=ctxs,
            dwarf=dwarf,
        )

    def number(self, text: str, meta) -> int:
        try:
            return int(text, 0)
        except ValueError:
            raise self.err(meta, f"expected a number, got {text!r}") from None

    def rule(self, tree: lark.Tree) -> Rule:
        if tree.data == "otherwise":
            conds: tuple[Cond, ...] = ()
            acts = tree.children
        else:
            conds = tuple(self.cond(c) for c in tree.children if c.data in _COND_KINDS)
            acts = [c for c in tree.children if c.data not in _COND_KINDS]
        return Rule(conds, tuple(self.action(a) for a in acts), tree.meta.line, tree.meta.column)

    def cond(self, tree: lark.Tree) -> Cond:
        kind = tree.data
        name_tok = tree.children[0]
        name = str(name_tok)
        if kind in ("flag", "not_flag"):
            if name not in CLASSES | FLAGS:
                known = ", ".join(sorted(CLASSES | FLAGS))
                raise self.err(name_tok, f"unknown condition {name!r} (known: {known})")
            return Cond(kind, name)
        if name not in NUMERIC:
            known = ", ".join(sorted(NUMERIC))
            raise self.err(name_tok, f"unknown quantity {name!r} (known: {known})")
        if kind == "compare":
            return Cond(kind, name, str(tree.children[1]), (int(str(tree.children[2]), 0),))
        return Cond(kind, name, "in", tuple(int(str(t), 0) for t in tree.children[1:]))

    def action(self, tree: lark.Tree) -> Action:
        kind = tree.data
        kids = tree.children
        pos = {"line": tree.meta.line, "column": tree.meta.column}
        if kind == "regs":
            options = frozenset(str(t) for t in kids[1:])
            for t in kids[1:]:
                if str(t) not in REG_OPTIONS:
                    known = ", ".join(sorted(REG_OPTIONS))
                    raise self.err(t, f"unknown regs() option {str(t)!r} (known: {known})")
            return Action("regs", pools=(str(kids[0]),), options=options, **pos)
        if kind == "chunks":
            return Action("chunks", pools=(str(kids[0]), str(kids[1])), **pos)
        if kind == "stack":
            align: int | str | None = None
            if kids:
                text = str(kids[0])
                if text == "natural":
                    align = "natural"
                elif text[0].isdigit():
                    align = int(text, 0)
                else:
                    raise self.err(kids[0], f"stack alignment is a number or natural, not {text}")
            return Action("stack", align=align, **pos)
        if kind == "unavailable":
            return Action("unavailable", reason=str(kids[0])[1:-1], **pos)
        return Action({"sret_action": "sret"}.get(kind, kind), **pos)

    def dwarf(self, tree: lark.Tree) -> DwarfFacts:
        cfa, *pairs = tree.children
        regs: dict[int, str] = {}
        for name, num in zip(pairs[::2], pairs[1::2]):
            n = int(str(num), 0)
            if n in regs or str(name) in regs.values():
                raise self.err(name, f"DWARF register {name} = {n} given twice")
            regs[n] = str(name)
        if "sp" not in regs.values():
            raise self.err(tree.meta, "dwarf: no `sp` entry (the stack pointer's number)")
        return DwarfFacts(int(str(cfa), 0), regs)

    def ctx(self, tree: lark.Tree) -> CtxSpec:
        name_tok, *rest = tree.children
        if str(name_tok) not in CTX_NAMES:
            raise self.err(name_tok, f"ctx must be one of {', '.join(CTX_NAMES)}")
        structs = []
        i = 0
        while isinstance(rest[i], lark.Token) and rest[i].type == "STRING":
            structs.append(str(rest[i])[1:-1])
            i += 1
        size = int(str(rest[i]), 0)
        entries = []
        for e in rest[i + 1:]:
            hw, fld, off, *sz = e.children
            entries.append(CtxEntry(str(hw), str(fld), int(str(off), 0),
                                    int(str(sz[0]), 0) if sz else 0))
        if not any(e.hwreg == "sp" for e in entries):
            raise self.err(tree.meta, f"ctx {name_tok}: no `sp` entry (the entry stack pointer)")
        return CtxSpec(str(name_tok), tuple(structs), size, tuple(entries))
