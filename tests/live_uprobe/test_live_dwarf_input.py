"""btfgen run on a -g program itself (no .BTF: types from its DWARF, placement checked against
it), the generated typed decoders attached as uprobes to that program, live: every value the
program passed and returned is decoded right."""

from __future__ import annotations

import subprocess
import sys

import live_harness as harness
from live_expected import ARGS, FUNCS, RETURNS
from test_live_generated import _decode_typed, _typed_program

from btfgen.abi.arches import load_arch
from btfgen.btf.reader import open_btf
from btfgen.dwarf.options import apply_dwarf
from btfgen.dwarf.pahole import open_input
from btfgen.place import place_functions
from btfgen.trace import bpfload


class _Args:
    dwarf = None
    no_dwarf = False
    header = None


def test_typed_decoders_generated_from_a_debug_binary(tmp_path):
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)  # gcc -O2 -g; `exe` itself has no .BTF
    proc = subprocess.run([sys.executable, "-m", "btfgen", str(exe),
                           *(f"--func={n}" for n in FUNCS), "--self-contained", "--lang", "bpf",
                           "-o", str(tmp_path), "-q"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # The same layout in this process, for the record decoding: the same input path.
    btf = open_input(str(exe))
    conv = load_arch("x86_64")
    layout = place_functions(btf, conv, [btf.find_funcs(n)[0] for n in FUNCS])
    layout = apply_dwarf(layout, _Args(), str(exe), conv, selected=True, quiet=True)
    src = tmp_path / "typed.bpf.c"
    src.write_text(_typed_program(layout))
    obj_path = harness.compile_bpf(src, tmp_path / "typed.bpf.o", include_dirs=[tmp_path])
    bpf_btf = open_btf(str(obj_path))
    with bpfload.BpfObject(str(obj_path)) as obj:
        obj.load()
        for f in layout.functions:
            obj.attach_uprobe(f"entry_{f.name}", str(exe), f.name)
            obj.attach_uprobe(f"exit_{f.name}", str(exe), f.name, retprobe=True)
        records = harness.run_traced(obj, exe)
    seen = {}
    for rec in records:
        name, what, value = _decode_typed(rec, bpf_btf, btf, layout)
        seen[name, what] = value
    assert seen == {**{(n, "args"): v for n, v in ARGS.items()},
                    **{(n, "ret"): v for n, v in RETURNS.items()}}
