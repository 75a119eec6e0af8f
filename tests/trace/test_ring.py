"""The run side's ring buffer: sized for the functions traced."""

from __future__ import annotations

from btfgen.trace import run


def test_ring_size_grows_with_the_functions_and_stays_a_power_of_two():
    sizes = [run.ring_size(n) for n in (0, 1, 64, 65, 128, 129, 256, 4096)]
    assert sizes == [16 * run.MIB] * 3 + [32 * run.MIB] * 2 + [64 * run.MIB] * 3
    assert all(s & (s - 1) == 0 and s % 4096 == 0 for s in sizes)


def test_a_32_bit_kernel_keeps_to_16_mib():
    # i386's vmalloc space refused a 64 MiB ring at load (ENOMEM) with a thousand functions.
    assert {run.ring_size(n, pointer_size=4) for n in (0, 129, 50_000)} == {16 * run.MIB}


def test_single_kprobes_get_the_files_they_need():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        run._enough_files(2 * 1000 + 64)  # a kprobe and a kretprobe a function: 2,064 files
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert now == min(2064, hard) if hard != resource.RLIM_INFINITY else now == 2064
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
