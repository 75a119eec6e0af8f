"""The view model of the generated BPF C header: every number and name the template prints,
computed here (the template only loops and branches)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from btfgen.btf import walk
from btfgen.btf import types as T
from btfgen.codegen import straight
from btfgen.codegen.cdecl import CTypes, Definition
from btfgen.codegen.names import Namespace, c_comment, c_ident, c_string, function_keys
from btfgen.decoder import generic
from btfgen.probe import spec_format
from btfgen.layout import (ArchLayout, FunctionLayout, RegPiece, ValueLayout, arg_slots,
                           by_prototype)

if TYPE_CHECKING:  # the capture language is imported only for captures
    from btfgen.codegen.bpf_captures import CaptureView

RETPTR_FIELD = "btfgen_retptr"
# A function whose arguments take two or more stack slots reads them with one helper call into a
# buffer of this many bytes at most (a probe read costs ~20 ns, copying from the buffer ~nothing);
# a wider span reads slot by slot, to keep the BPF stack for the caller.
STACK_WINDOW_MAX = 64


# A function's block is rendered once per prototype with these in place of its own name, id and
# comment. NUL appears in nothing else the generator prints (names and comments are sanitised).
CNAME, BTF_ID, COMMENT = "\0C", "\0I", "\0M"
# Ends each block in the one render of all prototypes' blocks; as unprintable as NUL.
BLOCK_END = "\x1e"


@dataclass(frozen=True, slots=True)
class PieceView:
    reg: bool  # a register (ctx load) or a stack slot (probe read)
    src: int  # ctx offset of the register field, or offset from the entry SP
    rtype: str  # the register field's C type
    skip: int  # bytes to skip in the register to reach its least significant `size` bytes
    size: int
    dst: int  # offset into the value
    what: str  # comment: register or stack slot


@dataclass(frozen=True, slots=True)
class ValueView:
    field: str  # member of the args struct ("value" for the return struct)
    decl: str | None  # the member declaration; None: unavailable
    comment: str
    size: int
    by_ref: bool
    pieces: tuple[PieceView, ...]
    check: bool = False  # assert the declaration's size (it names a vmlinux.h type)


@dataclass(frozen=True, slots=True)
class FunctionView:
    cname: str
    comment: str
    btf_id: int | str
    args: tuple[ValueView, ...]
    ret: ValueView | None
    ret_via_entry: bool  # the returned struct is read through the pointer saved at entry
    retptr: tuple[PieceView, ...]  # its pieces at entry
    # The by-value arguments' stack pieces read at once into an aligned buffer: (SP offset,
    # 8-byte words), or (0, 0): slot by slot.
    stack_window: tuple[int, int] = (0, 0)
    # --capture: read by btfgen_capture_F after the entry, btfgen_capture_exit_F after the exit
    captures: tuple[CaptureView, ...] = ()
    exit_captures: tuple[CaptureView, ...] = ()
    # A trampoline's ctx: the argument slots the function has (bpf_get_func_arg_cnt must say
    # the same, or the return slot is elsewhere); None: another ctx
    slots: int | None = None
    refused: str = ""  # why the trampoline cannot take the function (a C comment), or ""


@dataclass(frozen=True, slots=True)
class SpecOpsView:
    nentry: int
    nexit: int
    ptr_size: int
    carry: int  # GenericPlan.carry_code
    ops: tuple[generic.Op, ...]
    entry_plan: int = 0  # straight.PlanTable.ids
    exit_plan: int = 0
    entry_size: int = 0  # straight.PlanTable.sizes
    exit_size: int = 0
    carry_span: int = 0  # GenericPlan.carry_span


@dataclass(frozen=True, slots=True)
class SpecView:
    cname: str
    btf_id: int
    ops: str  # the rendered SpecOpsView


@dataclass(frozen=True, slots=True)
class UserValuesView:
    """One prototype's values as struct btfgen_value_info initialisers."""

    args: tuple[str, ...]
    ret: str | None  # None for void


@dataclass(frozen=True, slots=True)
class UserFuncView:
    name: str  # a C string literal
    btf_id: int
    nargs: int
    values: int  # the index of its prototype's UserValuesView
    ret: bool


@dataclass(frozen=True, slots=True)
class HeaderView:
    guard: str
    arch: str
    target_arch: str
    big_endian: bool
    pointer_size: int
    ptr_type: str
    ctx_name: str
    ctx_struct: str
    slots: bool  # the ctx is a trampoline's u64 slots (bpf_get_func_arg), not a struct
    sp_offset: int | None
    sp_type: str
    self_contained: bool
    forwards: tuple[tuple[str, str], ...]
    definitions: tuple[Definition, ...]
    max_ops: int
    data_size: int
    op_limit: int
    carry_missing_bit: int
    carry_words: int = spec_format.CARRY_WORDS
    # The generic decoder's snapshot of the ctx registers: `snap_words` pointer-sized loads from
    # ctx offset `snap_lo` (0: none, every ctx op reads through the helper), in a buffer of
    # `snap_bytes` (a power of two, so op offsets can be masked into it).
    snap_lo: int = 0
    snap_words: int = 0
    snap_bytes: int = 0
    op_fields: tuple[spec_format.Field, ...] = spec_format.OP
    spec_fields: tuple[spec_format.Field, ...] = spec_format.SPEC_HEAD
    record_fields: tuple[spec_format.Field, ...] = spec_format.RECORD_HEAD
    # btfgen_generic_decode_cookie: the cookie's layout, and the number it runs
    cookie_id_shift: int = spec_format.Cookie.ID_SHIFT
    cookie_id_bits: int = spec_format.Cookie.ID_BITS
    cookie_entry_bit: int = spec_format.Cookie.ENTRY_BIT
    image_plan: int = spec_format.IMAGE_PLAN
    image_sizes: tuple[int, int] = (0, 0)  # the record data bytes it writes: entry, exit
    capture_fields: tuple[spec_format.Field, ...] = spec_format.CAPTURE_HEAD
    captures: bool = False  # some function has captures: the header defines their reads
    # The straight-line decoders (btfgen/codegen/straight.py) and a line counting them.
    straight_entry: tuple[straight.Straight, ...] = ()
    straight_exit: tuple[straight.Straight, ...] = ()
    straight_counts: str = "none"
    # A trampoline's ctx: the slot index past every argument slot at which the generic
    # decoder's table reads the return value (CtxInfo.ret_slot / 8), read with bpf_get_func_ret
    ret_slot: int = 0


class PtrType:
    """What the function template needs of the header before the header is complete (the BPF
    and the kernel C headers render the same per-function blocks)."""

    __slots__ = ("ptr_type",)

    def __init__(self, ptr_type: str):
        self.ptr_type = ptr_type


def reg_type(size: int) -> str:
    return "__u64" if size == 8 else "__u32" if size == 4 else f"__u{size * 8}"


def _pieces(v_pieces, big: bool, cache: dict | None = None) -> tuple[PieceView, ...]:
    # Prototypes share their argument pieces (`struct file *` first in thousands): view each once.
    if cache is None:
        return _view_pieces(v_pieces, big)
    out = cache.get(v_pieces)
    if out is None:
        out = cache[v_pieces] = _view_pieces(v_pieces, big)
    return out


def _view_pieces(v_pieces, big: bool) -> tuple[PieceView, ...]:
    out = []
    for p in v_pieces:
        if isinstance(p, RegPiece):
            skip = p.skip("big" if big else "little")
            # A trampoline's slot is an array element (ctx[K]), a struct's register a member.
            access = f"ctx{p.field}" if p.field.startswith("[") else f"ctx->{p.field}"
            out.append(PieceView(True, p.ctx_offset, reg_type(p.reg_size), skip, p.size,
                                 p.value_offset, c_comment(f"{p.hwreg} ({access})")))
        else:
            out.append(PieceView(False, p.stack, "", 0, p.size, p.value_offset,
                                 f"stack +{p.stack}"))
    return tuple(out)


def _where(v: ValueLayout) -> str:
    parts = []
    for p in v.pieces:
        parts.append(p.hwreg if isinstance(p, RegPiece) else f"stack+{p.stack}")
    where = ", ".join(parts)
    return f"by reference via {where}" if v.by_ref else where


def function_view(f: FunctionLayout, ctypes: CTypes, big: bool, cname: str = CNAME,
                  comment: str = COMMENT, btf_id: int | str = BTF_ID,
                  cache: dict | None = None, views: dict | None = None,
                  captures: tuple = (), trampoline: bool = False) -> FunctionView:
    """`cache` (pieces) and `views` (argument views, by value, position and field: values recur
    across prototypes as one object) carry work from one prototype to the next. `captures`:
    the function's btfgen.typed.capture.Captures."""
    fields = Namespace(reserved={RETPTR_FIELD})
    slots = arg_slots(f.proto) if trampoline else None
    args = []
    for i, a in enumerate(f.args):
        field = fields.take(a.name or f"arg{i}")
        view = None if views is None else views.get((a, i, field))
        if view is None:
            view = _arg_view(a, i, field, ctypes, big, cache)
            if views is not None:
                views[a, i, field] = view
        args.append(view)
    ret = None
    via_entry = False
    retptr: tuple[PieceView, ...] = ()
    if f.ret is not None:
        r = f.ret
        label = c_comment(f"returns {r.type_name}")
        if r.unavailable is not None:
            ret = ValueView("value", None, f"{label}: unavailable: {c_comment(r.unavailable)}",
                            r.size, r.by_ref, ())
        else:
            via_entry = r.by_ref and not r.at_exit
            pieces = _pieces(r.pieces, big, cache)
            if via_entry:
                retptr, pieces = pieces, ()
            ret = ValueView("value", ctypes.declare(r.type, "value"),
                            f"{label} ({c_comment(_where(r))})", r.size, r.by_ref, pieces)
    caps: tuple[tuple[CaptureView, ...], tuple[CaptureView, ...]] = ((), ())
    if captures:
        from btfgen.codegen.bpf_captures import capture_views

        unavailable = {i: a.unavailable for i, a in enumerate(f.args)}
        if f.ret is not None:
            unavailable[None] = f.ret.unavailable
        caps = capture_views(captures, tuple(a.field if a.decl else None for a in args),
                             "value" if ret is not None and ret.decl else None,
                             unavailable, ctypes, big)
    return FunctionView(cname, comment, btf_id, tuple(args), ret, via_entry, retptr,
                        _stack_window(args), *caps, slots=slots,
                        refused=c_comment(f.refused) if f.refused else "")


def _stack_window(args: list[ValueView]) -> tuple[int, int]:
    slots = [p for a in args if a.decl and not a.by_ref for p in a.pieces if not p.reg]
    if len(slots) < 2:
        return 0, 0
    lo = min(p.src for p in slots)
    words = -(-(max(p.src + p.size for p in slots) - lo) // 8)
    return (lo, words) if words * 8 <= STACK_WINDOW_MAX else (0, 0)


def _arg_view(a: ValueLayout, i: int, field: str, ctypes: CTypes, big: bool,
              cache: dict | None) -> ValueView:
    label = c_comment(f"{a.name or f'arg{i}'}: {a.type_name}")
    if a.unavailable is not None:
        return ValueView(field, None, f"{label}: unavailable: {c_comment(a.unavailable)}",
                         a.size, a.by_ref, ())
    decl = ctypes.declare(a.type, field)
    return ValueView(field, decl, f"{label} ({c_comment(_where(a))})", a.size, a.by_ref,
                     _pieces(a.pieces, big, cache), ctypes.external)


def function_comment(f: FunctionLayout) -> str:
    return c_comment(f"{f.name} (BTF id {f.btf_id})" + (", variadic" if f.variadic else ""))


def function_blocks(arch: ArchLayout, names: list[str], ctypes: CTypes, render_all,
                    captures: dict | None = None) -> list[str]:
    """Each function's decoders. Functions of one prototype share their argument layouts:
    `render_all([view])` once, with one view per prototype, gives their blocks in order (a render
    per prototype costs more in the template engine's setup than in the text), then each
    function's own name, id and comment are put in. A function with captures (`captures`, by
    function name) is a group of its own."""
    big = arch.byte_order == "big"
    fs = arch.functions
    captures = captures or {}
    firsts, at = by_plan(fs, captures)
    pieces: dict = {}
    arg_views: dict = {}
    views = [function_view(fs[i], ctypes, big, cache=pieces, views=arg_views,
                           captures=captures.get(fs[i].name, ()), trampoline=arch.ctx.slots)
             for i in firsts]
    formats = [_wanted(_format(text)) for text in render_all(views)]
    return [formats[k] % {"c": cname, "i": f.btf_id, "m": function_comment(f)}
            for f, cname, k in zip(fs, names, at)]


def _wanted(block: str) -> str:
    """A function's block, left out under BTFGEN_ONLY_WANTED unless BTFGEN_WANT_<its name> is
    defined: a program using a few of a whole kernel's decoders (`btfgen trace --filter`)
    compiles those few, not a million lines."""
    lead = "\n" if block.startswith("\n") else ""
    end = "" if block.endswith("\n") else "\n"
    return (lead + "#if !defined(BTFGEN_ONLY_WANTED) || defined(BTFGEN_WANT_%(c)s)\n"
            + block[len(lead):] + end + "#endif\n")


def by_plan(fs, captures: dict) -> tuple[list[int], list[int]]:
    """by_prototype, with each function that has captures (by name) a group of its own."""
    if not captures:
        return by_prototype(fs)
    index: dict = {}
    firsts: list[int] = []
    at = []
    for i, f in enumerate(fs):
        key = (f.proto, f.name if f.name in captures else None)
        k = index.get(key)
        if k is None:
            k = index[key] = len(firsts)
            firsts.append(i)
        at.append(k)
    return firsts, at


def _format(text: str) -> str:
    """A block rendered with the placeholders as a %-format: one pass per function fills in all
    three."""
    return (text.replace("%", "%%").replace(CNAME, "%(c)s").replace(BTF_ID, "%(i)d")
            .replace(COMMENT, "%(m)s"))


def function_names(functions: tuple[FunctionLayout, ...]) -> list[str]:
    """C names for the functions (`names.function_keys`)."""
    return function_keys(functions, c_ident)


def c_types(arch: ArchLayout, table, self_contained: bool) -> CTypes:
    return CTypes(table, arch.pointer_size, "self" if self_contained else "vmlinux",
                  max_align=arch.max_scalar_align)


def header_view(arch: ArchLayout, ctypes: CTypes, *, guard: str,
                captures: bool = False,
                table: straight.PlanTable | None = None) -> HeaderView:
    """The header around the function blocks; after them, so it has every definition.
    `captures`: some function has captures. `table`: the straight-line decoders it holds
    (none without)."""
    big = arch.byte_order == "big"
    ctx = arch.ctx
    lines = {} if table is None else {"straight_entry": table.entry,
                                      "straight_exit": table.exit,
                                      "straight_counts": straight.counts(table),
                                      "image_sizes": (table.image_size(0), table.image_size(1))}
    return HeaderView(
        guard=c_ident(guard).upper(),
        arch=c_comment(arch.arch),
        target_arch=c_ident(arch.target_arch or arch.arch),
        big_endian=big,
        pointer_size=arch.pointer_size,
        ptr_type=reg_type(arch.pointer_size),
        ctx_name=c_comment(ctx.name),
        ctx_struct=c_comment(ctx.struct_name),
        slots=ctx.slots,
        ret_slot=(ctx.ret_slot or 0) // 8,
        sp_offset=ctx.sp_offset,
        sp_type=reg_type(arch.pointer_size),
        self_contained=ctypes.mode == "self",
        forwards=tuple(sorted(ctypes.forwards.values(), key=lambda kv: kv[1])),
        definitions=tuple(ctypes.definitions),
        max_ops=generic.MAX_OPS,
        data_size=generic.DATA_SIZE,
        op_limit=generic.OP_LIMIT,
        carry_missing_bit=generic.CARRY_MISSING_BIT,
        captures=captures,
        **_snapshot(ctx, arch.pointer_size),
        **lines,
    )


def ctx_window(arch: ArchLayout) -> straight.CtxWindow | None:
    """The ctx words straight-line decoders load: the generic decoder's snapshot."""
    return straight.window(_snapshot(arch.ctx, arch.pointer_size), arch.pointer_size)


def _snapshot(ctx, word: int) -> dict:
    """The ctx span the generic decoder copies into its stack once a call: from the lowest to the
    end of the highest argument/return register (the stack pointer is read apart), in aligned
    words within the struct. None when a word would leave the struct or the span is large."""
    regs = [r for r in ctx.registers if r.hwreg != "sp"]
    if not regs:
        return {}
    lo = min(r.offset for r in regs) // word * word
    hi = -(-max(r.offset + r.size for r in regs) // word) * word
    if (ctx.size and hi > ctx.size) or hi - lo > 256:
        return {}
    cap = 8
    while cap < hi - lo:
        cap *= 2
    return {"snap_lo": lo, "snap_words": (hi - lo) // word, "snap_bytes": cap}


def spec_views(arch: ArchLayout, names: list[str], plans, render_all,
               table: straight.PlanTable | None = None) -> tuple[SpecView, ...]:
    """The table rows; `render_all([SpecOpsView])` once, with one view per prototype, gives
    their texts in order (a render per prototype costs more in the template engine's setup than
    in the text). `table` numbers their straight-line decoders (none: the interpreter)."""
    fs = arch.functions
    firsts, at = _by_object(plans)  # one plan per prototype, or per function with captures
    texts = render_all([_spec_ops(plans[i], arch.pointer_size, table) for i in firsts])
    return tuple(SpecView(n, f.btf_id, texts[k]) for f, n, k in zip(fs, names, at))


def _by_object(items) -> tuple[list[int], list[int]]:
    """by_prototype for a list whose shared entries are one object."""
    index: dict[int, int] = {}
    firsts: list[int] = []
    at = []
    for i, x in enumerate(items):
        k = index.get(id(x))
        if k is None:
            k = index[id(x)] = len(firsts)
            firsts.append(i)
        at.append(k)
    return firsts, at


def _spec_ops(p: generic.GenericPlan, pointer_size: int,
              table: straight.PlanTable | None) -> SpecOpsView:
    ids = table.ids(p) if table is not None else (0, 0)
    sizes = table.sizes(p) if table is not None else p.sizes
    return SpecOpsView(len(p.entry_ops), len(p.exit_ops), pointer_size, p.carry_code,
                       p.entry_ops + p.exit_ops, *ids, *sizes, p.carry_span)


_NULL = "(void *)0"


def _value_kind(v: ValueLayout) -> str:
    t = walk.strip(v.type)
    if isinstance(t, T.Int) and t.is_bool:
        return "BTFGEN_VALUE_BOOL"
    if isinstance(t, T.Ptr):
        return "BTFGEN_VALUE_POINTER"
    if isinstance(t, (T.Int, T.Enum)) and v.size <= 8:
        return "BTFGEN_VALUE_SIGNED" if v.signed else "BTFGEN_VALUE_UNSIGNED"
    return "BTFGEN_VALUE_BYTES"


def _user_value(v: ValueLayout, vp: generic.ValuePlan | None) -> str:
    """One struct btfgen_value_info initialiser."""
    if vp is None:
        why = v.unavailable or "too large for the generic record"
        return (f"{{ {c_string(v.name)}, {c_string(v.type_name)}, {c_string(why)}, -1, -1, "
                f"{v.size}, BTFGEN_VALUE_NONE, 0 }}")
    return (f"{{ {c_string(v.name)}, {c_string(v.type_name)}, {_NULL}, {vp.data_off}, "
            f"{vp.ptr_off}, {v.size}, {_value_kind(v)}, {vp.op_mask:#x}ULL }}")


def user_views(arch: ArchLayout, plans) -> tuple[tuple[UserValuesView, ...],
                                                  tuple[UserFuncView, ...]]:
    """What user space needs to read each function's records (btfgen_specs.h outside BPF): each
    prototype's values once, and each function pointing at its prototype's."""
    fs = arch.functions
    firsts, at = by_prototype(fs)
    values = tuple(_user_values(fs[i], plans[i]) for i in firsts)
    return values, tuple(UserFuncView(c_string(f.name), f.btf_id, len(f.args), k,
                                      f.ret is not None) for f, k in zip(fs, at))


def _user_values(f: FunctionLayout, p: generic.GenericPlan) -> UserValuesView:
    ret = None
    if f.ret is not None:
        ret = _user_value(f.ret, p.exit[0] if p.exit else None)
    return UserValuesView(tuple(_user_value(a, vp) for a, vp in zip(f.args, p.entry)), ret)
