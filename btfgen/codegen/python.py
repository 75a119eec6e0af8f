"""The generated Python module: descriptors printed as literals (strings through repr, so no
name from BTF can end a literal), shared type descriptors printed once, the runtime embedded."""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.codegen import embed
from btfgen.decoder import runtime
from btfgen.probe import spec_format

# Exact classes, looked up in a set: the descriptors are made by describe.py, never subclassed,
# and a kernel's module asks this of about a million tuples.
_INTERNED = frozenset((runtime.CompositeType, runtime.EnumType, runtime.ArrayType))
_TYPES = frozenset(runtime.TYPES.values())


class Literals:
    """Python literal text for descriptors; struct/union/enum/array descriptors that are the
    same object (one type) become one entry of the module's `_T` list."""

    def __init__(self):
        self.entries: list[str] = []
        self._text: dict[int, str] = {}  # id of a type or value descriptor -> its text
        self._keep: list[object] = []  # keeps those ids from being reused

    def type_text(self, desc: tuple) -> str:
        """A type descriptor: `_T[i]` for a shared kind, else its literal (memoised)."""
        hit = self._text.get(id(desc))
        if hit is None:
            if type(desc) in _INTERNED:
                body = self._tuple(desc)
                hit = f"_T[{len(self.entries)}]"
                self.entries.append(body)
            else:
                hit = repr(tuple(desc))  # scalars: only str, int, bool
            self._text[id(desc)] = hit
            self._keep.append(desc)
        return hit

    def value_text(self, v: runtime.ValueDesc) -> str:
        """A value descriptor, as the tuple literal `runtime.ValueDesc.check` rebuilds
        (memoised: describe.py hands a value that recurs across prototypes one descriptor, and a
        kernel's 89,000 arguments and returns are 28,000 of them)."""
        hit = self._text.get(id(v))
        if hit is None:
            hit = self._text[id(v)] = (
                f"({v.name!r}, {self.type_text(v.type)}, {v.size!r}, {v.pieces!r}, "
                f"{v.by_ref!r}, {v.unavailable!r})")  # Piece reprs as a plain tuple
            self._keep.append(v)
        return hit

    def capture_text(self, c: runtime.CaptureDesc) -> str:
        """A capture descriptor, as the tuple literal `runtime.CaptureDesc.check` rebuilds."""
        rest = ", ".join(repr(x) for x in (c[3:] if c.why else c[3:-1]))
        return f"({c.name!r}, {c.kind!r}, {self.type_text(c.type)}, {rest})"

    def text(self, obj) -> str:
        if isinstance(obj, tuple):
            return self._tuple(obj)
        if isinstance(obj, dict):
            return "{" + ", ".join(f"{self.text(k)}: {self.text(v)}" for k, v in obj.items()) + "}"
        if obj is None or isinstance(obj, (bool, int, str)):
            return repr(obj)
        raise TypeError(f"no literal for {type(obj).__name__}")

    def _tuple(self, obj: tuple) -> str:
        # Inside a type descriptor: member tuples, nested type descriptors, enum name maps.
        parts = []
        for x in obj:
            if type(x) in _TYPES:
                parts.append(self.type_text(x))
            else:
                parts.append(self.text(x))
        inner = ", ".join(parts)
        return f"({inner},)" if len(obj) == 1 else f"({inner})"


@dataclass(frozen=True, slots=True)
class ModuleView:
    title: str
    arch: str
    byte_order: str
    pointer_size: int
    ctx: str
    runtime: str
    types: tuple[str, ...]
    protos: tuple[str, ...]  # string literals: each prototype's descriptor source
    functions: tuple[tuple[str, str], ...]  # (key literal, (name, btf id, proto index) literal)
    spec_order: str  # struct format prefix for the spec table
    max_ops: int
    spec_head_format: str = spec_format.struct_format(spec_format.SPEC_HEAD)
    op_format: str = spec_format.struct_format(spec_format.OP)


def runtime_source() -> str:
    """The runtime's code, spec_format's (the record header it reads) first, as one text."""
    return embed.source(runtime)
