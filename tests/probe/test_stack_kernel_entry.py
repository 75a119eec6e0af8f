"""--stack=kernel,user's user side, without BPF: a thread stopped where it entered the kernel
(gdb at a system call's catchpoint: the registers the kernel saves there, and the user stack
from sp up, copied as trace.bpf.c copies it: 4 KiB, or to the end of sp's page), unwound
offline from the program's .eh_frame as the tracer unwinds a kernel function's call
(stack_wire.AT_KERNEL_ENTRY): the static chain of tests/live_kernel/guest/stack_chain.c named
lseek's wrapper, b, a, main, down to _start, whole; and no traced user call kept for the
thread (a uprobe's part, without the flag, keeps its own return address)."""

from __future__ import annotations

import platform
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from btfgen.probe import stack_wire, symbolize

CHAIN = Path(__file__).resolve().parents[1] / "live_kernel" / "guest" / "stack_chain.c"
GDB = shutil.which("gdb") or shutil.which("gdb-multiarch")
pytestmark = pytest.mark.skipif(
    not (GDB and shutil.which("gcc")) or platform.machine() != "x86_64",
    reason="needs gcc and gdb on x86_64")

# Stopped at lseek's system call: pc, sp, rbp, the pid, then the stack copied, to `sample`;
# the inferior kept alive (its maps are read) until `done` exists.
SCRIPT = r"""
set pagination off
catch syscall lseek
run
python
import gdb, os, struct, time
regs = [int(gdb.parse_and_eval(r)) for r in ("$pc", "$sp", "$rbp")]
inf = gdb.selected_inferior()
sp = regs[1]
try:
    data = bytes(inf.read_memory(sp, 4096))
except gdb.MemoryError:
    data = bytes(inf.read_memory(sp, (4096 - (sp & 4095)) & (4096 - 8)))
with open(SAMPLE + ".tmp", "wb") as f:
    f.write(struct.pack("<QQQQ", *regs, inf.pid) + data)
os.rename(SAMPLE + ".tmp", SAMPLE)
for _ in range(600):
    if os.path.exists(DONE):
        break
    time.sleep(0.05)
end
kill
"""


def _stopped_at_lseek(tmp_path: Path):
    exe = tmp_path / "chain"
    subprocess.run(["gcc", "-O2", "-static", "-Wall", "-Werror", "-DSEEK_TO=0x987654000L",
                    "-o", str(exe), str(CHAIN)], check=True, capture_output=True)
    sample, done = tmp_path / "sample", tmp_path / "done"
    script = tmp_path / "stop.gdb"
    script.write_text(SCRIPT.replace("SAMPLE", repr(str(sample))).replace("DONE",
                                                                       repr(str(done))))
    gdb = subprocess.Popen([GDB, "-q", "-batch", "-nx", "-x", str(script), "--args", str(exe),
                            str(tmp_path / "seek")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    for _ in range(600):
        if sample.exists() or gdb.poll() is not None:
            break
        time.sleep(0.05)
    if not sample.exists():
        gdb.kill()
        pytest.fail(f"gdb did not stop the chain at lseek: {gdb.communicate()[0][-2000:]}")
    raw = sample.read_bytes()
    return gdb, done, struct.unpack_from("<QQQQ", raw), raw[32:]


def _part(regs, data: bytes, flags: int) -> bytes:
    return struct.pack("<HHHHQQQQ", 0, 0, len(data), flags, *regs, 0) + data


def test_a_kernel_functions_user_side_unwound_from_eh_frame(tmp_path):
    gdb, done, (pc, sp, rbp, pid), data = _stopped_at_lseek(tmp_path)
    try:
        stacks = symbolize.Stacks("x86_64", "little")
        got = stacks.describe(_part((pc, sp, rbp), data, stack_wire.AT_KERNEL_ENTRY), 0,
                              pid, pid)
        uprobe = symbolize.Stacks("x86_64", "little")
        uprobe.describe(_part((pc, sp, rbp), data, 0), 0, pid, pid)
    finally:
        done.touch()
        gdb.communicate(timeout=60)
    names = [f.symbol for f in got["user"]]
    assert got["user_cut"] is None, got
    assert "lseek" in names[0] and got["user"][0].offset > 0, names  # after the syscall
    assert names[1:4] == ["b", "a", "main"] and names[-1] == "_start", names
    assert all(f.object == str(tmp_path / "chain") for f in got["user"]), got["user"]
    # the kernel's entry is no traced user call: nothing kept for the thread's next stacks
    assert stacks.user._open == {} and list(uprobe.user._open) == [pid]
