"""The jinja2 environment: templates from `btfgen.resources`, strict about undefined names, and
one identifier filter per target language (`c`, `py`), so a name from BTF reaches the output
only as an identifier of that language."""

from __future__ import annotations

import jinja2

from btfgen.codegen.names import c_ident, py_ident
from btfgen.resources import data_dir

_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        env = jinja2.Environment(
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
        # `a.b` in a template is a call of env.getattr (3 million a whole kernel): jinja's is a
        # Python function trying the attribute, then an item, then Undefined. Every template
        # reads attributes of view objects that have them all, so the builtin does (a missing
        # one is an AttributeError, as loud as StrictUndefined), with no Python frame a read.
        env.getattr = getattr  # type: ignore[method-assign]
        _ENV = env
    return _ENV
