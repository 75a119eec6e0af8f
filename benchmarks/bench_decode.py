#!/usr/bin/env python3
"""Python decoding speed.

  python3 benchmarks/bench_decode.py            # the generated decoders
  python3 benchmarks/bench_decode.py --lines    # the printed lines: Printer, `btfgen decode`

Default: entry records of scalar-only functions through a generated module's decoder, against
a bare precompiled struct.unpack_from reading the same fields of the same records. Prints
records/s for both and their ratio. Functions: the running kernel's (the first N whose
arguments are all whole scalars in registers), else a hand-made x86_64 set.

--lines: bench_tracers.py's function (`traced`: six longs and a `const char *`, its string
captured), its trace directory built as bench_tracers builds it (gcc, clang, pahole), and
BENCH_RECORDS calls of it as records of the ring buffer's format (an entry and an exit each,
values as tracee.c makes them). Prints the rate of output.Printer over them (text, text with
who, JSON, --errors), one record a call (record()) and a ring-buffer batch a call (records(),
where this tree has it), in CPU time of this process; and of `btfgen decode` (text, jsonl)
over a recording of them, its wall and CPU time less its time over a one-call recording (its
start-up), as bench_tracers.py counts it. Each figure is the best of BENCH_ROUNDS runs.
"""

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
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))


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


def lines() -> None:
    import io
    import resource
    import subprocess

    import bench_tracers

    from btfgen.probe import event, manifest, output
    from btfgen.probe.run import recorder

    calls = RECORDS // 2
    with tempfile.TemporaryDirectory(prefix="bench_lines.") as tmp:
        work = Path(tmp)
        _exe, trace_dir = bench_tracers.build(work)
        man = manifest.load_manifest(trace_dir)
        decoders = manifest.load_decoders(trace_dir, man)
        fn = decoders.function(bench_tracers.FUNCTION)
        desc = decoders._descriptor(bench_tracers.FUNCTION)[0]
        records = traced_records(desc, decoders.BYTE_ORDER, calls)
        size = len(records[0])
        print(f"{bench_tracers.FUNCTION}: {calls:,} calls, {len(records):,} records of "
              f"{size} bytes; best of {ROUNDS}")
        print("| Printer | one a call (record) | a batch a call (records) |")
        print("|---|---|---|")
        batched = hasattr(output.Printer, "records")
        for label, kw in (("text", {}), ("text, who", {"who": True}), ("JSON", {"as_json": True}),
                          ("--errors (none failed)", {"errors": True})):
            rates = []
            for batch in (False, True):
                if batch and not batched:
                    rates.append("-")
                    continue
                best = None
                for _ in range(ROUNDS):
                    out = io.StringIO()
                    p = output.Printer({fn.btf_id: fn}, decoders.BYTE_ORDER, out, flush=False,
                                       batch=True, **kw)
                    started = time.process_time()
                    if batch:
                        for at in range(0, len(records), 4096):
                            p.records(records[at:at + 4096])
                    else:
                        for raw in records:
                            p.record(raw)
                        p.flush_lines()
                    took = time.process_time() - started
                    if out.getvalue().count("\n") != (0 if kw.get("errors") else len(records)):
                        raise SystemExit(f"bench_decode: {label}: not a line a record")
                    best = took if best is None else min(best, took)
                rates.append(f"{len(records) / best:,.0f} records/s")
            print(f"| {label} | {rates[0]} | {rates[1]} |")
        paths = {}
        for name, n in (("one", 1), ("all", calls)):
            paths[name] = work / f"{name}.btfrec"
            w = recorder(str(paths[name]), man, decoders, False)
            if hasattr(w, "records"):  # a batch at a time, as spans of the ring come
                for at in range(0, 2 * n, 4096):
                    w.records(records[at:min(at + 4096, 2 * n)])
            else:
                for raw in records[:2 * n]:
                    w.record(raw)
            w.close(0)
        print()
        print("| btfgen decode | wall, start-up apart | CPU, start-up apart | start-up (wall) |")
        print("|---|---|---|---|")
        for fmt in ("text", "jsonl"):
            def run(path):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", "-q",
                                       "--format", fmt, str(path)], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if proc.returncode:
                    raise SystemExit(f"bench_decode: btfgen decode: {proc.stderr.decode()}")
                return wall, (after.ru_utime + after.ru_stime - before.ru_utime
                              - before.ru_stime)

            start = min(run(paths["one"]) for _ in range(ROUNDS))
            full = [run(paths["all"]) for _ in range(ROUNDS)]
            wall = min(w for w, _ in full) - start[0]
            cpu = min(c for _, c in full) - start[1]
            print(f"| {fmt} | {len(records) / wall:,.0f} events/s | "
                  f"{len(records) / cpu:,.0f} events/s | {start[0]:.2f} s |")


def traced_records(desc, order: str, calls: int) -> list[bytes]:
    """Entries and exits of tracee.c's calls as the BPF side writes them: the event's head,
    the record's, each value at its plan's place, the string capture read whole, the record as
    long as the recording keeps it."""
    from btfgen.probe import output, recording, spec_format

    bo = "<" if order == "little" else ">"
    data = event.DATA
    size = recording.stride(desc)
    record_head = spec_format.structs(spec_format.RECORD_HEAD)[order]
    capture_head = spec_format.structs(spec_format.CAPTURE_HEAD)[order]
    codes = {(8, True): "q", (8, False): "Q", (4, True): "i", (4, False): "I"}
    name = b"bench"
    pointer = 0x5612_3456_7000
    out, ns = [], 1_000_000
    for i in range(calls):
        args = (i, -i, -7, 4_000_000_000, 1 << 40, 3 * i, pointer)
        for kind, values, plans in ((0, args, desc.record.entry),
                                    (1, (sum(args[:6]) + name[0],), desc.record.exit)):
            raw = bytearray(size)
            event.HEADS[order].pack_into(raw, 0, 4242, 4242, b"tracee", ns, 1, 0)
            record_head.pack_into(raw, event.EVENT_HEADER, desc.btf_id, kind, 0)
            vdescs = desc.args if kind == 0 else (desc.ret.value,)
            for v, value, plan in zip(vdescs, values, plans):
                t = v.type
                struct.pack_into(bo + codes[t.size, t.tag == "int" and t.signed], raw,
                                 data + plan.data_off, value)
            for c in desc.captures:
                if c.at_exit == bool(kind):
                    capture_head.pack_into(raw, data + c.head, 1, 0, 1, 0, len(name) + 1, 0,
                                           pointer)
                    at = data + c.head + event.CAPTURE_HEADER
                    raw[at:at + len(name) + 1] = name + b"\0"
            out.append(bytes(raw))
            ns += 4_000
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    lines() if sys.argv[1:] == ["--lines"] else main()
