"""The live uprobe harness: build the target program and its BTF, compile BPF objects, run the
target under attached probes and collect the ring buffer's records.

Everything is built in a per-session directory; nothing is cached, because the point is to run
this machine's compilers, pahole and kernel for real.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from btfgen.probe import bpf_object, features, ringbuf, tracefs
from btfgen.trace import symbols

HERE = Path(__file__).parent
CLANG = "clang-19"
# As the kernel build runs pahole (scripts/Makefile.btf): floats as FLOAT, not as INT.
PAHOLE = ("pahole", "-J", "--btf_gen_floats")
# bpf_helpers.h and <linux/bpf.h>; asm/ for the hand-written program's pt_regs.
BPF_CFLAGS = ("-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86",
              "-I/usr/include/x86_64-linux-gnu")


def skip_reason() -> str | None:
    import platform

    if platform.machine() != "x86_64":
        return f"the live target is built for x86_64, this is {platform.machine()}"
    missing = [t for t in ("gcc", CLANG, "pahole") if shutil.which(t) is None]
    if missing:
        return f"not installed: {', '.join(missing)}"
    return features.bpf_programs().why


def offsets(exe: Path, names: list[str]) -> list[int]:
    """The file offsets of `names` in `exe`, as the trace build gives them to the run side
    (uprobe_multi links attach by offset)."""
    return [f.offset for f in symbols.functions(str(exe), names)]


def run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise AssertionError(f"{what} failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def build_target(workdir: Path) -> tuple[Path, Path]:
    """The traced program (native gcc -O2 -g) and a copy of it with .BTF from pahole."""
    exe = workdir / "target"
    run(["gcc", "-O2", "-g", "-I", str(HERE), str(HERE / "target.c"), "-o", str(exe)],
        "compiling the target")
    with_btf = workdir / "target.btf.elf"
    shutil.copyfile(exe, with_btf)
    run([*PAHOLE, str(with_btf)], "pahole -J")
    return exe, with_btf


def compile_bpf(source: Path, out: Path, include_dirs=()) -> Path:
    run([CLANG, *BPF_CFLAGS, *(f"-I{d}" for d in include_dirs), "-c", str(source), "-o",
         str(out)], f"compiling {source.name}")
    return out


def run_traced(obj: bpf_object.BpfObject, exe: Path, ring: str = "events") -> list[bytes]:
    """Run `exe` to completion with `obj`'s probes attached; its records, in order."""
    records: list[bytes] = []
    with ringbuf.RingBuffer(obj.map_fd(ring), records.append) as rb:
        proc = subprocess.run([str(exe)], capture_output=True)
        assert proc.returncode == 0, proc.stderr
        while rb.poll(50) > 0:
            pass
        rb.drain()
    return records


def require_live():
    reason = skip_reason()
    if reason:
        pytest.skip(f"live uprobes unavailable: {reason}")
    tracefs.mount_tracefs()
