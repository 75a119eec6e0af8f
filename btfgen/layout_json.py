"""The `btfgen layout --json` contract: an ArchLayout as plain JSON-ready data.

Keys promised (more may be added, none removed): arch, ctx, byte_order, functions[name, btf_id,
args[name, type, size, pieces, by_ref, at_exit, unavailable], ret, variadic]. A register piece
is {"reg", "hwreg", "value_offset", "size"} (plus the ctx offset), a stack piece {"stack",
"value_offset", "size"} with `stack` the byte offset from the entry SP. Where DWARF was
consulted, every value also has "source": "abi" | "dwarf" (which of the two placed it). `ctx_info` says which
struct the register fields are in and whether it was read from the BTF or defaulted (a
trampoline's: "slots": true, a register being the u64 slot ctx[K]). A function the ctx cannot
take at all (a trampoline the kernel would not build) has "refused": its reason.
"""

from __future__ import annotations

from btfgen.layout import (ArchLayout, CtxInfo, FunctionLayout, ProtoLayout, RegPiece,
                           ValueLayout, by_prototype)


def to_json(layout: ArchLayout) -> dict:
    return {
        "arch": layout.arch,
        "ctx": layout.ctx.name,
        "byte_order": layout.byte_order,
        "pointer_size": layout.pointer_size,
        "ctx_info": ctx_json(layout.ctx),
        "functions": _functions(layout.functions),
    }


def _functions(functions) -> list[dict]:
    # Functions sharing a prototype share its placement: convert each prototype once.
    firsts, at = by_prototype(functions)
    protos = [proto_json(functions[i].proto) for i in firsts]
    return [_refused({"name": f.name, "btf_id": f.btf_id, "args": protos[k][0],
                      "ret": protos[k][1], "variadic": f.variadic}, f)
            for f, k in zip(functions, at)]


def _refused(out: dict, f: FunctionLayout) -> dict:
    if f.refused is not None:  # only where the ctx refuses it (a trampoline's rules)
        out["refused"] = f.refused
    return out


def ctx_json(ctx: CtxInfo) -> dict:
    return {
        "name": ctx.name,
        "struct": ctx.struct_name,
        "size": ctx.size,
        "source": ctx.source,
        "sp": {"field": ctx.sp_field, "offset": ctx.sp_offset},
        **({"slots": True} if ctx.slots else {}),
        "registers": [
            {"hwreg": r.hwreg, "field": r.field, "offset": r.offset, "size": r.size}
            for r in ctx.registers
        ],
    }


def function_json(f: FunctionLayout) -> dict:
    args, ret = proto_json(f.proto)
    return _refused({"name": f.name, "btf_id": f.btf_id, "args": args, "ret": ret,
                     "variadic": f.variadic}, f)


def proto_json(p: ProtoLayout) -> tuple[list[dict], dict | None]:
    """(args, ret) of a prototype."""
    return ([value_json(a, with_name=True) for a in p.args],
            None if p.ret is None else value_json(p.ret, with_name=False))


def value_json(v: ValueLayout, with_name: bool) -> dict:
    out = {"name": v.name} if with_name else {}
    out.update({
        "type": v.type_name,
        "size": v.size,
        "signed": v.signed,
        "pieces": [piece_json(p) for p in v.pieces],
        "by_ref": v.by_ref,
        "at_exit": v.at_exit,
        "unavailable": v.unavailable,
    })
    if v.source is not None:  # only where DWARF was consulted (`--dwarf`, an ELF with DWARF)
        out["source"] = v.source
    return out


def piece_json(p) -> dict:
    if isinstance(p, RegPiece):
        return {"reg": p.field, "hwreg": p.hwreg, "ctx_offset": p.ctx_offset,
                "reg_size": p.reg_size, "value_offset": p.value_offset, "size": p.size}
    return {"stack": p.stack, "value_offset": p.value_offset, "size": p.size}
