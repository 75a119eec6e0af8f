"""Recordings for the dataset tests: synth.py's events of a golden module, under a header that
names a host, a kernel and the recorder's clock offset, as `btfgen trace --record` writes it."""

from __future__ import annotations

from pathlib import Path

import synth

CLOCK_OFFSET = 1_700_000_000 * 10**9  # wall clock minus CLOCK_MONOTONIC: November 2023


def header(mod, host: str | None, kernel: str) -> dict:
    head = {"format": "btfgen trace recording", "arch": mod.ARCH, "who": False,
            "byte_order": mod.BYTE_ORDER, "pointer_size": mod.POINTER_SIZE,
            "kernel_release": kernel, "kind": "user", "clock_offset_ns": CLOCK_OFFSET}
    if host is not None:
        head["host"] = host
    return head


def write(path: Path, arch: str, n: int, seed: int, host: str | None = "host-a",
          kernel: str = "6.1.0-test", failed: float = 0.0, batch: int | None = None) -> list:
    """A recording of n events; returns them."""
    mod = synth.module(arch)
    descs = synth.descriptors(mod)
    evs = synth.events(descs, n, seed, mod.BYTE_ORDER, failed)
    synth.write(path, mod, evs, batch=batch, head=header(mod, host, kernel))
    return evs
