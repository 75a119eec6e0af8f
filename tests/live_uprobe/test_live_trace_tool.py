"""examples/btfgen_trace.py end to end, as a user runs it: on the target built with -g (types
from its DWARF via pahole), and on the same program built without debug information (types
from target.h via libclang)."""

from __future__ import annotations

import subprocess
import sys

import live_harness as harness

TOOL = harness.HERE.parent.parent / "examples" / "btfgen_trace.py"

# What target.c passes and returns (live_expected.py), as the tool prints it.
EXPECTED = """\
add7(a=-1, b=-2, c=-3, d=-4, e=4000000000, f=20015998343868, g=-77)
add7 -> 20019998343781
take_pair(p={a=-5, b=1234567890123}, k=3)
take_pair -> 1234567890108
take_big(k=-9, b={x=11, y=-22, z=33}, c=BLUE(7))
take_big -> 20
make_pair(a=21, b=-8)
make_pair -> {a=42, b=-9}
make_big(a=1000)
make_big -> {x=1000, y=1001, z=-1000}
many(a=1, b=-2, c=3, d=-4, e=5, f=-6, g=7, h=-8, s={a=-70000, b=-300, c=-7, d=True}, i=90)
many -> -70220
take_flags(f={lo=5, mid=-200, hi=987654}, yes=True, u=18364758544493064720)
take_flags -> 1986216788
"""
FUNCS = ["add7", "take_pair", "take_big", "make_pair", "make_big", "many", "take_flags"]


def _trace(*args) -> str:
    proc = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_types_from_debug_info(tmp_path):
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)
    assert _trace(str(exe), *FUNCS) == EXPECTED


def test_types_from_the_header_for_a_program_without_debug_info(tmp_path):
    harness.require_live()
    exe = tmp_path / "target-nodebug"
    harness.run(["gcc", "-O2", "-I", str(harness.HERE), str(harness.HERE / "target.c"), "-o",
                 str(exe)], "compiling the target without -g")
    out = _trace("--header", str(harness.HERE / "target.h"), str(exe), *FUNCS)
    assert out == EXPECTED


def test_unknown_function_is_one_line(tmp_path):
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)
    proc = subprocess.run([sys.executable, str(TOOL), str(exe), "no_such_function"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("btfgen_trace: no function 'no_such_function'")
    assert len(proc.stderr.strip().splitlines()) == 1
