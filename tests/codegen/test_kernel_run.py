"""Real kernel functions end to end: the running kernel's BTF, placed for x86_64, decoders
generated against vmlinux.h, loaded through the verifier and executed with BPF_PROG_TEST_RUN
over register/stack images holding chosen values among garbage."""

from __future__ import annotations

from dataclasses import replace

import imagegen
import kernel
import pytest
from bpfrun import BpfObject, bpf_permitted

from btfgen.btf import walk
from btfgen.btf import types as T
from btfgen.codegen import bpf
from btfgen.codegen.outputs import generate
from btfgen.decode import function
from btfgen.decoder.describe import type_desc
from btfgen.decoder.runtime import RECORD_HEADER_SIZE, convert
from btfgen.layout import RegPiece, StackPiece
from btfgen.probe import spec_format

pytestmark = pytest.mark.skipif(kernel.missing() is not None, reason=str(kernel.missing()))

CATEGORIES = {
    "narrow ints": lambda f: any(a.size < 4 and not a.by_ref and a.pieces for a in f.args),
    "stack args": lambda f: any(isinstance(p, StackPiece) for a in f.args for p in a.pieces),
    "struct in registers": lambda f: any(
        isinstance(walk.strip(a.type), T.Composite) and a.pieces
        and all(isinstance(p, RegPiece) for p in a.pieces) for a in f.args),
    "struct on the stack": lambda f: any(
        isinstance(walk.strip(a.type), T.Composite) and a.pieces
        and all(isinstance(p, StackPiece) for p in a.pieces) for a in f.args),
    "enum": lambda f: any(isinstance(walk.strip(a.type), T.Enum) for a in f.args),
    "bool": lambda f: any(isinstance(walk.strip(a.type), T.Int) and walk.strip(a.type).is_bool
                          for a in f.args),
    "struct return": lambda f: f.ret is not None and isinstance(walk.strip(f.ret.type), T.Composite),
    "wide return": lambda f: f.ret is not None and len(f.ret.pieces) > 1,
}
PER_CATEGORY = 3


def _small(f) -> bool:
    return sum(a.size for a in f.args) <= 200 and (f.ret is None or f.ret.size <= 64) \
        and all(a.unavailable is None for a in f.args)


def chosen():
    full = kernel.placed_all()
    picked, seen = [], set()
    for pred in CATEGORIES.values():
        n = 0
        for f in full.functions:
            if n == PER_CATEGORY:
                break
            if f.btf_id not in seen and _small(f) and pred(f):
                picked.append(f)
                seen.add(f.btf_id)
                n += 1
    for name in ("vfs_read", "do_sys_openat2"):
        for f in full.functions:
            if f.name == name and f.btf_id not in seen:
                picked.append(f)
                seen.add(f.btf_id)
    return replace(full, functions=tuple(picked))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    reason = bpf_permitted()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("kernel_run")
    arch = chosen()
    assert len(arch.functions) >= 15
    out = generate(arch, kernel.btf(), ("bpf",))
    for name, text in out.items():
        (d / name).write_text(text)
    kernel.vmlinux_h(d)
    cnames = bpf.function_names(arch.functions)
    images = [imagegen.make_image(f, "little", 8, seed=f.btf_id) for f in arch.functions]
    src = ['#include "vmlinux.h"', "#include <bpf/bpf_helpers.h>", '#include "btfgen.bpf.h"',
           '#include "btfgen_specs.h"', 'char LICENSE[] SEC("license") = "GPL";',
           "struct btfgen_record rec[2];", ""]
    for i, (f, cname) in enumerate(zip(arch.functions, cnames)):
        src.append(imagegen.wrapper(f, cname, images[i], i))
    (d / "run.bpf.c").write_text("\n".join(src))
    proc = kernel.clang_bpf(d / "run.bpf.c", d / "run.bpf.o")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr == ""
    results = []
    with BpfObject(d / "run.bpf.o") as o:
        for f, cname, img in zip(arch.functions, cnames, images):
            _, ctx = o.run(f"entry_{cname}", img.ctx)
            exit_ctx = o.run(f"exit_{cname}", img.exit_ctx)[1] if f.ret is not None else None
            results.append((ctx, exit_ctx, o.global_data()))
    return arch, images, results


def _slot(ctx: bytes, i: int, size: int) -> bytes:
    start = imagegen.OUT_OFF + imagegen.SLOT * i
    return ctx[start : start + size]


def test_entry_and_exit_decoders_on_real_prototypes(run):
    arch, images, results = run
    for f, img, (ctx, exit_ctx, _) in zip(arch.functions, images, results):
        assert ctx[imagegen.ERR_OFF : imagegen.ERR_OFF + 4] == bytes(4), f.name
        for i, (a, want) in enumerate(zip(f.args, img.values)):
            assert _slot(ctx, i, a.size) == want, f"{f.name}: {a.name} ({a.type_name})"
        if f.ret is not None and f.ret.unavailable is None:
            assert _slot(exit_ctx, len(f.args), f.ret.size) == img.ret, f"{f.name}: return"


def test_generic_records_on_real_prototypes(run):
    arch, images, results = run
    size = RECORD_HEADER_SIZE + spec_format.DATA_SIZE
    for f, img, (_, _, bss) in zip(arch.functions, images, results):
        fn = function(f, arch)
        for a, want, got in zip(f.args, img.values, fn.decode_record(bss[:size])):
            assert got == convert(type_desc(a.type), want, 0, "little"), f"{f.name}: {a.name}"
        if f.ret is not None and f.ret.unavailable is None and not f.ret.by_ref:
            got = fn.decode_record(bss[size : 2 * size])
            assert got == convert(type_desc(f.ret.type), img.ret, 0, "little"), f.name
