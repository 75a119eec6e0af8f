"""A function compiled with another convention than its prototype, traced live with the
compiler's word: on x86-32 the kernel is built with -mregparm=3, but `asmlinkage` functions take
every argument on the stack. `vprintk_emit` is one; writing `<30>btfgen` to /dev/kmsg reaches it
with facility 3 and level 6 (30 = 3 << 3 | 6).

The trace directory is built here from bookworm i386's BTF with its -dbg vmlinux as `--dwarf`,
and run in the guest by `btfgen trace`'s run side (one kprobe per function: 6.1 has no
kprobe_multi). Without DWARF the prototype alone would put facility and level in eax and edx,
which hold something else at entry: the test checks that too, so it fails if the correction is
what stops happening.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from btfgen.abi.arches import load_arch
from btfgen.btf.reader import open_btf
from btfgen.layout import RegPiece, StackPiece
from btfgen.place import place_functions

from . import debian, printed, python_guest
from . import kernel as kernels
from .conftest import btf_for, kernel_for, unavailable

pytestmark = pytest.mark.live

TARGET = "bookworm-i386"
FUNCTION = "vprintk_emit"


def test_asmlinkage_function_traced_with_dwarf(tmp_path):
    k = kernel_for(TARGET)
    t = k.target
    btf_path = btf_for(k)
    try:
        dbg = kernels.debug_vmlinux(k)
    except debian.PackageError as e:
        unavailable(f"{TARGET}: the -dbg vmlinux cannot be had: {e}")

    # The prototype's placement: regparm(3) registers, which asmlinkage does not use.
    btf = open_btf(str(btf_path))
    proto = place_functions(btf, load_arch(t.arch), btf.find_funcs(FUNCTION)).functions[0]
    assert [type(a.pieces[0]) for a in proto.args[:2]] == [RegPiece, RegPiece]
    assert [a.pieces[0].hwreg for a in proto.args[:2]] == ["eax", "edx"]

    out = tmp_path / "trace"
    proc = subprocess.run(
        [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", str(btf_path),
         "--dwarf", str(dbg), "--arch", t.arch, "--build", str(out), FUNCTION],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"placed from DWARF ({dbg}): {FUNCTION}" in proc.stderr, proc.stderr

    g, py = python_guest.trace_guest(t, out)
    # The guest's /dev is not devtmpfs: the traced command makes the kmsg node (1, 11) itself.
    write = ("import os; os.mknod('/tmp/kmsg', 0o20600, os.makedev(1, 11)); "
             "open('/tmp/kmsg', 'w').write('<30>btfgen')")
    g.step("trace", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                    f"{py.python} btfgen_trace.py --run /trace -- {py.python} -c \"{write}\" 2>&1")
    boot = g.run(k)
    text, rc = boot.section("trace")
    assert rc == 0, f"the tool failed (exit {rc}):\n{text[-3000:]}"
    calls = [printed.fields(m.group(1)) for m in
             re.finditer(rf"^{FUNCTION}\((.*)\)\s*$", text, re.M)]
    assert calls, f"no {FUNCTION} line:\n{text[-3000:]}"
    ours = [c for c in calls if printed.same(3, printed.value(c.get("facility", "")))]
    assert ours, f"no {FUNCTION} call with facility=3:\n{text[-3000:]}"
    assert printed.same(6, printed.value(ours[0]["level"])), ours[0]
    assert printed.same(0, printed.value(ours[0]["dev_info"])), ours[0]  # /dev/kmsg passes NULL
    # The exit: the length of the text logged (the return register, eax, either way).
    assert re.search(rf"^{FUNCTION} -> 6 \(", text, re.M), text[-3000:]


def test_dwarf_places_asmlinkage_on_the_stack():
    """The layout the trace directory is built from, without booting: every argument of
    vprintk_emit in a stack slot, source "dwarf"."""
    from btfgen.dwarf.correct import correct_layout

    k = kernel_for(TARGET)
    btf = open_btf(str(btf_for(k)))
    try:
        dbg = kernels.debug_vmlinux(k)
    except debian.PackageError as e:
        unavailable(f"{TARGET}: the -dbg vmlinux cannot be had: {e}")
    conv = load_arch(k.target.arch)
    layout = place_functions(btf, conv, btf.find_funcs(FUNCTION))
    fixed, corrections = correct_layout(layout, str(dbg), conv, selected=True)
    assert [c.name for c in corrections] == [FUNCTION]
    f = fixed.functions[0]
    assert [a.pieces for a in f.args[:2]] == [(StackPiece(4, 0, 4),), (StackPiece(8, 0, 4),)]
    assert all(a.source == "dwarf" for a in f.args)
