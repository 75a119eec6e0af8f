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

from btfgen.btf.reader import DEFAULT_PATH
from btfgen.decoder.runtime import (
    DecodeError,
    Enumerator,
    Function,
    Unavailable,
    Unread,
)
from btfgen.target import Target
from btfgen.target import function_decoder as function  # function(layout, arch): its decoders
from btfgen.target import open as _open

__all__ = [
    "load", "Decoder", "Target", "Function", "function", "DecodeError", "Enumerator",
    "Unavailable", "Unread",
]


def load(btf_path: str = DEFAULT_PATH, arch: str | None = None,
         ctx: str = "pt_regs", base: str | None = None) -> Target:
    """`btfgen.open(btf_path, arch=arch, ctx=ctx, base=base)`, the one front door under this
    module's older name: the decoders of that input's functions are its `function(name)` and
    `functions(name)`."""
    return _open(btf_path, base=base, arch=arch, ctx=ctx)


Decoder = Target  # the name this module gave it before `btfgen.open`
