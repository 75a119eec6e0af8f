"""The run side's ring buffer: sized for the functions traced."""

from __future__ import annotations

from btfgen.trace import run


def test_ring_size_grows_with_the_functions_and_stays_a_power_of_two():
    sizes = [run.ring_size(n) for n in (0, 1, 64, 65, 128, 129, 256, 4096)]
    assert sizes == [16 * run.MIB] * 3 + [32 * run.MIB] * 2 + [64 * run.MIB] * 3
    assert all(s & (s - 1) == 0 and s % 4096 == 0 for s in sizes)
