"""Boot a kernel with the loader, a bundle and a list of system calls; parse what it reported."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import build, printed
from . import kernel as kernels
from .guest import Guest
from .qemu import Boot


@dataclass(frozen=True)
class Report:
    boot: Boot
    attached: dict[str, str]  # program name -> "ok" or errno name
    calls: dict[str, str]  # action -> what the call returned
    maps: dict[str, dict[bytes, bytes]]  # map name -> key -> value
    pagesize: int
    text: str  # the loader's whole output, for messages


def run(kernel: kernels.Kernel, bundle: bytes, actions: list[list[str]],
        before: list[tuple[str, str]] = (), after: list[tuple[str, str]] = ()) -> Report:
    g = Guest()
    for name, cmd in before:
        g.step(name, cmd)
    g.file("loader", build.loader(kernel.target).read_bytes(), 0o755)
    g.file("bundle", bundle)
    args = " ".join(" ".join(a) for a in actions)
    g.step("probe", f"/loader /bundle {args} 2>&1")
    for name, cmd in after:
        g.step(name, cmd)
    boot = g.run(kernel)
    text, rc = boot.section("probe")
    if rc:
        raise boot.fail(f"loader failed (exit {rc}):\n{text[-3000:]}")
    lines = text.splitlines()
    pagesize, calls = printed.loader_said(lines)
    attached, maps = {}, {}
    for line in lines:
        if m := re.match(r"attach (\S+) (\S+)$", line):
            attached[m.group(1)] = m.group(2)
        elif m := re.match(r"map (\S+) ([0-9a-f]*) ([0-9a-f]*) (\d+)$", line):
            # the loader leaves out a value's trailing zero bytes and says its size
            value = bytes.fromhex(m.group(3)).ljust(int(m.group(4)), b"\0")
            maps.setdefault(m.group(1), {})[bytes.fromhex(m.group(2))] = value
    return Report(boot, attached, calls, maps, pagesize, text)
