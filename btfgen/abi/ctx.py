"""Where the trace context keeps each register: read from the BTF in hand when it can be.

`struct pt_regs` and `struct __arch_ftrace_regs` change with kernel version and config (riscv's
`direct_tramp` moves a0-a7; arm64's ftrace_regs has no x9+), so the offsets come from the BTF
when it describes the struct, and from the arch description's defaults only when it does not
(`CtxInfo.source` says which). A register whose field the BTF's struct lacks is left out: values
placed there are reported unavailable instead of being read from a wrong offset.
"""

from __future__ import annotations

import re

from btfgen.abi.convention import Convention, CtxSpec
from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.errors import AbiError
from btfgen.layout import RET_SLOT, CtxInfo, CtxRegister

_COMPONENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[([0-9]+)\])?$")


def resolve_ctx(types, conv: Convention, name: str) -> CtxInfo:
    spec = conv.ctxs.get(name)
    if spec is None:
        known = ", ".join(sorted(conv.ctxs)) or "none"
        raise AbiError(f"{conv.path}: arch {conv.name} describes no {name} ctx (has: {known})")
    if spec.slots:  # an array of words, not a struct the BTF could describe
        # Past the slots, the return slot as the generic decoder reads it (CtxInfo.ret_slot).
        ret = (RET_SLOT, "[nargs]", spec.size, 8)
        return _info(spec, f"__u64[{len(spec.entries)}]", spec.size + 8, "default",
                     [(e.hwreg, e.field, e.offset, e.size) for e in spec.entries] + [ret])
    found = _find_struct(types, spec.structs)
    if found is None:
        return _info(spec, spec.structs[0], spec.size, "default",
                     [(e.hwreg, e.field, e.offset, e.size) for e in spec.entries])
    entries = []
    for e in spec.entries:
        loc = field_location(found, e.field)
        if loc is not None:
            entries.append((e.hwreg, e.field, loc[0], loc[1]))
    if all(hw == "sp" for hw, *_ in entries):
        # None of the registers: another arch's struct of that name (an x86 vmlinux placed for
        # riscv64), not this arch's in another version. The BTF does not describe this ctx.
        return _info(spec, spec.structs[0], spec.size, "default",
                     [(e.hwreg, e.field, e.offset, e.size) for e in spec.entries])
    return _info(spec, found.name, found.size, "btf", entries)


def _info(spec: CtxSpec, struct: str, size: int, source: str, entries: list) -> CtxInfo:
    regs = tuple(CtxRegister(hw, fld, off, sz) for hw, fld, off, sz in entries)
    sp = next((r for r in regs if r.hwreg == "sp"), None)
    return CtxInfo(
        name=spec.name, struct_name=struct, size=size, source=source, slots=spec.slots,
        sp_field=sp.field if sp else "", sp_offset=sp.offset if sp else None, registers=regs,
        without_args=spec.without_args,
    )


def _find_struct(types: T.TypeSource, names: tuple[str, ...]) -> T.Struct | None:
    for name in names:
        for t in types.find_types(name):
            if isinstance(t, T.Struct) and t.size > 0:  # ftrace_regs is opaque (size 0) lately
                return t
    return None


def field_location(struct: T.Type, path: str) -> tuple[int, int] | None:
    """Byte offset and size of `path` ("regs.di", "regs[3]", "a0" inside an anonymous union)."""
    offset = 0
    cur: T.Type = struct
    try:
        for part in path.split("."):
            m = _COMPONENT.match(part)
            if m is None:
                return None
            found = next((x for x in walk.named_members(cur)
                          if x[0].name == m.group(1)), None)
            if found is None:
                return None
            member, bit_offset = found
            cur = member.type
            offset += bit_offset // 8
            if m.group(2) is not None:
                arr = walk.strip(cur)
                index = int(m.group(2))
                if not isinstance(arr, T.Array) or index >= arr.nelems:
                    return None
                cur = arr.elem
                offset += index * measure.size_of(cur)
        return offset, measure.size_of(cur)
    except T.TypeWalkError:
        return None
