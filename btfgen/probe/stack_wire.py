"""--stack: the part an entry's record carries after its data where its flags have EVENT_STACK,
as trace.bpf.c's trace_stack writes it (struct trace_stack there: keep the two alike; a test
compiles the C struct's size against HEAD):

    u16 kernel_frames | u16 user_frames | u16 slice | u16 flags | u64 ip, sp, fp, lr
    kernel_frames x u64 | user_frames x u64 | slice bytes of the user stack from sp up

The kernel's frames (bpf_get_stack), the user frames as the kernel walks their frame pointers
(usually cut after a frame or two: most of Debian's code keeps none), then what an offline
unwind needs: the user registers at the call and the stack above them (unwind.py). A kernel
function's user side is its task's, from where it entered the kernel (the flags say so), or
none (a kernel thread)."""

from __future__ import annotations

import struct
from typing import NamedTuple

EVENT_STACK = 16  # trace_event.flags: this entry's record carries its stack part
HEAD = struct.Struct("HHHHQQQQ")  # without a byte-order prefix: STRUCTS has both
STRUCTS = {"little": struct.Struct("<" + HEAD.format), "big": struct.Struct(">" + HEAD.format)}
FRAMES = 32  # the most frames of each kind (TRACE_STACK_FRAMES)
SLICE = 4096  # the most bytes of the user stack copied (TRACE_STACK_SLICE)
# struct trace_stack's flags
NO_USER = 1  # a kernel function's call in a task with no user side (a kernel thread)
AT_KERNEL_ENTRY = 2  # the user registers are the task's where it entered the kernel


class StackSample(NamedTuple):
    """One call's stack part, read."""

    kernel: tuple  # kernel return addresses, innermost first
    user_fp: tuple  # user addresses by frame pointers, innermost first (the call's own first)
    ip: int
    sp: int
    fp: int
    lr: int
    slice: bytes  # the user stack from sp up
    order: str  # the target's byte order (the slice's words)
    flags: int = 0  # NO_USER, AT_KERNEL_ENTRY


class BadStack(ValueError):
    """A stack part that cannot be what trace.bpf.c wrote."""


def read(raw, at: int, order: str) -> StackSample:
    """The stack part of the record `raw` starting at `at` (the event's size without it:
    spec_format.event_size)."""
    view = memoryview(raw)
    head = STRUCTS[order]
    if at + head.size > len(view):
        raise BadStack(f"a stack part at {at} of a {len(view)}-byte record")
    nk, nu, size, flags, ip, sp, fp, lr = head.unpack_from(view, at)
    if nk > FRAMES or nu > FRAMES or size > SLICE:
        raise BadStack(f"a stack part of {nk} kernel, {nu} user frames, {size} stack bytes")
    words = at + head.size
    end = words + 8 * (nk + nu) + size
    if end > len(view):
        raise BadStack(f"a stack part of {end - at} bytes in {len(view) - at}")
    ips = struct.unpack_from(("<" if order == "little" else ">") + f"{nk + nu}Q", view, words)
    slice_at = words + 8 * (nk + nu)
    return StackSample(ips[:nk], ips[nk:], ip, sp, fp, lr, bytes(view[slice_at:end]), order,
                       flags)


def mean_part(stack) -> float:
    """What --stack (the manifest's list: "kernel", "user") adds to an event on average, for
    the ring's size (ring.ring_size): an entry's part at its most (its user stack is nearly
    always the whole slice), over an entry and an exit."""
    if not stack:
        return 0.0
    most = HEAD.size + 8 * FRAMES * len(stack) + (SLICE if "user" in stack else 0)
    return most / 2
