"""btfgen's per-function kernel C in the kernel's own fprobe callbacks (examples/fprobe_args):
the module built for the exact kernel a guest boots, one fprobe on vfs_read and vfs_write,
each call's arguments decoded at entry by btfgen_entry_NAME() and kept for the exit, in the
fprobe's entry_data and (store=1) in a struct btfgen_store keyed by the call; at exit
btfgen_exit_NAME() decodes the return value beside them. The counts `dd` passed (12,345 bytes
written three times, 4,321 read five times) come back at exit with what each call returned,
both ways; nothing lost, no store slot missing, and the module unloads leaving nothing."""

from __future__ import annotations

import re

import pytest

import btfgen

from . import kbuild, modules, python_guest
from .conftest import kernel_with_python, unavailable

pytestmark = pytest.mark.live

GUESTS = ["unstable-amd64", "unstable-arm64"]
WRITE, WRITES = 12345, 3
READ, READS = 4321, 5
NAME = "btfgen_fprobe_args"


def _module(name: str, btf_path, arch: str):
    files = btfgen.open(str(btf_path), arch=arch, ctx="ftrace_regs").generate(
        ["vfs_read", "vfs_write"], ("kernel",))
    try:
        return kbuild.build_module(name, modules.sources("fprobe_args",
                                                         files["btfgen.kernel.h"].encode()),
                                   NAME, extra_cflags=("-Werror",))
    except kbuild.debian.PackageError as e:
        unavailable(f"{name}: the module's toolchain cannot be had: {e}")


@pytest.mark.parametrize("name", GUESTS)
def test_arguments_kept_at_entry_come_back_at_exit(name, tmp_path):
    k, btf_path = kernel_with_python(name)
    ko = _module(name, btf_path, k.target.arch)
    g, _ = python_guest.trace_guest(k.target, tmp_path)
    g.file(f"{NAME}.ko", ko.read_bytes())
    for store in (0, 1):
        g.step(f"store{store}",
               f"[ -e /dev/zero ] || mknod /dev/zero c 1 5; insmod /{NAME}.ko store={store} && "
               f"cat /proc/{NAME} >/dev/null && "
               f"dd if=/dev/zero of=/tmp/x bs={WRITE} count={WRITES} 2>/dev/null; "
               f"dd if=/tmp/x of=/dev/null bs={READ} count={READS} 2>/dev/null; "
               f"cat /proc/{NAME} >/tmp/lines; rmmod {NAME}; rc=$?; "
               f"grep -E ' count=({WRITE}|{READ}) ' /tmp/lines; "
               f"grep -c {NAME} /proc/modules; ls /proc | grep -c {NAME}; "
               "dmesg | grep -c -E 'Oops|BUG|WARNING|Call Trace'; "
               f"dmesg | grep '{NAME}: calls' | tail -1; exit $rc")
    boot = g.run(k, timeout=1500)
    for store in (0, 1):
        out, rc = boot.section(f"store{store}")
        assert rc == 0, out
        lines = [line.strip() for line in out.splitlines()]
        # dd's own calls: the tgid that made the three writes of WRITE bytes
        writes = [m for m in (re.fullmatch(rf"vfs_write tgid=(\d+) count={WRITE} -> (-?\d+)", x)
                              for x in lines) if m]
        reads = [m for m in (re.fullmatch(rf"vfs_read tgid=(\d+) count={READ} -> (-?\d+)", x)
                             for x in lines) if m]
        assert [int(m.group(2)) for m in writes] == [WRITE] * WRITES, out
        assert len({m.group(1) for m in writes}) == 1, out
        assert [int(m.group(2)) for m in reads] == [READ] * READS, out
        # no module, no proc file, nothing the kernel complained of
        tail = [x for x in lines if not x.startswith("vfs_")]
        assert tail[:3] == ["0", "0", "0"], out
        counts = dict(re.findall(r"(\w+) (\d+)", tail[3].split(f"{NAME}: ", 1)[1]))
        assert counts["lost"] == counts["store_full"] == counts["store_missing"] == "0", out
        assert int(counts["calls"]) >= WRITES + READS, out
