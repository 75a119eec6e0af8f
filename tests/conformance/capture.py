"""Ground truth per arch: compile the corpus, run it in an emulator, keep what each target saw.

`captures(arch)` is the suite's one entry point, shared with the decoder checks: per prototype
the expected bytes of every argument and of the return value, and machine snapshots at the
target's first instruction and back at its return address. Snapshots are cached by a hash of the
executable, objects by a hash of their source (tests/toolchains.py), so a warm run only loads.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import toolchains

from . import elfinfo, emu_qemu, emu_unicorn
from .cmodel import Proto
from .corpus import corpus
from .emit import DONE, batch_source, pattern
from .machines import MACHINES, Machine
from .snapshot import Memory, Snapshot, Stop

BATCH = 256  # prototypes per executable: one emulator run each
HARNESS_VERSION = "1"  # bump when what a snapshot holds changes


@dataclass(frozen=True, slots=True)
class Capture:
    arch: str
    proto: Proto
    func: str  # the BTF FUNC name of the target
    btf_path: Path  # the object whose .BTF describes it
    args: tuple[bytes, ...]  # the exact bytes of each named argument (target byte order)
    ret: bytes | None  # the bytes returned, None for void
    entry: Snapshot  # at the target's first instruction
    exit: Snapshot  # back at the return address read at entry

    @property
    def machine(self) -> Machine:
        return MACHINES[self.arch]

    @property
    def entry_regs(self) -> dict[str, int]:
        return self.entry.regs

    @property
    def exit_regs(self) -> dict[str, int]:
        return self.exit.regs

    @property
    def sp(self) -> int:
        return self.entry.sp

    @property
    def memory(self) -> Memory:
        return self.entry.memory

    @property
    def exit_memory(self) -> Memory:
        """Memory at return: the caller's frame, hence the buffer behind an sret pointer."""
        return self.exit.memory

    def entry_reg(self, name: str) -> int:
        return self.entry.regs[self.machine.canonical(name)]

    def exit_reg(self, name: str) -> int:
        return self.exit.regs[self.machine.canonical(name)]


@dataclass(frozen=True, slots=True)
class Batch:
    arch: str
    protos: tuple[Proto, ...]

    @property
    def source(self) -> str:
        return batch_source(list(self.protos))


def batches(arch: str) -> list[Batch]:
    protos = corpus(arch, MACHINES[arch].ptr)
    return [Batch(arch, tuple(protos[i:i + BATCH])) for i in range(0, len(protos), BATCH)]


def build(batch: Batch) -> tuple[Path, Path]:
    """(object with .BTF, static executable), both cached by source hash."""
    obj = toolchains.compile_c(batch.source, batch.arch)
    return obj, toolchains.link_exe(obj, batch.arch)


def build_all(arches: tuple[str, ...], workers: int = 2) -> None:
    """Compile every batch of `arches` in parallel (the cold-cache cost of the suite)."""
    todo = [b for a in arches for b in batches(a)]
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(build, todo))


def _stops(m: Machine, exe: elfinfo.Executable, names: list[str]) -> list[Stop]:
    digest = hashlib.sha256(exe.path.read_bytes() + HARNESS_VERSION.encode()).hexdigest()[:24]
    path = toolchains.CACHE / f"{digest}.stops.pickle"
    if path.exists():
        return pickle.loads(path.read_bytes())
    targets = {exe.symbols[n]: n for n in names}
    engine = emu_qemu if m.engine == "qemu" else emu_unicorn
    stops = engine.run(m, exe, targets, exe.symbols[DONE])
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(pickle.dumps(stops))
    tmp.rename(path)
    return stops


class CaptureError(RuntimeError):
    pass


def _sizes(exe: elfinfo.Executable, p: Proto, byte_order: str) -> list[int]:
    raw = exe.read(exe.symbols[f"{p.name}_sizes"], 2 * (1 + len(p.params)))
    return [int.from_bytes(raw[i:i + 2], byte_order) for i in range(0, len(raw), 2)]


def capture_batch(batch: Batch) -> list[Capture]:
    m = MACHINES[batch.arch]
    obj, exe_path = build(batch)
    exe = elfinfo.load(exe_path)
    stops = {s.func: s for s in _stops(m, exe, [p.name for p in batch.protos])}
    out = []
    for p in batch.protos:
        stop = stops.get(p.name)
        if stop is None:
            raise CaptureError(f"{batch.arch}: {p.name} was never called in {exe_path}:\n"
                               f"{p.describe()}")
        ret_size, *arg_sizes = _sizes(exe, p, m.byte_order)
        args = tuple(pattern(p, f"p{i}", t)[:n]
                     for i, (t, n) in enumerate(zip(p.params, arg_sizes)))
        ret = pattern(p, "r", p.ret)[:ret_size] if p.ret is not None else None
        out.append(Capture(batch.arch, p, p.name, obj, args, ret, stop.entry, stop.exit))
    return out


@cache
def captures(arch: str) -> list[Capture]:
    return [c for b in batches(arch) for c in capture_batch(b)]


def prepare(arches: tuple[str, ...], workers: int = 2) -> None:
    """Build and capture every arch, `workers` at a time (qemu runs in its own process)."""
    build_all(arches, workers)
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(captures, arches))
