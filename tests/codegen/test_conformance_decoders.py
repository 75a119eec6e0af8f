"""The decoders over real captures: cross-compiled code run in an emulator (tests/conformance,
`captures(arch)`), its registers and stack at a target's entry and return. Each argument and
return value the layout makes available must decode to exactly what the caller passed / the
target returned:
(b) the Python decoder, from a trace-ctx image built from the captured registers, the stack and
    the captured memory (every arch);
(c) the generated BPF decoders, run by the kernel (BPF_PROG_TEST_RUN) over the same images, on
    the little-endian arches (this kernel cannot run a big-endian BPF program), pointers of
    by-reference values redirected into the image on 64-bit arches: the per-function decoders,
    and the generic decoder's records (decoded by the Python side), the exit getting a struct's
    return pointer carried from an entry record as a BPF program would keep it."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest
from bpfrun import BpfObject, bpf_permitted
from toolchains import ARCHES, TOOLCHAINS

from btfgen.codegen import bpf
from btfgen.codegen.names import Namespace
from btfgen.codegen.outputs import generate
from btfgen.decode import function
from btfgen.decoder.describe import type_desc
from btfgen.decoder.generic import piece_source
from btfgen.decoder.runtime import Unavailable, Unread, convert
from btfgen.layout import ArchLayout

conformance = pytest.importorskip("conformance.capture")
check = pytest.importorskip("conformance.check")
STACK_BYTES = 1024
BPF_SAMPLE = 48  # functions per arch run through the kernel (load time), the regression set first


def _placed(arch: str):
    """[(capture, FunctionLayout, ArchLayout)] for every capture of `arch`."""
    from btfgen.abi.arches import load_arch
    from btfgen.btf.reader import open_btf
    from btfgen.place import place_functions

    if not (TOOLCHAINS[arch].available() and subprocess.run(["which", "pahole"],
                                                            capture_output=True).returncode == 0):
        pytest.skip(f"no toolchain for {arch}")
    caps = conformance.captures(arch)
    groups: dict = {}
    for c in caps:
        groups.setdefault(c.btf_path, []).append(c)
    out = []
    for path, group in groups.items():
        btf = open_btf(str(path))
        funcs = [btf.find_funcs(c.func)[0] for c in group]
        placed = place_functions(btf, load_arch(arch, btf.pointer_size), funcs)
        out += [(c, f, placed, btf) for c, f in zip(group, placed.functions)]
    return out


def ctx_image(arch: ArchLayout, snap, machine) -> bytearray:
    """The trace ctx as the kernel would fill it from these registers."""
    img = bytearray(arch.ctx.size)
    for r in arch.ctx.registers:
        value = snap.regs[machine.canonical(r.hwreg)]
        img[r.offset : r.offset + r.size] = (value & ((1 << 8 * r.size) - 1)).to_bytes(
            r.size, arch.byte_order)
    img[arch.ctx.sp_offset : arch.ctx.sp_offset + arch.pointer_size] = snap.sp.to_bytes(
        arch.pointer_size, arch.byte_order)
    return img


def stack_image(snap) -> bytes:
    base, data = snap.memory.regions[0]
    return data[snap.sp - base : snap.sp - base + STACK_BYTES]


def _expected(vl, data: bytes, order: str):
    return convert(type_desc(vl.type), data, 0, order)


def _tolerant(memory):
    """read_memory over captured memory; an address placement got wrong reads as zeros (that
    value is then not judged: see placement_agrees)."""

    def read(addr: int, size: int) -> bytes:
        try:
            return memory.read(addr, size)
        except LookupError:
            return bytes(size)

    return read


def placement_agrees(c, vl, want: bytes, label: str) -> bool:
    """The conformance suite's own verdict on where placement put this value: the decoders are
    judged only on values placement got right (the rest is that suite's failure to report)."""
    tally = check.Tally()
    check.check_value(c, vl, want, label, tally)
    return tally.agreed == 1


@pytest.mark.parametrize("arch", ARCHES)
def test_python_decoder_returns_the_passed_values(arch):
    checked = mismatches = 0
    report = []
    for c, f, placed, _ in _placed(arch):
        fn = function(f, placed)
        m = c.machine
        ctx = bytes(ctx_image(placed, c.entry, m))
        stack = stack_image(c.entry)
        got = fn.decode_entry(ctx, stack, _tolerant(c.entry.memory))
        for i, (vl, want, value) in enumerate(zip(f.args, c.args, got)):
            if isinstance(value, Unavailable) or not placement_agrees(c, vl, want, f"p{i}"):
                continue
            checked += 1
            if value != _expected(vl, want, placed.byte_order):
                mismatches += 1
                report.append(f"{c.func} {vl.name} ({vl.type_name}): {value!r} != "
                              f"{_expected(vl, want, placed.byte_order)!r}")
        if f.ret is not None and c.ret is not None and placement_agrees(c, f.ret, c.ret, "ret"):
            exit_ctx = bytes(ctx_image(placed, c.exit, m))
            value = fn.decode_exit(exit_ctx, stack_image(c.exit), _tolerant(c.exit.memory),
                                   saved_entry=(ctx, stack))
            if not isinstance(value, Unavailable):
                checked += 1
                if value != _expected(f.ret, c.ret, placed.byte_order):
                    mismatches += 1
                    report.append(f"{c.func} return ({f.ret.type_name}): {value!r}")
    assert checked > 100
    assert not report, (f"{arch}: {mismatches} of {checked} values differ:\n"
                        + "\n".join(report[:20]))


# -- (c) the BPF decoders ----------------------------------------------------------------------
REGS_OFF, STACK_OFF, MEM_OFF, OUT_OFF, ERR_OFF, SLOT = 0, 1024, 2048, 8192, 8184, 512
IMAGE = OUT_OFF + 16 * SLOT


def _bpf_image(c, f, placed, snap, values, memory, patch=None):
    """(ctx image, ctx offsets to relocate, indexes of values left out): registers from `snap`
    (then the ctx bytes in `patch` put over them), by-reference values' memory (from `memory`)
    copied into the image and their pointers rewritten to its offset."""
    img = bytearray(IMAGE)
    ctx = ctx_image(placed, snap, c.machine)
    for off, data in (patch or {}).items():
        ctx[off : off + len(data)] = data
    img[: len(ctx)] = ctx
    stack = stack_image(snap)
    img[STACK_OFF : STACK_OFF + len(stack)] = stack
    read = _tolerant(memory)
    relocs, skipped, mem = [], set(), MEM_OFF
    for i, vl in enumerate(values):
        if not vl.by_ref or vl.unavailable is not None:
            continue
        if placed.pointer_size != 8 or len(vl.pieces) != 1 or vl.size > 1024:
            skipped.add(i)  # a 32-bit pointer cannot hold a kernel address
            continue
        (p,) = vl.pieces
        source, src = piece_source(p, placed.byte_order)
        at = src if source == 0 else STACK_OFF + src
        addr = int.from_bytes(img[at : at + 8], placed.byte_order)
        img[mem : mem + vl.size] = read(addr, vl.size)
        img[at : at + 8] = mem.to_bytes(8, placed.byte_order)
        relocs.append(at)
        mem += (vl.size + 15) & ~15
    return img, relocs, skipped


def _exit_image(c, f, placed):
    """At return: the return registers; a struct returned through a pointer the ABI does not
    hand back is found through the pointer's entry register (what entry would have saved)."""
    ret = f.ret
    patch = {}
    if ret.by_ref and not ret.at_exit:
        entry = ctx_image(placed, c.entry, c.machine)
        for p in ret.pieces:
            source, src = piece_source(p, placed.byte_order)
            if source != 0:
                return None
            patch[src] = entry[src : src + p.size]
    return _bpf_image(c, f, placed, c.exit, (ret,), c.exit.memory, patch)


def _wrapper(f, cname: str, relocs: list[int], exit_: bool, index: int) -> str:
    ns = Namespace(reserved={bpf.RETPTR_FIELD})
    fields = [ns.take(a.name or f"arg{i}") for i, a in enumerate(f.args)]
    sp = f"(__u64)(unsigned long)ctx + {STACK_OFF}"
    kind = "exit" if exit_ else "entry"
    lines = [f'SEC("syscall") int {kind}_{cname}(void *ctx)', "{",
             f"\tstruct btfgen_args_{cname} a;", "\t__builtin_memset(&a, 0, sizeof(a));"]
    lines += [f"\t*(__u64 *)((char *)ctx + {off}) = (__u64)(unsigned long)ctx + "
              f"(*(__u64 *)((char *)ctx + {off}) & 0xffff);" for off in relocs]
    lines.append(f"\t*(__s32 *)((char *)ctx + {ERR_OFF}) = btfgen_entry_{cname}_sp(ctx, {sp}, &a);")
    spec, rec = f"&btfgen_specs[{index}]", "&rec"  # a global: BPF helpers cannot write the ctx
    # At exit, what the entry record would have carried over is taken from the same image.
    lines.append(f"\tbtfgen_generic_decode(ctx, {sp}, {spec}, 0, {rec});")
    if exit_:
        lines += [f"\t__u64 carried = btfgen_generic_carried({spec}, {rec});",
                  f"\tbtfgen_generic_decode_exit(ctx, {sp}, {spec}, {rec}, &carried);"]
    if not exit_:
        for i, (a, field) in enumerate(zip(f.args, fields)):
            if a.unavailable is None:
                lines.append(f"\t__builtin_memcpy((char *)ctx + {OUT_OFF + SLOT * i}, &a.{field},"
                             f" sizeof(a.{field}));")
    else:
        lines += [f"\tstruct btfgen_ret_{cname} r;", "\t__builtin_memset(&r, 0, sizeof(r));",
                  f"\t*(__s32 *)((char *)ctx + {ERR_OFF + 4}) = btfgen_exit_{cname}(ctx, &a, &r);",
                  f"\t__builtin_memcpy((char *)ctx + {OUT_OFF}, &r.value, sizeof(r.value));"]
    return "\n".join(lines + ["\treturn 0;", "}", ""])


def _in_record(value) -> bool:
    """Whether the generic record holds the value itself (it may hold only a large
    by-reference value's address, or leave a value out for room)."""
    return not isinstance(value, (Unavailable, Unread))


@pytest.mark.parametrize("arch", [a for a in ARCHES if a != "s390x"])
def test_bpf_decoders_return_the_passed_values(arch, tmp_path):
    reason = bpf_permitted()
    if reason:
        pytest.skip(reason)
    rows = [r for r in _placed(arch) if sum(a.size for a in r[1].args) <= 256
            and (r[1].ret is None or r[1].ret.size <= 256)][:BPF_SAMPLE]
    by_btf: dict = {}
    for r in rows:
        by_btf.setdefault(id(r[2]), []).append(r)
    checked = generic_checked = carried = 0
    problems = []
    for n, group in enumerate(by_btf.values()):
        placed, btf = group[0][2], group[0][3]
        layout = replace(placed, functions=tuple(r[1] for r in group))
        d = tmp_path / f"g{n}"
        d.mkdir()
        for name, text in generate(layout, btf, ("bpf",), self_contained=True).items():
            (d / name).write_text(text)
        cnames = bpf.function_names(layout.functions)
        images, src = [], ['#include "btfgen.bpf.h"', '#include "btfgen_specs.h"',
                           'char LICENSE[] SEC("license") = "GPL";',
                           "struct btfgen_record rec;"]
        for (c, f, _, _), cname in zip(group, cnames):
            entry = _bpf_image(c, f, placed, c.entry, f.args, c.entry.memory)
            exit_ = None
            if f.ret is not None and f.ret.unavailable is None and c.ret is not None:
                exit_ = _exit_image(c, f, placed)
            if exit_ is not None and exit_[2]:
                exit_ = None
            images.append((entry, exit_))
            index = len(images) - 1
            src.append(_wrapper(f, cname, entry[1], False, index))
            if exit_ is not None:
                src.append(_wrapper(f, cname, exit_[1], True, index))
        (d / "c.bpf.c").write_text("\n".join(src))
        proc = subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror",
                               "-c", str(d / "c.bpf.c"), "-o", str(d / "c.bpf.o")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with BpfObject(d / "c.bpf.o") as o:
            for (c, f, _, _), cname, (entry, exit_) in zip(group, cnames, images):
                _, out = o.run(f"entry_{cname}", entry[0])
                fn = function(f, placed)
                record = fn.decode_record(o.global_data())
                for i, (vl, want) in enumerate(zip(f.args, c.args)):
                    if vl.unavailable is not None or i in entry[2] \
                            or not placement_agrees(c, vl, want, f"p{i}"):
                        continue
                    got = out[OUT_OFF + SLOT * i : OUT_OFF + SLOT * i + vl.size]
                    checked += 1
                    expected = _expected(vl, want, placed.byte_order)
                    if _expected(vl, got, placed.byte_order) != expected:
                        problems.append(f"{c.func} {vl.name} ({vl.type_name}): "
                                        f"{got.hex()} != {want.hex()}")
                    if _in_record(record[i]):
                        generic_checked += 1
                        if record[i] != expected:
                            problems.append(f"{c.func} {vl.name}: generic record "
                                            f"{record[i]!r} != {expected!r}")
                if exit_ is None or f.ret.unavailable is not None or c.ret is None \
                        or not placement_agrees(c, f.ret, c.ret, "ret"):
                    continue
                _, out = o.run(f"exit_{cname}", exit_[0])
                got = out[OUT_OFF : OUT_OFF + f.ret.size]
                checked += 1
                expected = _expected(f.ret, c.ret, placed.byte_order)
                if _expected(f.ret, got, placed.byte_order) != expected:
                    problems.append(f"{c.func} return ({f.ret.type_name}): {got.hex()} != "
                                    f"{c.ret.hex()}")
                value = fn.decode_record(o.global_data())
                if _in_record(value):
                    generic_checked += 1
                    carried += f.ret.by_ref and not f.ret.at_exit
                    if value != expected:
                        problems.append(f"{c.func} return: generic record {value!r} != "
                                        f"{expected!r}")
    assert checked >= 50 and generic_checked >= 50
    if arch == "arm64":  # x8, the indirect result register, is not handed back
        assert carried >= 3
    assert not problems, (f"{arch}: {len(problems)} of {checked} differ:\n"
                          + "\n".join(problems[:20]))
