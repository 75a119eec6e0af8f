"""The jinja2 environment: templates from `btfgen.resources`, strict about undefined names, and
one identifier filter per target language (`c`, `py`), so a name from BTF reaches the output
only as an identifier of that language."""

from __future__ import annotations

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst

from btfgen.codegen.names import c_ident, py_ident
from btfgen.resources import data_dir

_ENV: jinja2.Environment | None = None


class _CodeGenerator(CodeGenerator):
    """`a.b` in a template compiles to the builtin `getattr(a, "b")`, not to a call of jinja's
    `environment.getattr` (a Python function trying the attribute, then an item, then
    Undefined): a whole kernel's outputs read 3 million attributes, each of a view object that
    has it (a missing one is an AttributeError, as loud as StrictUndefined)."""

    @optimizeconst
    def visit_Getattr(self, node: nodes.Getattr, frame: Frame) -> None:
        self.write("getattr(")
        self.visit(node.node, frame)
        self.write(f", {node.attr!r})")


class _Environment(jinja2.Environment):
    code_generator_class = _CodeGenerator


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        env = _Environment(
            loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            autoescape=False,
            auto_reload=False,
        )
        env.filters["c"] = c_ident
        env.filters["py"] = py_ident
        _ENV = env
    return _ENV
