"""Run a batch executable under qemu-user's gdbstub (arches unicorn lacks: loongarch64; ppc64le,
which unicorn has only big-endian). Breakpoints at every target's entry and at the return address
read there; the harness talks the remote protocol itself (`rsp.py`)."""

from __future__ import annotations

import socket
import subprocess

from .elfinfo import Executable
from .machines import Machine
from .rsp import Remote, RspError
from .snapshot import Memory, Snapshot, Stop

STACK_MAX = 8192  # bytes above SP kept; qemu's stack top (argv, env, auxv) is not known here

# The gdbstub's register numbers (qemu's gdb-xml core files): rN, then these.
_SPECIAL = {
    "loongarch64": {"pc": 33},
    "ppc64le": {"pc": 64, "lr": 67},
}


class EmulationError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _numbers(m: Machine) -> dict[str, int]:
    """Our register names -> the gdbstub's register numbers."""
    by_number = {v: int(k[1:]) for k, v in m.aliases.items() if k[:1] == "r" and k[1:].isdigit()}
    special = _SPECIAL[m.arch]
    out = {}
    for r in m.regs:
        if r in special:
            out[r] = special[r]
        elif r[:1] == "r" and r[1:].isdigit():
            out[r] = int(r[1:])
        else:
            out[r] = by_number[r]
    return out


def _read_stack(remote: Remote, low: int) -> bytes:
    out = b""
    while len(out) < STACK_MAX:
        try:
            out += remote.read(low + len(out), 1024)
        except RspError:  # past the top of the stack mapping
            break
    return out


def _start(m: Machine, exe: Executable) -> tuple[subprocess.Popen, Remote]:
    """qemu waiting for its debugger, and the connection to it. The port is picked free, but
    another process may take it before qemu binds it: then try another."""
    for attempt in range(3):
        port = _free_port()
        qemu = subprocess.Popen([m.qemu, "-g", str(port), str(exe.path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return qemu, Remote(port)
        except RspError:
            qemu.kill()
            qemu.wait()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def run(m: Machine, exe: Executable, targets: dict[int, str], done: int) -> list[Stop]:
    numbers = _numbers(m)
    pc_number = _SPECIAL[m.arch]["pc"]
    writable = [(s.vaddr, len(s.data)) for s in exe.segments if s.writable]
    qemu, remote = _start(m, exe)
    try:

        def reg(number: int) -> int:
            return int.from_bytes(remote.register(number), m.byte_order)

        def snapshot(entry_sp: int | None) -> Snapshot:
            values = {r: reg(n) for r, n in numbers.items()}
            sp = values[m.sp]
            low = sp if entry_sp is None else min(sp, entry_sp)
            regions = [(low, _read_stack(remote, low))]
            regions += [(a, remote.read(a, n)) for a, n in writable]
            return Snapshot(values, sp, Memory(tuple(regions)))

        for addr in (*targets, done):
            remote.breakpoint(addr)
        pending: dict[int, tuple[str, Snapshot]] = {}
        stops: list[Stop] = []
        while True:
            reply = remote.cont()
            if not reply.startswith("T05") and not reply.startswith("S05"):
                raise EmulationError(f"{m.arch}: {exe.path}: stopped with {reply!r}")
            pc = reg(pc_number)
            if pc == done:
                break
            # The stub does not step over a breakpoint on continue (gdb does that); every
            # target and return address is reached once, so a hit breakpoint simply goes.
            if pc in targets or pc in pending:
                remote.breakpoint(pc, insert=False)
            if pc in targets:
                snap = snapshot(None)
                ret = snap.regs[m.ret_addr]
                pending[ret] = (targets[pc], snap)
                remote.breakpoint(ret)
            elif pc in pending:
                name, entry = pending.pop(pc)
                stops.append(Stop(name, entry, snapshot(entry.sp)))
            else:
                raise EmulationError(f"{m.arch}: {exe.path}: unexpected stop at {pc:#x}")
        remote.kill()
        return stops
    except RspError as err:
        raise EmulationError(f"{m.arch}: {exe.path}: {err}") from err
    finally:
        remote.close()
        try:
            qemu.wait(timeout=10)
        except subprocess.TimeoutExpired:
            qemu.kill()
            qemu.wait()
