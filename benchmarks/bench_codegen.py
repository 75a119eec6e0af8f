#!/usr/bin/env python3
"""Code generation speed and generated BPF code size.

1. The whole running kernel, one arch, BPF + Python + JSON: wall time of `btfgen -o DIR`, and
   the in-process stages (read, place, each output) with wall and CPU time, and the first
   import of the generated Python module.
2. 100 named functions: wall time of `python3 -m btfgen --funcs-file F` (interpreter start
   included).
3. Per-function BPF decoders vs hand-written PT_REGS_PARMn reads of the same arguments into the
   same struct: instructions counted with llvm-objdump-19 (register-only functions).
4. The generic decoder: instructions the verifier processed (verified_insns) for one load of a
   syscall program running it with a spec from a map (unknown to the verifier).
Targets (issue 5): (1) <= 10 s wall, (2) <= 1 s wall, (3) generated <= hand-written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "codegen"))
VMLINUX = "/sys/kernel/btf/vmlinux"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def timed(label, fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    print(f"  {label:28s} wall {time.perf_counter() - w:6.2f} s   "
          f"cpu {time.process_time() - c:6.2f} s")
    return out


def whole_kernel(tmp: Path) -> None:
    print("1. whole running kernel, BPF + Python + JSON "
          f"({len(os.sched_getaffinity(0))} CPUs, load {os.getloadavg()[0]:.2f} before)")
    w = time.perf_counter()
    subprocess.run([sys.executable, "-m", "btfgen", "-o", str(tmp / "all"), "-q"], env=ENV,
                   check=True)
    wall = time.perf_counter() - w
    print(f"  btfgen -o DIR (fresh dir)    wall {wall:6.2f} s")
    w = time.perf_counter()
    subprocess.run([sys.executable, "-m", "btfgen", "-o", str(tmp / "all"), "-q"], env=ENV,
                   check=True)
    print(f"  again (nothing rewritten)    wall {time.perf_counter() - w:6.2f} s")
    w = time.perf_counter()
    subprocess.run([sys.executable, "-m", "btfgen", "-o", str(tmp / "serial"), "-q", "-j", "1"],
                   env=ENV, check=True)
    print(f"  one process (-j 1, fresh)    wall {time.perf_counter() - w:6.2f} s")
    import btfgen
    from btfgen.codegen import outputs

    target = timed("read BTF", lambda: btfgen.open(VMLINUX))
    btf = target.types
    funcs = timed("list functions", lambda: list(btf.funcs()))
    arch = timed(f"place {len(funcs)} functions", lambda: target.place(funcs))
    for lang in outputs.LANGS:
        timed(f"generate {lang}", lambda lang=lang: outputs.generate(arch, btf, (lang,)))
    timed("generate all, 2 processes", lambda: outputs.generate(arch, btf, jobs=2))
    sizes = {p.name: p.stat().st_size for p in (tmp / "all").iterdir()}
    print("  sizes: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items())))
    # What a user of the whole-kernel Python module waits for (no .pyc: a first import).
    module = next((tmp / "all").glob("btfgen_*.py")).stem
    probe = (f"import resource, time; w = time.perf_counter(); import {module} as m; "
             "n = len(m.names()); w = time.perf_counter() - w; "
             "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
             "print(f'  import the module ({n} functions) wall {w:6.2f} s   '"
             "f'peak RSS {rss >> 10} MB')")
    subprocess.run([sys.executable, "-B", "-c", probe], cwd=tmp / "all", check=True,
                   env=dict(ENV, PYTHONDONTWRITEBYTECODE="1"))


def hundred(tmp: Path) -> None:
    print("2. 100 named functions (interpreter start included)")
    from btfgen.btf.reader import open_btf

    names = []
    for f in open_btf(VMLINUX).funcs():
        if f.name not in names:
            names.append(f.name)
        if len(names) == 100:
            break
    (tmp / "funcs.txt").write_text("\n".join(names) + "\n")
    for attempt in range(3):
        w = time.perf_counter()
        subprocess.run([sys.executable, "-m", "btfgen", "--funcs-file", str(tmp / "funcs.txt"),
                        "-o", str(tmp / "hundred"), "-q"], env=ENV, check=True)
        print(f"  run {attempt + 1}: wall {time.perf_counter() - w:.2f} s")


_INSN = re.compile(r"^\s*\d+:\s+(?:[0-9a-f]{2}\s){8}")


def count_insns(obj: Path) -> dict[str, int]:
    text = subprocess.run(["llvm-objdump-19", "-d", str(obj)], capture_output=True, text=True,
                          check=True).stdout
    counts, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <(\w+)>:", line)
        if m:
            current = m.group(1)
            counts[current] = 0
        elif current and _INSN.match(line):
            counts[current] += 1
    return counts


def instructions(tmp: Path) -> None:
    print("3. per-function decoder vs hand-written PT_REGS_PARMn (llvm-objdump-19)")
    import kernel

    from btfgen.codegen import bpf
    from btfgen.codegen.outputs import generate
    from btfgen.layout import ArchLayout, RegPiece

    full = kernel.placed_all()
    picked = [f for f in full.functions
              if f.args and all(a.unavailable is None and not a.by_ref and len(a.pieces) == 1
                                and isinstance(a.pieces[0], RegPiece) and a.size == a.pieces[0].size
                                for a in f.args)][:200:4]
    arch = ArchLayout(full.arch, full.byte_order, full.pointer_size, full.ctx, tuple(picked))
    out = generate(arch, kernel.btf(), ("bpf",), specs_table=False)
    d = tmp / "insns"
    d.mkdir()
    (d / "btfgen.bpf.h").write_text(out["btfgen.bpf.h"])
    kernel.vmlinux_h(d)
    names = bpf.function_names(arch.functions)
    src = ['#include "vmlinux.h"', "#include <bpf/bpf_helpers.h>", "#include <bpf/bpf_tracing.h>",
           '#include "btfgen.bpf.h"', 'char LICENSE[] SEC("license") = "GPL";',
           "#ifndef PT_REGS_PARM6 /* libbpf < 1.2 */",
           "#define PT_REGS_PARM6(x) (((const struct pt_regs *)(x))->r9)", "#endif"]
    for f, n in zip(arch.functions, names):
        fields = bpf.function_view(f, bpf.c_types(arch, kernel.btf(), False), False).args
        src.append(f"struct btfgen_args_{n} out_{n};")
        src.append(f'SEC("kprobe") int gen_{n}(struct pt_regs *ctx) '
                   f"{{ return btfgen_entry_{n}(ctx, &out_{n}); }}")
        body = " ".join(f"out_{n}.{a.field} = (__typeof__(out_{n}.{a.field}))"
                        f"PT_REGS_PARM{i + 1}(ctx);"
                        for i, a in enumerate(fields))
        src.append(f'SEC("kprobe") int hand_{n}(struct pt_regs *ctx) {{ {body} return 0; }}')
    (d / "i.bpf.c").write_text("\n".join(src) + "\n")
    subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-D__TARGET_ARCH_x86",
                    "-c", str(d / "i.bpf.c"), "-o", str(d / "i.bpf.o")], check=True)
    counts = count_insns(d / "i.bpf.o")
    gen = sum(counts[f"gen_{n}"] for n in names)
    hand = sum(counts[f"hand_{n}"] for n in names)
    worse = [n for n in names if counts[f"gen_{n}"] > counts[f"hand_{n}"]]
    print(f"  {len(names)} functions: generated {gen} instructions, hand-written {hand}; "
          f"generated longer for {len(worse)} {worse[:5]}")


def generic(tmp: Path) -> None:
    print("4. generic decoder, verified instruction count")
    from bpfrun import BpfObject, bpf_permitted

    reason = bpf_permitted()
    if reason:
        print(f"  skipped: {reason}")
        return
    d = tmp / "generic"
    d.mkdir()
    import kernel

    from btfgen.codegen.outputs import generate
    from btfgen.layout import ArchLayout

    full = kernel.placed_all()
    arch = ArchLayout(full.arch, full.byte_order, full.pointer_size, full.ctx, full.functions[:1])
    (d / "btfgen.bpf.h").write_text(generate(arch, kernel.btf(), ("bpf",))["btfgen.bpf.h"])
    kernel.vmlinux_h(d)
    (d / "g.bpf.c").write_text(
        '#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\n#include "btfgen.bpf.h"\n'
        'char LICENSE[] SEC("license") = "GPL";\n'
        "struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1024);\n"
        "\t__type(key, __u32); __type(value, struct btfgen_spec); } specs SEC(\".maps\");\n"
        "struct btfgen_record rec;\n"
        'SEC("syscall") int generic(void *ctx) {\n'
        "\t__u32 key = 0;\n\tstruct btfgen_spec *s = bpf_map_lookup_elem(&specs, &key);\n"
        "\tif (!s)\n\t\treturn 0;\n"
        "\treturn btfgen_generic_decode(ctx, (__u64)(unsigned long)ctx + 256, s, 0, &rec);\n}\n")
    subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror",
                    "-c", str(d / "g.bpf.c"), "-o", str(d / "g.bpf.o")], check=True)
    insns = count_insns(d / "g.bpf.o")["generic"]
    with BpfObject(d / "g.bpf.o") as o:
        print(f"  generic routine: {insns} instructions, "
              f"verified_insns {o.verified_insns('generic')}")


def main() -> None:
    if not Path(VMLINUX).exists():
        print("no /sys/kernel/btf/vmlinux: nothing to measure")
        return
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        parts = sys.argv[1:] or ["1", "2", "3", "4"]
        if "1" in parts:
            whole_kernel(tmp)
        if "2" in parts:
            hundred(tmp)
        if "3" in parts:
            instructions(tmp)
        if "4" in parts:
            generic(tmp)


if __name__ == "__main__":
    main()
