"""What runs in the guest: busybox, an /init that runs named steps between console markers, files.

A step is a shell command line; its output and exit status come back through `Boot.section`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import cache, qemu
from . import kernel as kernels
from .initramfs import Initramfs

_PROLOGUE = f"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
uptime_s() {{ read up _ </proc/uptime; echo "$up"; }}
step() {{ name=$1; shift; t0=$(uptime_s); echo "{qemu.BEGIN} $name"; "$@"; rc=$?
	echo "{qemu.END} $name rc=$rc"; echo "{qemu.TIME} $name $t0 $(uptime_s)"; }}
"""

# `poweroff -f` powers off at once, with what the serial driver still holds of the console's
# output unsent. Once (riscv64, two guests at a time under TCG) a guest's output ended with the
# last step's trace lines and then the kernel's own "Power down" line (written synchronously),
# with neither that step's end marker nor DONE: the likely cause, not proven. Half a second
# lets the driver drain its few kilobytes.
_EPILOGUE = f"""echo "{qemu.TIME} done $(uptime_s) $(uptime_s)"
echo "{qemu.DONE}"
sleep 0.5
poweroff -f
"""


@dataclass
class Guest:
    steps: list[tuple[str, str]] = field(default_factory=list)  # (name, shell command)
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # path -> data, mode
    links: dict[str, str] = field(default_factory=dict)  # path -> symbolic link target

    def step(self, name: str, command: str) -> None:
        self.steps.append((name, command))

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.files[path] = (data, mode)

    def init_script(self) -> str:
        body = "".join(f"step {name} sh -c {_quote(cmd)}\n" for name, cmd in self.steps)
        return _PROLOGUE + body + _EPILOGUE

    def initrd(self, busybox: Path) -> bytes:
        fs = Initramfs()
        fs.chardev("dev/console", 5, 1)
        fs.chardev("dev/null", 1, 3)
        fs.file("bin/busybox", busybox.read_bytes(), 0o755)
        fs.file("init", self.init_script().encode(), 0o755)
        for path, (data, mode) in self.files.items():
            fs.file(path, data, mode)
        for path, target in self.links.items():
            fs.symlink(path, target)
        return fs.gz()

    def run(
        self, kernel: kernels.Kernel, append: str = "", timeout: float | None = None
    ) -> qemu.Boot:
        rd = self.initrd(kernels.busybox(kernel.target))
        result = qemu.boot(kernel.target, kernel.image, rd, append, timeout)
        _keep_timings(result)
        result.check_done()
        return result


def _keep_timings(boot: qemu.Boot) -> None:
    """Where the guest's time went, step by step, kept beside the results (by test) for
    whoever makes the suite faster: the boot before the first step, each step, the whole."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    steps = boot.timings()
    if not test or not steps:
        return
    first = min(start for start, _ in steps.values())
    lines = [f"{boot.target.name}: {boot.seconds:.1f} s in QEMU, {first:.1f} s to the first step"]
    lines += [f"  {name:12} {end - start:7.1f} s" for name, (start, end) in steps.items()]
    name = re.sub(r"[^\w.-]+", "_", test)
    cache.write_atomic(cache.ROOT / "timings" / f"{name}.txt", ("\n".join(lines) + "\n").encode())


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"
