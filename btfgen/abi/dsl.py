"""The ABI description language's parser: a `.abi` file into a frozen `Convention`
(btfgen/abi/convention.py). The language is docs/abi-language.md; its grammar
grammars/abi.lark (LALR).

Every rule and action keeps its line and column so the engine can say which rule placed a value
and a broken description points at its own text. No parse tree leaves this module; every syntax
or meaning error is an `AbiError` "file:line:col: ...".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path

import lark
from lark import v_args

from btfgen.abi.convention import (
    CLASSES,
    FLAGS,
    NUMERIC,
    REG_NUMBERED,
    REG_OPTIONS,
    ByRef,
    Chunks,
    Compare,
    Convention,
    CtxEntry,
    CtxSpec,
    DwarfFacts,
    Flag,
    Member,
    NoPlace,
    Refuse,
    Regs,
    Rule,
    Sret,
    Stack,
    SymbolEntry,
    Unavailable,
)
from btfgen.errors import AbiError
from btfgen.layout import CTX_NAMES
from btfgen.resources import lark_parser


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    return lark_parser("abi.lark", parser="lalr", propagate_positions=True,
                       maybe_placeholders=False, start=["start", "body"])


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


@dataclass(frozen=True)
class _Without:
    """`without args "why"` of a ctx, until the ctx statement takes it."""

    why: str


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
    rules: dict = field(default_factory=dict)  # "args" | "ret" -> rules
    ctx_rules: dict = field(default_factory=dict)  # (ctx name, "args" | "ret") -> rules
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
        ctx = None
        if rules and isinstance(rules[0], lark.Token):
            ctx, *rules = rules
            if str(ctx) not in CTX_NAMES:
                raise self.err(ctx, f"ctx must be one of {', '.join(CTX_NAMES)}")
        self.once(f"{which} rules" + (f" of ctx {ctx}" if ctx else ""), which)
        for rule in rules:
            for act in rule.actions:
                if isinstance(act, Sret) and str(which) != "ret":
                    raise self.err(act, "`sret` is a return action")
                if isinstance(act, Regs) and act.after_args and str(which) != "ret":
                    raise self.err(act, "`after_args` places a return value")
                if isinstance(act, Refuse) and ctx is None:
                    # The native ABI always takes a function: only a ctx's rules refuse one.
                    raise self.err(act, "`refuse` is for a ctx's own rules (`args CTX { }`)")
        if ctx is None:
            self.draft.rules[str(which)] = tuple(rules)
        else:
            self.draft.ctx_rules[str(ctx), str(which)] = tuple(rules)

    def ctx_slots(self, meta, kids):
        name_tok, pool = kids
        if str(name_tok) not in CTX_NAMES:
            raise self.err(name_tok, f"ctx must be one of {', '.join(CTX_NAMES)}")
        self.once(f"ctx {name_tok}", name_tok)
        regs = self.draft.pools.get(str(pool))
        if regs is None:
            raise self.err(pool, f"ctx {name_tok} slots {pool}: no such register pool above")
        # Element K of the array: C spells it ctx[K] (the field is the suffix after `ctx`).
        entries = tuple(CtxEntry(r, f"[{k}]", 8 * k, 8) for k, r in enumerate(regs))
        self.draft.ctxs[str(name_tok)] = CtxSpec(str(name_tok), (), 8 * len(regs), entries,
                                                 slots=True)

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
        without = kids.pop() if isinstance(kids[-1], _Without) else None
        name_tok, *structs, inner, member = kids
        if str(name_tok) not in CTX_NAMES:
            raise self.err(name_tok, f"ctx must be one of {', '.join(CTX_NAMES)}")
        self.once(f"ctx {name_tok}", name_tok)
        wrapped = self.draft.ctxs.get(str(inner))
        if wrapped is None:
            raise self.err(inner, f"ctx {name_tok} wraps {inner}, which is not described above")
        entries = tuple(replace(e, field=f"{member}.{e.field}") for e in wrapped.entries)
        names = tuple(str(s)[1:-1] for s in structs)
        self.draft.ctxs[str(name_tok)] = CtxSpec(str(name_tok), names, wrapped.size, entries,
                                                 without_args=without.why if without else "")

    def ctx_without(self, meta, kids):
        why = str(kids[0])[1:-1]
        if not why.strip():
            raise self.err(kids[0], "without args: say why (a non-empty string)")
        return _Without(why)

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
        options: dict[str, int] = {}
        for t in kids[1:]:
            if t.type == "NUMBER":
                if not options or next(reversed(options)) not in REG_NUMBERED:
                    raise self.err(t, "regs(): a number after an option that takes none")
                options[next(reversed(options))] = self.number(t)
                continue
            if str(t) not in REG_OPTIONS:
                known = ", ".join(sorted(REG_OPTIONS))
                raise self.err(t, f"unknown regs() option {str(t)!r} (known: {known})")
            options[str(t)] = 1
        for name in REG_NUMBERED & options.keys():
            if options[name] == 1 and not any(t.type == "NUMBER" for t in kids[1:]):
                raise self.err(meta, f"regs(): `{name}` takes a number")
        return Regs(str(kids[0]), "even" in options, "split" in options,
                    "per_member" in options, "per_field" in options, "after_args" in options,
                    options.get("below", 0), line=meta.line, column=meta.column)

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

    def refuse(self, meta, kids):
        return Refuse(str(kids[0])[1:-1], line=meta.line, column=meta.column)

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
        for (ctx, which) in d.ctx_rules:
            if ctx not in d.ctxs:
                raise self.err(meta, f"{which} rules of ctx {ctx}, which is not described")
        ctx_rules = {}
        for ctx in {c for c, _ in d.ctx_rules}:
            if (ctx, "args") not in d.ctx_rules or (ctx, "ret") not in d.ctx_rules:
                raise self.err(meta, f"ctx {ctx}: needs both `args {ctx}` and `ret {ctx}` rules")
            ctx_rules[ctx] = (d.ctx_rules[ctx, "args"], d.ctx_rules[ctx, "ret"])
        for rules in (*d.rules.values(), *d.ctx_rules.values()):
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
            ctx_rules=ctx_rules,
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
