"""Shared set-up of the conformance suite: which arches, one parallel build."""

from __future__ import annotations

import fcntl
import os

import pytest
import toolchains

from .capture import prepare

ARCHES = tuple(a for a in os.environ.get("BTFGEN_CONFORMANCE_ARCHES", ",".join(
    toolchains.ARCHES)).split(",") if a)

def available(arch: str) -> bool:
    return toolchains.TOOLCHAINS[arch].available() and toolchains.have("pahole")


@pytest.fixture(scope="session")
def built() -> None:
    """Compile and run every arch's batches up front, two at a time (the suite's cold-cache
    cost); the tests then only compare. One test worker builds while the others wait, then
    find it all cached."""
    toolchains.CACHE.mkdir(parents=True, exist_ok=True)
    with open(toolchains.CACHE / "conformance.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        prepare(tuple(a for a in ARCHES if available(a)))
