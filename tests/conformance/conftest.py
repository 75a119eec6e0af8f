"""Shared set-up of the conformance suite: which arches, one parallel build, a summary table."""

from __future__ import annotations

import os

import pytest
import toolchains

from .capture import prepare

ARCHES = tuple(a for a in os.environ.get("BTFGEN_CONFORMANCE_ARCHES", ",".join(
    toolchains.ARCHES)).split(",") if a)

# "arch ctx" -> (functions, values compared, agreed, unavailable, disagreements), by the tests.
SUMMARY: dict[str, tuple[int, int, int, int, int]] = {}


def available(arch: str) -> bool:
    return toolchains.TOOLCHAINS[arch].available() and toolchains.have("pahole")


@pytest.fixture(scope="session")
def built() -> None:
    """Compile and run every arch's batches up front, two at a time (the suite's cold-cache
    cost); the tests then only compare."""
    prepare(tuple(a for a in ARCHES if available(a)))


def pytest_terminal_summary(terminalreporter) -> None:
    if not SUMMARY:
        return
    tr = terminalreporter
    tr.section("btfgen conformance: placement vs compilers")
    tr.write_line(f"{'arch, ctx':<24} {'functions':>9} {'values':>7} {'agreed':>7} "
                  f"{'unavail.':>8} {'disagree':>8}")
    for arch, (f, v, a, u, d) in sorted(SUMMARY.items()):
        tr.write_line(f"{arch:<24} {f:>9} {v:>7} {a:>7} {u:>8} {d:>8}")
