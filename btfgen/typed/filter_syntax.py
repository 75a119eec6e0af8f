"""A --filter option as written (`vfs_read: count > 4096 && file->f_flags & 0x800`): parsed by
grammars/filter.lark into frozen nodes that keep their column, before any type is looked at.

No lark tree leaves this module; a syntax error is a FilterError naming the column.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import lark

from btfgen.resources import data_dir, lark_parser
from btfgen.typed import path as P

# A string literal is compared byte by byte in the BPF program, unrolled: keep it short.
MAX_STRING = 64


class FilterError(ValueError):
    """A filter that does not parse or does not fit the types: the column is 1-based, in the
    option's text."""

    def __init__(self, message: str, column: int):
        super().__init__(f"column {column}: {message}")
        self.message, self.column = message, column


@dataclass(frozen=True, slots=True)
class IntLit:
    value: int
    column: int


@dataclass(frozen=True, slots=True)
class StrLit:
    value: bytes
    column: int


@dataclass(frozen=True, slots=True)
class Ref:
    """A path (`file->f_flags`, `count`, `$retval`), or an enum constant's name: which one is
    for the type checker to say."""

    syntax: P.Syntax
    column: int


@dataclass(frozen=True, slots=True)
class BitAnd:
    left: Node
    right: Node
    column: int  # of the `&`'s left operand: where the expression starts


@dataclass(frozen=True, slots=True)
class Compare:
    op: str
    left: Node
    right: Node
    column: int  # of the operator


@dataclass(frozen=True, slots=True)
class Prefix:
    ref: Ref
    literal: StrLit
    column: int


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    column: int


@dataclass(frozen=True, slots=True)
class And:
    left: Node
    right: Node
    column: int


@dataclass(frozen=True, slots=True)
class Or:
    left: Node
    right: Node
    column: int


Node = IntLit | StrLit | Ref | BitAnd | Compare | Prefix | Not | And | Or


@dataclass(frozen=True, slots=True)
class Filter:
    text: str  # the option as given
    func: str  # a function name or glob
    expr: Node


@functools.cache
def _parser() -> lark.Lark:
    return lark_parser("filter.lark", parser="lalr", import_paths=[str(data_dir("grammars"))],
                       maybe_placeholders=False, propagate_positions=True)


def parse(text: str) -> Filter:
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedInput as e:
        if ":" not in text:
            raise FilterError("expected `FUNC: EXPR`", 1) from None
        if isinstance(e, lark.UnexpectedEOF) or (isinstance(e, lark.UnexpectedToken)
                                                 and e.token.type == "$END"):
            raise FilterError("the expression ends too early", len(text.rstrip()) + 1) \
                from None
        got = text[e.pos_in_stream:].split(None, 1)[0][:20]
        raise FilterError(f"unexpected {got!r}", e.column) from None
    func, expr = tree.children
    return Filter(text, str(func), _Build(text).node(expr))


class _Build:
    def __init__(self, text: str):
        self.text = text

    def node(self, t: lark.Tree | lark.Token) -> Node:
        kind = t.data
        if kind == "path":
            return self._ref(t)
        if kind == "int_":
            token = t.children[0]
            return IntLit(int(str(token), 0), token.column)
        if kind == "str_":
            return _string(t.children[0])
        if kind == "prefix":
            path, literal = t.children
            return Prefix(self._ref(path), _string(literal), t.meta.column)
        if kind == "not_":
            return Not(self.node(t.children[0]), t.meta.column)
        if kind == "compare":
            left, op, right = t.children
            return Compare(str(op), self.node(left), self.node(right), op.column)
        a, b = (self.node(c) for c in t.children)
        return {"bitand": BitAnd, "and_": And, "or_": Or}[kind](a, b, t.meta.column)

    def _ref(self, t: lark.Tree) -> Ref:
        text = self.text[t.meta.start_pos:t.meta.end_pos]
        # path.lark's rules arrive namespaced by the import (`path__arrow`): syntax_of knows
        # them by their own names.
        steps = [lark.Tree(s.data.rsplit("__", 1)[-1], s.children)
                 if isinstance(s, lark.Tree) else s for s in t.children]
        syntax = P.syntax_of(lark.Tree("path", steps), text)
        return Ref(syntax, t.meta.column)


def _string(token: lark.Token) -> StrLit:
    body = str(token)[1:-1]
    out = bytearray()
    escapes = {"n": 10, "t": 9, "\\": 92, '"': 34, "0": 0}
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "x" and len(body) >= i + 4:
            try:
                out.append(int(body[i + 2:i + 4], 16))
            except ValueError:
                raise FilterError("\\x takes two hex digits", token.column + 1 + i) from None
            i += 4
        elif nxt in escapes:
            out.append(escapes[nxt])
            i += 2
        else:
            raise FilterError(f"unknown escape \\{nxt} (\\n \\t \\\\ \\\" \\0 \\xHH)",
                              token.column + 1 + i)
    if 0 in out:
        raise FilterError("a string compared with a C string cannot hold a NUL",
                          token.column)
    if len(out) > MAX_STRING:
        raise FilterError(f"a string literal of {len(out)} bytes: at most {MAX_STRING}",
                          token.column)
    return StrLit(bytes(out), token.column)
