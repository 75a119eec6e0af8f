"""The Python decoding library: typed argument and return values from trace-ctx bytes.

    import btfgen.decode as bd
    dec = bd.load("/sys/kernel/btf/vmlinux")           # arch from the BTF, or arch="riscv64"
    fn = dec.function("do_sys_openat2")                # layout + decoders, cached
    args = fn.entry(ctx_bytes, stack_bytes, read_memory)   # a tuple, in argument order
    fn.as_dict(args)                                   # {"dfd": -100, "filename": 0xffff..., ...}
    fn.decode_exit(ctx_bytes_at_exit)                  # the return value
    fn.decode_record(generic_bpf_record)               # from the generic BPF decoder

Values: ints of the declared width and sign; enums as `Enumerator` (an int with `.name`); bools;
pointers as ints; structs and unions by value as dicts (bitfields too, anonymous members lifted);
byte/char arrays as bytes; other arrays as lists; by-reference values read with the caller's
`read_memory(addr, size)` (`Unread(addr)` without one); values the ctx does not hold as
`Unavailable(reason)`.
"""

from __future__ import annotations

from btfgen.decoder.describe import function_desc
from btfgen.decoder.runtime import (
    DecodeError,
    Enumerator,
    Function,
    Unavailable,
    Unread,
)
from btfgen.btf.reader import DEFAULT_PATH
from btfgen.layout import ArchLayout, FunctionLayout

__all__ = [
    "load", "Decoder", "Function", "function", "DecodeError", "Enumerator", "Unavailable", "Unread",
]


def function(f: FunctionLayout, arch: ArchLayout) -> Function:
    """The decoders of one placed function."""
    return Function(function_desc(f, arch.byte_order, arch.pointer_size))


class Decoder:
    """Functions of one BTF placed for one arch and trace ctx, laid out on first use."""

    def __init__(self, btf, convention, ctx: str = "pt_regs"):
        self.btf, self.convention, self.ctx = btf, convention, ctx
        self._cache: dict[str, tuple[ArchLayout, tuple[Function, ...]]] = {}

    def _place(self, name: str) -> tuple[ArchLayout, tuple[Function, ...]]:
        hit = self._cache.get(name)
        if hit is None:
            from btfgen.place import place_functions

            funcs = self.btf.find_funcs(name)
            if not funcs:
                raise KeyError(f"{self.btf.path}: no function {name!r}")
            arch = place_functions(self.btf, self.convention, funcs, ctx=self.ctx)
            hit = (arch, tuple(function(f, arch) for f in arch.functions))
            self._cache[name] = hit
        return hit

    def layouts(self, name: str) -> tuple[FunctionLayout, ...]:
        """Every function of that name (static functions in several files share names)."""
        return self._place(name)[0].functions

    def layout(self, name: str) -> FunctionLayout:
        return self.layouts(name)[0]

    def arch_layout(self, name: str) -> ArchLayout:
        return self._place(name)[0]

    def functions(self, name: str) -> tuple[Function, ...]:
        return self._place(name)[1]

    def function(self, name: str) -> Function:
        return self.functions(name)[0]


def load(btf_path: str = DEFAULT_PATH, arch: str | None = None,
         ctx: str = "pt_regs", base: str | None = None) -> Decoder:
    """Open a BTF (raw or ELF; split on `base`) and pick the arch's convention: `arch` names it,
    else the BTF's ELF machine, else the host."""
    from btfgen.btf.reader import open_btf

    btf = open_btf(btf_path, base=base)
    return Decoder(btf, convention_for(btf, arch), ctx)


def convention_for(btf, arch: str | None = None):
    from btfgen.abi.arches import convention_for as _convention_for

    return _convention_for(btf, arch)
