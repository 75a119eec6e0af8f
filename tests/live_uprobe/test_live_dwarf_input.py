"""btfgen run on a -g program itself (no .BTF: types from its DWARF, placement checked against
it), the generated typed decoders attached as uprobes to that program, live: every value the
program passed and returned is decoded right."""

from __future__ import annotations

import subprocess
import sys

import live_harness as harness
from live_expected import FUNCS
from test_live_generated import check_typed_decoders

import btfgen


def test_typed_decoders_generated_from_a_debug_binary(tmp_path):
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)  # gcc -O2 -g; `exe` itself has no .BTF
    proc = subprocess.run([sys.executable, "-m", "btfgen", str(exe),
                           *(f"--func={n}" for n in FUNCS), "--self-contained", "--lang", "bpf",
                           "-o", str(tmp_path), "-q"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # The same layout in this process, for the record decoding: the same input path.
    target = btfgen.open(str(exe))  # the one DWARF policy: its own DWARF, consulted
    assert target.dwarf == str(exe) and target.arch == "x86_64"
    layout = target.place([target.types.find_funcs(n)[0] for n in FUNCS])
    check_typed_decoders(tmp_path, exe, target.types, layout)
