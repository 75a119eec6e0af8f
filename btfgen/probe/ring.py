"""The ring buffer a run's events come through: its default size (from the bytes the traced
functions' events take), and which reader reads it (in place, else through libbpf)."""

from __future__ import annotations


from . import prog, ringspan, spec_format
from .ringbuf import RingBuffer

MIB = 1 << 20


# The default ring holds this many events of the traced functions' mean size, and this many
# more a function past 64: a program calling a traced function in a loop makes one every few
# microseconds (uprobes top out near 200,000 a second here), and more functions traced make
# more events. 131,072 events of 100 bytes (six arguments, entry and exit) are 16 MiB: a
# second or more of such a loop while the reader catches up, where the 16 MiB of 1,088-byte
# events every function had before held 15,000.
RING_EVENTS = 1 << 17
RING_EVENTS_A_FUNCTION = 2048
RING_HEADER = ringspan.HEADER  # the kernel's header before each record in the ring
RING_MOST = 256 * MIB  # the default ring's largest (ring_size)


def mean_event(specs: bytes, count: int, keep: list[int], byte_order: str) -> float:
    """The ring bytes of an event of the functions `keep` (indexes into `specs`, the trace
    directory's `count` struct btfgen_spec), entry and exit alike, on average: each with its
    ring header (spec_format.spec_event_sizes: what the BPF side sends, a multiple of 8)."""
    if not keep:
        return 0.0
    step = len(specs) // count
    total = 0
    for at in keep:
        entry, exit_ = spec_format.spec_event_sizes(specs[at * step:(at + 1) * step], byte_order)
        total += entry + exit_ + 2 * RING_HEADER
    return total / (2 * len(keep))


def ring_size(event_bytes: float, functions: int, pointer_size: int = 8,
              memory: int = 0) -> int:
    """The ring buffer's default size in bytes, from the bytes its events take (`event_bytes`:
    mean_event): room for RING_EVENTS of them and RING_EVENTS_A_FUNCTION more a function past
    64, as a power of two from 1 MiB up to 64 MiB (16 MiB on a 32-bit kernel, whose few hundred
    MiB of vmalloc space refused 64 at load on i386), or up to a sixteenth of the machine's
    `memory` (bytes) where that is more, at most 256 MiB: with the whole kernel traced, one
    large process's exit (its pages torn down) is hundreds of thousands of events at once,
    more than the reader writes in that time (the amd64 guest: docs/benchmarks.md, where the
    tracer's own fork once made such a burst). --ring-size says otherwise."""
    want = event_bytes * (RING_EVENTS + RING_EVENTS_A_FUNCTION * max(0, functions - 64))
    size = MIB
    top = 64 * MIB if pointer_size == 8 else 16 * MIB
    if pointer_size == 8:
        while top < RING_MOST and top * 2 * 16 <= memory:
            top *= 2
    while size < want and size < top:
        size *= 2
    return size


def memory_total() -> int:
    """This machine's memory in bytes (/proc/meminfo's MemTotal), 0 where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def reader(map_fd: int, sink, committed_fd: int | None = None):
    """The ring's reader: its pages read in place (ringspan), or, where this machine has no
    fence to keep the ring's protocol with, libbpf's consumer (a record at a time, handed on
    as spans). `committed_fd`: the BPF side's count of committed records (trace.bpf.c's
    `committed`), where it keeps one."""
    why = ringspan.available()
    if not why:
        return ringspan.RingReader(map_fd, sink, committed_fd=committed_fd)
    prog.say(f"reading the ring buffer through libbpf: {why}")
    return RingBuffer(map_fd, sink, spans=True)
