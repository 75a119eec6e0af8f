"""btfgen run on a -g program itself (no .BTF: types from its DWARF, placement checked against
it), the generated typed decoders attached as uprobes to that program, live: every value the
program passed and returned is decoded right."""

from __future__ import annotations

import subprocess
import sys

import live_harness as harness
from live_expected import FUNCS
from test_live_generated import check_typed_decoders

from btfgen.abi.arches import load_arch
from btfgen.commands.options import apply_dwarf
from btfgen.dwarf.pahole import open_input
from btfgen.place import place_functions


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
    check_typed_decoders(tmp_path, exe, btf, layout)
