"""HeaderTypes: the types of C headers as a TypeSource, with the same API as the BTF reader's Btf."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from btfgen.btf import types as T
from btfgen.errors import HeaderError

from .convert import FuncDecl


class HeaderTypes:
    """A TypeSource made from C headers parsed for one target.

    `byte_order` and `pointer_size` are the target's; `elf_machine` is None, as for raw BTF.
    Functions whose prototype uses a type BTF cannot express are left out of `funcs()`;
    `find_funcs` names the reason instead of saying the function does not exist.
    """

    elf_machine = None

    def __init__(self, *, paths: Sequence[str], arch: str, byte_order: str, pointer_size: int):
        self.paths = tuple(paths)
        self.arch = arch
        self.byte_order = byte_order
        self.pointer_size = pointer_size
        self._types: list[T.Type] = []
        self._decls: list[FuncDecl] = []

    def _fill(self, types: list[T.Type], decls: list[FuncDecl]) -> None:
        self._types = types
        self._decls = decls

    @property
    def declared_pointer_size(self) -> int:
        return self.pointer_size  # headers are always parsed for a target

    def assume_pointer_size(self, size: int) -> None:
        pass  # the target the headers were parsed for decided it

    @property
    def path(self) -> str:
        return self.paths[0] if len(self.paths) == 1 else ",".join(self.paths)

    def __getitem__(self, type_id: int) -> T.Type:
        if not 0 <= type_id < len(self._types):
            raise KeyError(f"{self.path}: no type {type_id} (have 0..{len(self._types) - 1})")
        return self._types[type_id]

    def __len__(self) -> int:
        """Number of types, the void at id 0 included (ids are 0..len-1)."""
        return len(self._types)

    def __iter__(self) -> Iterator[T.Type]:
        return iter(self._types)

    def funcs(self) -> list[T.Func]:
        """The functions declared in the headers (system headers excluded), in id order."""
        return sorted((self._types[d.func_id] for d in self._decls if not d.error),
                      key=lambda f: f.id)

    def find_funcs(self, name: str) -> list[T.Func]:
        found = [d for d in self._decls if d.name == name]
        bad = [d for d in found if d.error]
        if bad and len(bad) == len(found):
            raise HeaderError(f"{bad[0].where}: {name}: {bad[0].error}")
        return sorted((self._types[d.func_id] for d in found if not d.error), key=lambda f: f.id)

    def find_types(self, name: str, kind: T.Kind | str | None = None) -> list[T.Type]:
        if isinstance(kind, str):
            try:
                kind = T.Kind[kind.upper()]
            except KeyError:
                raise HeaderError(f"no BTF kind called {kind!r}") from None
        return [t for t in self._types
                if t.name == name and (kind is None or t.kind == kind)]
