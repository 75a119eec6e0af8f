"""Machine state at one instant: general registers and the memory regions worth keeping."""

from __future__ import annotations

from dataclasses import dataclass


class MemoryError_(LookupError):
    pass


@dataclass(frozen=True, slots=True)
class Memory:
    regions: tuple[tuple[int, bytes], ...]  # (address, bytes), disjoint

    def read(self, addr: int, size: int) -> bytes:
        for base, data in self.regions:
            if base <= addr and addr + size <= base + len(data):
                return data[addr - base:addr - base + size]
        raise MemoryError_(f"{size} bytes at {addr:#x} were not captured")

    def find(self, needle: bytes) -> list[int]:
        """Every address where `needle` occurs (used to say where a value really was)."""
        hits = []
        for base, data in self.regions:
            i = data.find(needle)
            while i >= 0:
                hits.append(base + i)
                i = data.find(needle, i + 1)
        return hits


@dataclass(frozen=True, slots=True)
class Snapshot:
    regs: dict[str, int]  # register name (as the arch names it) -> unsigned value
    sp: int
    memory: Memory

    def to_plain(self) -> dict:
        return {"regs": self.regs, "sp": self.sp,
                "memory": [(a, d.hex()) for a, d in self.memory.regions]}

    @staticmethod
    def from_plain(d: dict) -> Snapshot:
        regions = tuple((a, bytes.fromhex(h)) for a, h in d["memory"])
        return Snapshot(dict(d["regs"]), d["sp"], Memory(regions))


@dataclass(frozen=True, slots=True)
class Stop:
    """One call of one target: state at its first instruction and when control is back at
    the return address read at entry."""

    func: str
    entry: Snapshot
    exit: Snapshot
