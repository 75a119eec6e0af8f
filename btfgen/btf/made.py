"""MadeTypes: a type source built in code (hand-made tables in tests, synthetic prototypes),
with the whole `TypeSource` interface so nothing has to probe it."""

from __future__ import annotations

from collections.abc import Iterator

from btfgen.btf import types as T


class MadeTypes(dict):
    """id -> Type, filled by the caller; `self[0]` is void. `byte_order` None: the types are
    the same in either order (the arch they are placed for decides)."""

    elf_machine = None

    def __init__(self, pointer_size: int = 8, byte_order: str | None = None,
                 path: str = "<types made in code>"):
        super().__init__()
        self.path, self.byte_order, self.pointer_size = path, byte_order, pointer_size
        self[0] = T.Void(0, "", self)

    @property
    def declared_pointer_size(self) -> int:
        return self.pointer_size

    def assume_pointer_size(self, size: int) -> None:
        pass  # the maker said it

    def add(self, cls, *args, **kw) -> T.Type:
        """A new type of `cls` with the next id (`cls`'s fields after id, in order or named)."""
        obj = cls(len(self), *args, table=self, **kw)
        self[obj.id] = obj
        return obj

    def _types(self) -> Iterator[T.Type]:
        return (self[i] for i in sorted(self.keys()))

    def funcs(self) -> list[T.Func]:
        return [t for t in self._types() if isinstance(t, T.Func)]

    def find_types(self, name: str, kind: T.Kind | str | None = None) -> list[T.Type]:
        if isinstance(kind, str):
            kind = T.Kind[kind.upper()]
        return [t for t in self._types() if t.name == name and (kind is None or t.kind == kind)]

    def find_funcs(self, name: str) -> list[T.Func]:
        return self.find_types(name, T.Kind.FUNC)  # type: ignore[return-value]
