"""The jinja2 environment: templates from `btfgen.resources`, strict about undefined names, and
one identifier filter per target language (`c`, `py`), so a name from BTF reaches the output
only as an identifier of that language. Their compiled code is kept in the user's cache
(`btfgen.resources.cache_dir`): compiling them is a tenth of a second of every run."""

from __future__ import annotations

import hashlib
from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst

from btfgen.codegen.names import c_ident, py_ident
from btfgen.resources import cache_dir, data_dir, write_cached

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


class _Template(jinja2.Template):
    def render(self, *args, **kwargs) -> str:
        """As jinja2's (this environment is not async), and then the context let go of what it
        was given. A template with macros leaves its context in a reference cycle (each
        macro's closure holds it), which a run with the collector paused (btfgen.gcpause)
        frees only at the end: with it would stay every view and text block it was given, a
        whole kernel's header alone 100 MB more at the peak."""
        ctx = self.new_context(dict(*args, **kwargs))
        try:
            return self.environment.concat(self.root_render_func(ctx))  # type: ignore
        except Exception:
            self.environment.handle_exception()
        finally:
            ctx.vars.clear()
            ctx.parent.clear()  # the copy `new_context` made of the arguments and globals


class _Environment(jinja2.Environment):
    code_generator_class = _CodeGenerator
    template_class = _Template


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """jinja2's cache, whose entries are keyed by the template's path and checked against its
    source, here also against what else makes the code: jinja2's version and this module (the
    code generator above, the environment's options below). Written as `resources` writes the
    cache: whole or not at all, never an error."""

    def __init__(self, directory: Path):
        super().__init__(str(directory), "jinja-%s.cache")
        made_by = f"{jinja2.__version__}\0".encode() + Path(__file__).read_bytes()
        self.salt = hashlib.sha256(made_by).hexdigest().encode()

    def get_source_checksum(self, source: str) -> str:
        return hashlib.sha1(self.salt + source.encode("utf-8")).hexdigest()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        write_cached(Path(self._get_cache_filename(bucket)), bucket.write_bytecode)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    directory = cache_dir()
    try:
        return None if directory is None else _BytecodeCache(directory)
    except OSError:  # this module's source unreadable: nothing to key the entries by
        return None


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
            bytecode_cache=_bytecode_cache(),
        )
        env.filters["c"] = c_ident
        env.filters["py"] = py_ident
        _ENV = env
    return _ENV
