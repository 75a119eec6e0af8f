"""Register/stack/memory images for a placed function: chosen value bytes put where the layout
says, with garbage everywhere else (above narrow values too), and a BPF `syscall` wrapper that
runs the generated decoders over such an image."""

from __future__ import annotations

import random
from dataclasses import dataclass

from btfgen.decoder.generic import piece_source
from btfgen.layout import FunctionLayout, RegPiece

REGS_SIZE = 256  # the ctx image starts with the trace ctx (pt_regs: 168 bytes on x86_64)
STACK_OFF = 256
STACK_SIZE = 256
MEM_OFF = 512  # memory behind by-reference values
OUT_OFF = 1024  # decoded fields, one 64-byte slot each
ERR_OFF = 1016
SLOT = 64
IMAGE_SIZE = 2048


@dataclass
class Image:
    ctx: bytearray  # the whole syscall ctx at entry: regs | stack | memory | output
    values: list[bytes]  # value bytes of each argument (None: unavailable)
    relocs: list[int]  # ctx offsets of pointers the BPF wrapper turns into ctx addresses
    exit_ctx: bytearray  # the same at exit (the return registers hold the return value)
    ret: bytes | None
    exit_relocs: list[int]


def _put(img: bytearray, piece, data: bytes, order: str) -> None:
    source, src = piece_source(piece, order)
    off = src if source == 0 else STACK_OFF + src
    img[off : off + piece.size] = data[piece.value_offset : piece.value_offset + piece.size]


def make_image(f: FunctionLayout, order: str, psize: int, seed: int) -> Image:
    rnd = random.Random(seed)
    entry, relocs = _garbage(rnd), []
    values = []
    for a in f.args:
        if a.unavailable is not None:
            values.append(None)
            continue
        data = rnd.randbytes(a.size)
        values.append(data)
        _place(entry, a, data, order, psize, relocs)
    exit_img, exit_relocs, ret = _garbage(rnd), [], None
    if f.ret is not None and f.ret.unavailable is None:
        ret = rnd.randbytes(f.ret.size)
        _place(exit_img, f.ret, ret, order, psize, exit_relocs)
    return Image(entry, values, relocs, exit_img, ret, exit_relocs)


def _garbage(rnd) -> bytearray:
    return bytearray(rnd.randbytes(OUT_OFF)) + bytes(IMAGE_SIZE - OUT_OFF)


def _place(img: bytearray, v, data: bytes, order: str, psize: int, relocs: list[int]) -> None:
    if not v.by_ref:
        for p in v.pieces:
            _put(img, p, data, order)
        return
    at = MEM_OFF + 64 * len(relocs)  # the pointer is relocated to ctx + at by the wrapper
    img[at : at + v.size] = data
    ptr = at.to_bytes(psize, order)
    for p in v.pieces:
        _put(img, p, ptr, order)
    (p0,) = v.pieces  # a pointer is one piece in every ABI here
    # The relocation rewrites the whole field holding the pointer: the register's field start
    # (not piece_source's, which is past the high bytes on a big-endian target), or its slot.
    relocs.append(p0.ctx_offset if isinstance(p0, RegPiece) else STACK_OFF + p0.stack)


def _relocate(relocs: list[int]) -> list[str]:
    return [f"\t*(__u64 *)((char *)ctx + {off}) = (__u64)(unsigned long)ctx + "
            f"(*(__u64 *)((char *)ctx + {off}) & 0xfff);" for off in relocs]


def wrapper(f: FunctionLayout, cname: str, img: Image, spec_index: int) -> str:
    """Two syscall programs decoding the images in their ctx with the generated decoders:
    entry_NAME (fields to the output slots, generic record 0) and exit_NAME (the return value to
    the slot after the arguments, generic record 1)."""
    from btfgen.codegen.bpf import RETPTR_FIELD
    from btfgen.codegen.names import Namespace

    sp = f"(__u64)(unsigned long)ctx + {STACK_OFF}"
    lines = [f'SEC("syscall") int entry_{cname}(void *ctx)', "{",
             f"\tstruct btfgen_args_{cname} a;", "\tint err;",
             "\t__builtin_memset(&a, 0, sizeof(a));"]
    lines += _relocate(img.relocs)
    lines.append(f"\terr = btfgen_entry_{cname}_sp(ctx, {sp}, &a);")
    lines.append(f"\t*(__s32 *)((char *)ctx + {ERR_OFF}) = err;")
    ns = Namespace(reserved={RETPTR_FIELD})
    for i, a in enumerate(f.args):
        field = ns.take(a.name or f"arg{i}")
        if a.unavailable is None:
            lines.append(f"\t__builtin_memcpy((char *)ctx + {OUT_OFF + SLOT * i}, &a.{field}, "
                         f"sizeof(a.{field}));")
    # -DBY_COOKIE: the attach cookie's route too (btfgen_generic_decode_cookie), into the
    # caller's `by_cookie` (its cookies, records, and how many it decoded).
    lines += ["#ifdef BY_COOKIE",
              f"\tif (btfgen_generic_decode_cookie(ctx, by_cookie.cookies[{spec_index}], 0, "
              "&by_cookie.rec[0]) != BTFGEN_NO_DECODER)", "\t\tby_cookie.decodes++;", "#endif",
              f"\tbtfgen_generic_decode(ctx, {sp}, &btfgen_specs[{spec_index}], 0, &rec[0]);"]
    lines += ["\treturn 0;", "}", ""]
    if f.ret is None:
        return "\n".join(lines)
    lines += [f'SEC("syscall") int exit_{cname}(void *ctx)', "{",
              f"\tstruct btfgen_args_{cname} a;", f"\tstruct btfgen_ret_{cname} r;", "\tint err;",
              "\t__u64 carried;",
              "\t__builtin_memset(&a, 0, sizeof(a));", "\t__builtin_memset(&r, 0, sizeof(r));"]
    lines += _relocate(img.exit_relocs)
    lines.append(f"\tbtfgen_entry_{cname}_sp(ctx, {sp}, &a); /* what entry would have saved */")
    lines.append(f"\terr = btfgen_exit_{cname}(ctx, &a, &r);")
    lines.append(f"\t*(__s32 *)((char *)ctx + {ERR_OFF + 4}) = err;")
    if f.ret.unavailable is None:
        lines.append(f"\t__builtin_memcpy((char *)ctx + {OUT_OFF + SLOT * len(f.args)}, "
                     "&r.value, sizeof(r.value));")
    # The generic exit gets the carried return pointer from what the entry record would hold.
    lines.append(f"\tbtfgen_generic_decode(ctx, {sp}, &btfgen_specs[{spec_index}], 0, &rec[1]);")
    lines += ["#ifdef BY_COOKIE",  # over the same entry record as the spec's
              f"\tbtfgen_generic_decode(ctx, {sp}, &btfgen_specs[{spec_index}], 0, "
              "&by_cookie.rec[1]);",
              f"\tif (btfgen_generic_decode_cookie(ctx, by_cookie.cookies[{spec_index}], 1, "
              "&by_cookie.rec[1]) != BTFGEN_NO_DECODER)", "\t\tby_cookie.decodes++;", "#endif"]
    lines.append(f"\tcarried = btfgen_generic_carried(&btfgen_specs[{spec_index}], &rec[1]);")
    lines.append(f"\tbtfgen_generic_decode_exit(ctx, {sp}, &btfgen_specs[{spec_index}], &rec[1], "
                 "&carried);")
    lines += ["\treturn 0;", "}", ""]
    return "\n".join(lines)
