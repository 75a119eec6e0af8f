"""--count / --latency --by kstack|ustack summed from events made up here (stack_summary.py): the
same stack in two calls one key, two stacks two keys, a call without a stack or with a part
that cannot be read its own key saying why, never merged with another; durations in the
log2 slot the kernel's summaries use; a filter on $retval counting at exit; exits without
their entry and the losses said; text and JSON. The kernel stack here is the host-side part of
--by kstack, which this machine cannot probe live."""

from __future__ import annotations

import io
import json
import struct
from types import SimpleNamespace

from btfgen.probe import event, stack_summary, symbolize
from btfgen.probe.manifest import StackKeys

KALLSYMS = """\
ffffffff81200000 T do_syscall_64
ffffffff81200400 t ksys_lseek
ffffffff81300000 T ksys_read
ffffffff81400000 T vfs_llseek
"""
LSEEK, READ, LLSEEK = 0xffffffff81200410, 0xffffffff81300020, 0xffffffff81400000
SYSCALL = 0xffffffff81200080
DATA = 8  # the made-up function's record data at entry and exit
BTF_ID = 77


def _fn():
    desc = SimpleNamespace(record=SimpleNamespace(sizes=(DATA, DATA)))
    return SimpleNamespace(name="vfs_llseek", btf_id=BTF_ID, desc=desc)


def _event(kind: int, ns: int, tid: int = 5, flags: int = 0, kernel=None) -> bytes:
    head = struct.pack("<" + event.HEAD_FORMAT, 9, tid, b"t", ns, 0, flags, BTF_ID, kind, 0)
    raw = head + bytes(DATA)
    if kernel is not None:
        raw += struct.pack("<HHHHQQQQ", len(kernel), 0, 0, 0, 0, 0, 0, 0)
        raw += struct.pack(f"<{len(kernel)}Q", *kernel)
    return raw


def _summary(tmp_path, count=True, latency=False, at_exit=False, interval=None, by="kstack"):
    (tmp_path / "kallsyms").write_text(KALLSYMS)
    manifest = SimpleNamespace(stack_keys=StackKeys(count=count, latency=latency, by=by),
                               btf_ids=[BTF_ID], retval_filtered=[0] if at_exit else None)
    out = io.StringIO()
    s = stack_summary.StackSummary(manifest, {BTF_ID: _fn()},
                                   symbolize.Stacks("x86_64", "little", str(tmp_path / "kallsyms")),
                                   "little", out, interval=interval)
    return s, out


STACK = stack_summary.stack_wire.EVENT_STACK
LSEEK_STACK = (LLSEEK, LSEEK, SYSCALL)
READ_STACK = (LLSEEK, READ, SYSCALL)


def test_counted_per_stack_each_own_key(tmp_path):
    s, out = _summary(tmp_path)
    s.records([_event(0, 1, flags=STACK, kernel=LSEEK_STACK) for _ in range(3)]
              + [_event(0, 2, flags=STACK, kernel=READ_STACK)]
              + [_event(0, 3)]  # no stack part: no room after its captures
              + [_event(0, 4, flags=STACK, kernel=())]  # the kernel gave no frames
              + [_event(0, 5, flags=STACK)])  # a part cut short: unreadable
    s.print()
    assert out.getvalue().splitlines() == [
        "FUNC        COUNT  (kstack under each)",
        "vfs_llseek  1",
        "    <no stack: its stack part could not be read (a stack part at 64 of a 64-byte "
        "record)>",
        "vfs_llseek  1",
        "    <no stack: the kernel gave no kernel frames>",
        "vfs_llseek  1",
        f"    <no stack: {stack_summary.NO_ROOM}>",
        "vfs_llseek  1",
        "    vfs_llseek+0x0 (kernel)",
        "    ksys_read+0x20 (kernel)",
        "    do_syscall_64+0x80 (kernel)",
        "vfs_llseek  3",
        "    vfs_llseek+0x0 (kernel)",
        "    ksys_lseek+0x10 (kernel)",
        "    do_syscall_64+0x80 (kernel)",
    ]


def test_latency_slots_and_exits_without_entry(tmp_path):
    s, out = _summary(tmp_path, count=False, latency=True)
    s.as_json = True
    s.records([_event(0, 1000, flags=STACK, kernel=LSEEK_STACK), _event(1, 1000 + 4096),
               _event(0, 0, tid=6, flags=STACK, kernel=LSEEK_STACK), _event(1, 1, tid=6),
               _event(1, 50, tid=7)])  # no entry on thread 7
    s.print()
    doc = json.loads(out.getvalue())
    [timed] = doc["latencies"]
    assert timed["key"] == {"kstack": [
        {"symbol": "vfs_llseek", "offset": 0, "object": "kernel"},
        {"symbol": "ksys_lseek", "offset": 0x10, "object": "kernel"},
        {"symbol": "do_syscall_64", "offset": 0x80, "object": "kernel"}]}
    assert timed["count"] == 2 and timed["total_ns"] == 4097
    assert timed["buckets"] == [{"low": 0, "high": 1, "count": 1},
                                {"low": 4096, "high": 8191, "count": 1}]
    assert doc["no_entry"] == 1 and doc["lost_records"] == 0


def test_a_retval_filter_counts_at_exit_and_a_loss_unpairs(tmp_path):
    s, out = _summary(tmp_path, at_exit=True)
    s.records([_event(0, 1, flags=STACK, kernel=LSEEK_STACK),  # its exit filtered out
               _event(0, 2, flags=STACK, kernel=LSEEK_STACK), _event(1, 3),
               _event(0, 4, flags=STACK, kernel=READ_STACK),
               # records of this thread were lost before this exit: its entry is forgotten
               _event(1, 5, flags=event.spec_format.EVENT_THREAD_LOST)])
    s.print()
    lines = out.getvalue().splitlines()
    assert lines[1:3] == ["vfs_llseek  1", "    vfs_llseek+0x0 (kernel)"]
    assert lines[3] == "    ksys_lseek+0x10 (kernel)" and len(lines) == 6
    assert lines[-1] == "1 exits without their entry: not counted (at exit)"


def test_each_print_the_calls_since_the_last(tmp_path):
    s, out = _summary(tmp_path, interval=60)
    s.attached(None, lambda: 4, lambda: 2)
    s.records([_event(0, 1, flags=STACK, kernel=LSEEK_STACK)])
    s.print()
    s.print()
    first, second = out.getvalue().split("FUNC", 2)[1:]
    assert "vfs_llseek  1" in first and "vfs_llseek" not in second.split("\n", 1)[1]
    assert "4 calls missed by the kernel" in first and "missed" not in second
    assert "2 records lost before they were read" in first and "lost" not in second


def _user_event(tgid: int, flags: int, user=(), ns: int = 1) -> bytes:
    """A kernel function's entry with its task's user side: the frames the kernel walked by
    frame pointers (no stack copied), or none at all (stack_wire.NO_USER: a kernel thread)."""
    head = struct.pack("<" + event.HEAD_FORMAT, tgid, tgid, b"t", ns, 0, STACK, BTF_ID, 0, 0)
    part = struct.pack("<HHHHQQQQ", 0, len(user), 0, flags, user[0] if user else 0, 0, 0, 0)
    return head + bytes(DATA) + part + struct.pack(f"<{len(user)}Q", *user)


def test_a_kernel_functions_calls_keyed_by_their_tasks_user_stack(tmp_path):
    """--kernel --by ustack: each call keyed by its task's user frames, named from this
    process's own libc (its lseek at the leaf, as a system call's user side has it); a kernel
    thread's calls under their own key saying so, never merged with a user stack."""
    import ctypes
    import os

    libc = ctypes.CDLL(None)
    lseek = ctypes.cast(libc.lseek, ctypes.c_void_p).value
    getpid = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    s, out = _summary(tmp_path, by="ustack")
    me = os.getpid()
    at_entry = stack_summary.stack_wire.AT_KERNEL_ENTRY
    kthread = stack_summary.stack_wire.NO_USER
    s.records([_user_event(me, at_entry, (lseek, getpid + 4)) for _ in range(3)]
              + [_user_event(me, at_entry, (getpid, getpid + 4))]
              + [_user_event(2, kthread) for _ in range(2)])
    s.as_json = True
    s.print()
    rows = json.loads(out.getvalue())["counts"]
    assert [r["count"] for r in rows] == [1, 2, 3]
    assert rows[1]["key"] == {"ustack": None, "no_stack": symbolize.NO_USER_SIDE}
    leaf, caller = rows[2]["key"]["ustack"]
    assert "lseek" in leaf["symbol"] and leaf["offset"] == 0, leaf
    assert "libc" in os.path.basename(leaf["object"]), leaf
    assert "pid" in caller["symbol"] and caller["offset"] == 4, caller
    # the kernel's frame-pointer walk (no stack copied): the key says it is likely cut
    assert rows[2]["key"]["ustack_cut"].startswith("no user stack could be copied")
    assert "pid" in rows[0]["key"]["ustack"][0]["symbol"]
