"""The run side's ring buffer: sized for the bytes of the functions' events."""

from __future__ import annotations

from btfgen.probe import attach, run


def test_ring_size_follows_the_bytes_of_the_events_and_stays_a_power_of_two():
    # Six arguments (an entry of 104 bytes, an exit of 80, each with the ring's 8-byte
    # header): 131,072 of them fit 16 MiB; the smallest events (no data) half of that; events
    # of a whole record, as every event was before, the most a ring gets.
    assert run.ring_size((112 + 88) / 2, 1) == 16 * run.MIB
    assert run.ring_size(64, 1) == 8 * run.MIB
    assert run.ring_size(1088, 1) == 64 * run.MIB
    # More functions, more events: 2,048 more a function past 64.
    sizes = [run.ring_size(100, n) for n in (0, 64, 65, 100, 200, 50_000)]
    assert sizes == [16 * run.MIB] * 3 + [32 * run.MIB, 64 * run.MIB, 64 * run.MIB]
    assert all(s & (s - 1) == 0 and s % 4096 == 0 for s in sizes)
    assert run.ring_size(0, 0) == run.MIB


def test_many_functions_take_up_to_a_sixteenth_of_memory_at_most_256_mib():
    # The whole kernel (43,000 functions): 64 MiB where memory is 1 GiB or less (as before),
    # 128 MiB with 2 GiB, 256 MiB from 4 GiB on; few functions keep their size.
    gib = 1 << 30
    assert [run.ring_size(100, 43_000, memory=m) for m in (0, gib // 2, gib, 2 * gib,
                                                            4 * gib, 64 * gib)] == \
        [64 * run.MIB] * 3 + [128 * run.MIB, 256 * run.MIB, 256 * run.MIB]
    assert run.ring_size((112 + 88) / 2, 1, memory=64 * gib) == 16 * run.MIB
    assert run.ring_size(100, 43_000, pointer_size=4, memory=64 * gib) == 16 * run.MIB
    assert run.memory_total() > 0  # this machine's /proc/meminfo


def test_a_32_bit_kernel_keeps_to_16_mib():
    # i386's vmalloc space refused a 64 MiB ring at load (ENOMEM) with a thousand functions.
    assert {run.ring_size(b, n, pointer_size=4) for b, n in ((100, 0), (1088, 1), (100, 50_000))
            } == {16 * run.MIB}


def test_the_mean_event_is_what_the_descriptors_say_is_sent():
    """From the trace directory's specs (as run.py reads them), the same sizes as
    spec_format.event_size from each function's descriptor, with the ring's header."""
    import synth

    from btfgen.probe import spec_format

    for arch in ("x86_64", "i386", "s390x"):
        mod = synth.module(arch)
        names = mod.names()
        specs = b"".join(mod.spec(n) for n in names)
        descs = [mod._descriptor(n)[0] for n in names]
        for keep in ([0], list(range(len(names))), [len(names) - 1, 1]):
            want = sum(spec_format.event_size(descs[i], k) + 8 for i in keep for k in (0, 1))
            got = run.mean_event(specs, len(names), keep, mod.BYTE_ORDER)
            assert got == want / (2 * len(keep)), (arch, keep)


def test_single_kprobes_get_the_files_they_need():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        attach.enough_files(2 * 1000 + 64)  # a kprobe and a kretprobe a function: 2,064 files
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 2064
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


_SINGLY = """
import resource, sys
from btfgen.probe import attach, errors
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 8192))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))
    may_raise = True
except (OSError, ValueError):
    may_raise = False
try:
    attach.enough_files(int(sys.argv[1]))
    print(may_raise, resource.getrlimit(resource.RLIMIT_NOFILE))
except errors.RunError as e:
    print(may_raise, e)
"""


def test_a_whole_kernel_attached_singly_raises_the_hard_limit_or_says_why_not():
    # Debian 12's 6.1 (no kprobe_multi) with ~45,000 functions: 90,000 perf event files against
    # the guest's hard limit of 4,096, and one EMFILE a probe after the first 4,000. In a child:
    # lowering this process's hard limit could not be undone without CAP_SYS_RESOURCE.
    import subprocess
    import sys

    wanted = 2 * 45_000 + 64
    with open("/proc/sys/fs/nr_open") as f:
        nr_open = int(f.read())
    out = subprocess.run([sys.executable, "-c", _SINGLY, str(wanted)], capture_output=True,
                         text=True, check=True).stdout
    if out.startswith("True") and nr_open >= wanted:
        assert out.strip() == f"True ({wanted}, {wanted})"
    else:
        assert f"needs {wanted} open files, and this process may open 4096 (ulimit -n" in out
