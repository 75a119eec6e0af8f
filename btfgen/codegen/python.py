"""The generated Python module: descriptors printed as literals (strings through repr, so no
name from BTF can end a literal), shared type descriptors printed once, the runtime embedded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from btfgen.decoder import spec_format

_INTERNED = ("struct", "union", "enum", "array")


class Literals:
    """Python literal text for descriptors; struct/union/enum/array descriptors that are the
    same object (one type) become one entry of the module's `_T` list."""

    def __init__(self):
        self.entries: list[str] = []
        self._text: dict[int, str] = {}  # id of a type descriptor -> its text
        self._keep: list[object] = []  # keeps those ids from being reused

    def type_text(self, desc: tuple) -> str:
        """A type descriptor: `_T[i]` for a shared kind, else its literal (memoised)."""
        hit = self._text.get(id(desc))
        if hit is None:
            if desc[0] in _INTERNED:
                body = self._tuple(desc)
                hit = f"_T[{len(self.entries)}]"
                self.entries.append(body)
            else:
                hit = repr(desc)  # scalars: only str, int, bool
            self._text[id(desc)] = hit
            self._keep.append(desc)
        return hit

    def value_text(self, v: tuple) -> str:
        """A value descriptor (name, type, size, pieces, by_ref, unavailable)."""
        return f"({v[0]!r}, {self.type_text(v[1])}, {v[2]!r}, {v[3]!r}, {v[4]!r}, {v[5]!r})"

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
            if isinstance(x, tuple) and x and isinstance(x[0], str) and x[0] in _TYPE_TAGS:
                parts.append(self.type_text(x))
            else:
                parts.append(self.text(x))
        inner = ", ".join(parts)
        return f"({inner},)" if len(obj) == 1 else f"({inner})"


_TYPE_TAGS = frozenset({"int", "bool", "enum", "ptr", "float", "chars", "array", "struct", "union",
                        "bytes"})


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
    """The runtime's code after its `from __future__` line (the module docstring stays behind)."""
    from btfgen.decoder import runtime

    src = Path(runtime.__file__).read_text()
    marker = "from __future__ import annotations\n"
    return src.split(marker, 1)[1].strip("\n") + "\n"
