"""Paths from an argument to a value in memory (`file->f_path.dentry->d_name.name`), resolved
against BTF once, at generation time, into the reads a decoder makes at each call.

A resolved `Path` is arch-neutral: where the argument itself lives (a register, a register pair,
the stack) is the placement's business; the path says what to do with its value. The value is
the argument's (bytes `within` it, for a member of a struct passed by value); each `Read` adds
its offset to the pointer in hand and loads from memory, and every read but the last loads the
pointer the next one starts from. So `file->f_path.dentry->d_name.name` is two reads: the
`dentry` pointer at `file + offsetof(f_path.dentry)`, then the `name` pointer at `dentry +
offsetof(d_name.name)` — and a string capture reads the string behind it.

Errors name the column of the step that failed, for the one line a user gets.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import lark

from btfgen.btf import measure
from btfgen.btf import types as T
from btfgen.btf.walk import named_members, strip
from btfgen.resources import lark_parser

RETVAL = "$retval"
# The BTF type tag the kernel puts on user-space pointers (`__user` with clang's btf_type_tag).
USER_TAG = "user"


class PathError(ValueError):
    """A path that does not fit the types: the message names the column (1-based)."""

    def __init__(self, message: str, column: int):
        super().__init__(f"column {column}: {message}")
        self.column = column


@dataclass(frozen=True, slots=True)
class Read:
    """One load from memory: at the pointer in hand plus `offset`."""

    offset: int
    # Whether the pointer read through points to user memory: True where its type carries the
    # `user` type tag, False where the BTF tags other pointers `user` and not this one, None
    # where the BTF tags none (a kernel built without __user tags; other tags such as
    # address_space(1) say nothing about this one): unknown.
    user: bool | None


@dataclass(frozen=True, slots=True)
class Path:
    text: str
    root: str  # the parameter's name, or RETVAL
    param: int | None  # its index in the prototype; None for the return value
    within: int  # bytes into the root's own value before any read (a by-value struct member)
    reads: tuple[Read, ...]
    type: T.Type  # what the path ends at, modifiers kept (`const char *`)
    bit_offset: int  # a bitfield's first bit within the bytes at the final address
    bit_size: int  # 0: not a bitfield
    whole: bool  # `*path`: the pointee as a whole
    # Where a pointer the path ends at points (a string read goes there): Read.user's rule,
    # with the path's `:user`/`:kernel` for what the BTF leaves open. None for other types.
    pointee_user: bool | None = None

    @property
    def size(self) -> int:
        """Bytes the final value occupies (a bitfield's: the bytes its bits span)."""
        if self.bit_size:
            return (self.bit_offset + self.bit_size + 7) // 8
        return measure.size_of(self.type)

    @property
    def in_memory(self) -> bool:
        return bool(self.reads)


# Steps as the grammar gives them; filter.lark makes the same ones.
@dataclass(frozen=True, slots=True)
class Arrow:
    name: str
    column: int


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    column: int


@dataclass(frozen=True, slots=True)
class Index:
    index: int
    column: int


Step = Arrow | Member | Index


@dataclass(frozen=True, slots=True)
class Syntax:
    """A path as written, before it meets the types."""

    text: str
    star: int  # leading stars: 1 is the whole pointee, more also what its pointers point to
    root: str
    root_column: int
    steps: tuple[Step, ...]
    memory: str | None = None  # `:user` / `:kernel`: the memory of loads the BTF leaves open


@functools.cache
def _parser() -> lark.Lark:
    return lark_parser("path.lark", start="path", parser="lalr", maybe_placeholders=False)


def parse(text: str, column: int = 1) -> Syntax:
    """`text` as a path; `column` is where it starts in the line the user wrote (for errors)."""
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedInput as e:
        raise PathError(f"not a path: {text.strip()!r}", column + e.column - 1) from None
    return syntax_of(tree, text, column)


def syntax_of(tree: lark.Tree, text: str, column: int = 1) -> Syntax:
    """A `path` subtree (of path.lark or a grammar that imports it) as a `Syntax`."""
    at = column - 1
    star = 0
    tokens = list(tree.children)
    if isinstance(tokens[0], lark.Token) and tokens[0].type.endswith("STAR"):
        star = len(tokens.pop(0))
    root = tokens.pop(0)
    steps: list[Step] = []
    memory = None
    for step in tokens:
        token = step.children[0]
        if step.data.endswith("memory"):
            memory = str(token)
            continue
        where = at + token.column
        if step.data == "arrow":
            steps.append(Arrow(str(token), where))
        elif step.data == "member":
            steps.append(Member(str(token), where))
        else:
            steps.append(Index(int(str(token), 0), where))
    text = text.strip()
    if memory:
        text = text.rsplit(":", 1)[0].rstrip()  # the path's name in outputs, as C spells it
    return Syntax(text, star, str(root), at + root.column, tuple(steps), memory)


def resolve(func: T.Func, path: str | Syntax, *, at_exit: bool = False,
            separate_spaces: str | None = None) -> Path:
    """The reads `path` makes from an argument of `func` (or from its return value, written
    `$retval`, at exit), or a PathError naming the column that does not fit.

    `separate_spaces`: the arch's name where kernel and user memory overlap in addresses
    (s390x) and the reads are a kernel probe's. There a load the BTF says nothing about cannot
    be tried in kernel memory and then in user memory, as elsewhere: both reads may succeed,
    one with the wrong bytes. The path must then name its memory (`:user`, `:kernel`)."""
    syntax = parse(path) if isinstance(path, str) else path
    proto = func.proto
    names = [p.name for p in proto.params]
    if syntax.root in names:
        param: int | None = names.index(syntax.root)
        t = proto.params[param].type
    elif syntax.root in (RETVAL, "retval"):
        if not at_exit:
            raise PathError(f"{func.name}: the return value is known only at exit",
                            syntax.root_column)
        param, t = None, proto.ret
        if isinstance(strip(t), T.Void):
            raise PathError(f"{func.name} returns void", syntax.root_column)
    else:
        known = ", ".join(n for n in names if n) or "none named"
        raise PathError(f"{func.name} has no parameter {syntax.root!r} (parameters: {known})",
                        syntax.root_column)
    p = _Walk(func, syntax, param, t).run()
    final = strip(p.type)
    if isinstance(final, T.Ptr) and not p.whole:
        p = replace(p, pointee_user=user_memory(final))
    if syntax.memory is not None:
        said = syntax.memory == "user"
        p = replace(p, reads=tuple(r if r.user is not None else Read(r.offset, said)
                                   for r in p.reads),
                    pointee_user=said if p.pointee_user is None else p.pointee_user)
    elif separate_spaces and any(r.user is None for r in p.reads):
        raise memory_unknown(syntax, separate_spaces)
    return p


def memory_unknown(syntax: Syntax, arch: str) -> PathError:
    """Where a load's memory cannot be guessed (`resolve`'s `separate_spaces`)."""
    return PathError(f"on {arch} kernel and user addresses overlap, and this BTF has no "
                     f"__user tags to say which memory {syntax.text} reads: write "
                     f"{syntax.text}:user or {syntax.text}:kernel", syntax.root_column)


class _Walk:
    """The state of one path's resolution: the type in hand and where its value is (`pending`
    bytes past the root's value, or past the pointer the last read gave)."""

    def __init__(self, func: T.Func, syntax: Syntax, param: int | None, t: T.Type):
        self.func, self.syntax, self.param, self.t = func, syntax, param, t
        self.within: int | None = None  # set at the first dereference
        self.pending = 0
        self.reads: list[Read] = []
        self.through: T.Ptr | None = None  # the pointer the next read goes through
        self.bits = (0, 0)

    def run(self) -> Path:
        for step in self.syntax.steps:
            if self.bits[1]:
                raise PathError("a bitfield has no members", step.column)
            if isinstance(step, Arrow):
                self._deref(step.column)
                self._member(step.name, step.column, "->")
            elif isinstance(step, Member):
                self._member(step.name, step.column, ".")
            else:
                self._index(step.index, step.column)
        if self.syntax.star:
            self._deref(self.syntax.root_column - 1)
        if self.through is not None:
            self.reads.append(Read(self.pending, user_memory(self.through)))
        within = self.pending if self.within is None else self.within
        whole = bool(self.syntax.star)
        return Path(self.syntax.text, self.syntax.root,
                    self.param, within, tuple(self.reads), self.t, *self.bits, whole)

    def _deref(self, column: int) -> None:
        """Follow the pointer in hand: the next steps are in what it points to."""
        ptr = strip(self.t)
        if not isinstance(ptr, T.Ptr):
            raise PathError(f"{_spell(self.t)} is not a pointer", column)
        target = strip(ptr.type)
        if isinstance(target, (T.Void, T.FuncProto)):
            raise PathError(f"{_spell(self.t)} points to nothing with a size", column)
        if isinstance(target, T.Fwd):
            raise PathError(f"{_spell(ptr.type)} is only declared in this BTF, not defined",
                            column)
        if isinstance(target, T.Unknown):  # nothing of it can be measured or read
            raise PathError(f"{_spell(self.t)} points to type {target.id}, of "
                            f"{target.reason}", column)
        if self.through is None:
            self.within = self.pending  # the pointer is (part of) the root's own value
        else:
            self.reads.append(Read(self.pending, user_memory(self.through)))
        self.through, self.t, self.pending = ptr, ptr.type, 0

    def _member(self, name: str, column: int, how: str) -> None:
        outer = strip(self.t)
        if isinstance(outer, T.Unknown):
            raise PathError(f"type {outer.id} is of {outer.reason}", column)
        if not isinstance(outer, T.Composite):
            what = "a pointer: use ->" if isinstance(outer, T.Ptr) and how == "." else \
                "not a struct or union"
            raise PathError(f"{_spell(self.t)} is {what}", column)
        for m, bit_offset in named_members(outer):
            if m.name == name:
                break
        else:
            raise PathError(f"{_spell(outer)} has no member {name!r}", column)
        if m.bitfield_size:
            self.pending += bit_offset // 8
            self.bits = (bit_offset % 8, m.bitfield_size)
        else:
            self.pending += bit_offset // 8
        self.t = m.type

    def _index(self, index: int, column: int) -> None:
        outer = strip(self.t)
        if isinstance(outer, T.Array):
            if outer.nelems and index >= outer.nelems:
                raise PathError(f"index {index} past the end of {_spell(self.t)} "
                                f"({outer.nelems} elements)", column)
            self.pending += index * measure.size_of(outer.elem)
            self.t = outer.elem
        elif isinstance(outer, T.Ptr):
            self._deref(column)
            self.pending = index * measure.size_of(self.t)
        else:
            raise PathError(f"{_spell(self.t)} is neither an array nor a pointer", column)


def user_memory(ptr: T.Ptr) -> bool | None:
    """Whether `ptr` points to user memory: True, False, or None (the BTF tags no pointer)."""
    t: T.Type = ptr.type
    while isinstance(t, (T.TypeTag, T.Const, T.Volatile, T.Restrict, T.Typedef)):
        if isinstance(t, T.TypeTag) and t.name == USER_TAG:
            return True
        if isinstance(t, T.Typedef):
            break
        t = t.type
    return False if _has_user_tags(ptr.table) else None


@functools.lru_cache(maxsize=8)
def _has_user_tags(table: T.TypeSource) -> bool:
    return any(isinstance(t, T.TypeTag) and t.name == USER_TAG
               for t in (table[i] for i in range(1, len(table))))


def _spell(t: T.Type) -> str:
    from btfgen.btf.cnames import c_spelling

    try:
        return c_spelling(t)
    except T.TypeWalkError:
        return f"type {t.id}"
