#!/usr/bin/env python3
"""Python decoding speed: entry records of scalar-only functions through a generated module's
decoder, against a bare precompiled struct.unpack_from reading the same fields of the same
records. Prints records/s for both and their ratio.

Functions: the running kernel's (the first N whose arguments are all whole scalars in
registers), else a hand-made x86_64 set."""

from __future__ import annotations

import importlib.util
import os
import random
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "codegen"))

RECORDS = int(os.environ.get("BENCH_RECORDS", 300_000))


def functions():
    from btfgen.decoder.describe import fast_format, function_desc

    if Path("/sys/kernel/btf/vmlinux").exists():
        import btfgen
        from btfgen.layout import ArchLayout

        target = btfgen.open("/sys/kernel/btf/vmlinux")
        btf = target.types
        names = ["vfs_read", "vfs_write", "do_sys_openat2", "kmalloc_trace", "__x64_sys_read",
                 "tcp_sendmsg", "ksys_write", "do_filp_open", "vfs_fsync_range", "mutex_lock"]
        funcs = [f for n in names for f in btf.find_funcs(n)[:1]]
        arch = target.place(funcs)
        source = "running kernel"
    else:
        import zoo

        btf, arch = zoo.build()
        source = "hand-made zoo"
    keep = tuple(f for f in arch.functions if f.args and
                 fast_format(f, function_desc(f, arch.byte_order, 8).args, arch.byte_order))
    from btfgen.layout import ArchLayout

    return btf, ArchLayout(arch.arch, arch.byte_order, arch.pointer_size, arch.ctx, keep), source


def main() -> None:
    from btfgen.codegen.outputs import generate

    btf, arch, source = functions()
    out = generate(arch, btf, ("python",))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench_mod.py"
        path.write_text(next(iter(out.values())))
        spec = importlib.util.spec_from_file_location("bench_mod", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    rnd = random.Random(1)
    ctxs = [rnd.randbytes(arch.ctx.size) for _ in range(RECORDS)]
    print(f"{len(arch.functions)} scalar-only functions ({source}), {RECORDS} records each")
    total_gen = total_bare = 0.0
    for f in arch.functions:
        fn = mod.function(f.name)
        entry = fn.entry
        # The bare baseline: one struct reading exactly these fields, in ctx order.
        fields = sorted((a.pieces[0].ctx_offset, a.size, a.signed) for a in f.args)
        fmt, pos = "<", 0
        for off, size, signed in fields:
            fmt += f"{off - pos}x" if off > pos else ""
            fmt += {1: "bB", 2: "hH", 4: "iI", 8: "qQ"}[size][0 if signed else 1]
            pos = off + size
        bare = struct.Struct(fmt).unpack_from
        t0 = time.perf_counter()
        for c in ctxs:
            entry(c)
        t1 = time.perf_counter()
        for c in ctxs:
            bare(c)
        t2 = time.perf_counter()
        stride = arch.ctx.size
        batch = b"".join(ctxs)
        t3 = time.perf_counter()
        for _ in fn.entries(batch, stride):
            pass
        t4 = time.perf_counter()
        batched = RECORDS / (t4 - t3)
        gen, raw = RECORDS / (t1 - t0), RECORDS / (t2 - t1)
        total_gen += t1 - t0
        total_bare += t2 - t1
        print(f"  {f.name:24s} {len(f.args)} args: generated {gen / 1e6:5.2f} M/s, "
              f"bare unpack_from {raw / 1e6:5.2f} M/s, ratio {raw / gen:4.2f}x; "
              f"batched entries() {batched / 1e6:5.2f} M/s")
    n = RECORDS * len(arch.functions)
    print(f"overall: generated {n / total_gen / 1e6:.2f} M records/s, "
          f"bare {n / total_bare / 1e6:.2f}"
          f" M records/s, generated/bare time ratio {total_gen / total_bare:.2f}x "
          f"(targets: >= 1 M/s, <= 2x)")
    # The library decoder on the same records (general path, dict of names) for reference.
    from btfgen.decode import function

    f = arch.functions[0]
    lib = function(f, arch)
    t0 = time.perf_counter()
    for c in ctxs[:50_000]:
        lib.decode_entry(c)
    t1 = time.perf_counter()
    print(f"library general path (no fast struct), {f.name}: {50_000 / (t1 - t0) / 1e6:.2f} M/s")


if __name__ == "__main__":
    main()
