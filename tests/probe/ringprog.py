"""A real BPF ring buffer filled at will, without clang: a `tc` program assembled here that,
each time BPF_PROG_TEST_RUN runs it, reserves one record of each of its sizes in a
BPF_MAP_TYPE_RINGBUF map and writes into it a sequence number (from a counter map, so the
reader can tell a lost or repeated record), its size, and the sequence number again at its
end; every `discard`-th record (by sequence number) is discarded rather than submitted.

Record layout: u64 seq at 0, u64 size at 8, u64 seq at (size - 8) & ~7 (from 24 bytes).

With `counted`, it also keeps trace.bpf.c's count of what it committed (an mmapable array's
u64: each record's bytes in the ring, plus 1 << ringspan.COMMITTED_SHIFT where submitted, not
discarded), added after the submit or discard, as trace.bpf.c adds it.
"""

from __future__ import annotations

import ctypes
import struct

from btfgen.probe.libbpf import TestRunOpts, fail, libbpf

SCHED_CLS = 3
ARRAY, RINGBUF = 2, 27
LOOKUP, RESERVE, SUBMIT, DISCARD = 1, 131, 132, 133
NO_WAKEUP, FORCE_WAKEUP = 1, 2  # BPF_RB_*: a submit's flags


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def _map_fd(dst: int, fd: int) -> bytes:  # ld_imm64 of a map by its fd (BPF_PSEUDO_MAP_FD)
    return _insn(0x18, dst, 1, 0, fd) + _insn(0, 0, 0, 0, 0)


def _imm64(dst: int, value: int) -> bytes:  # ld_imm64 of a constant
    return _insn(0x18, dst, 0, 0, _s32(value & 0xFFFFFFFF)) + _insn(0, 0, 0, 0, _s32(value >> 32))


def _s32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


SHIFT = 36  # ringspan.COMMITTED_SHIFT (trace.bpf.c's)


def assemble(counter_fd: int, ring_fd: int, sizes: list[int], discard: int = 0,
             committed_fd: int | None = None, wakeup: int = 0) -> bytes:
    assert all(s >= 16 for s in sizes) and (discard & (discard - 1)) == 0
    counted = committed_fd is not None
    add = [_insn(0xdb, 9, 1, 0, 0x00)]  # *(u64 *)(r9 + 0) += r1, atomically
    body: list[bytes] = []
    for s in sizes:
        step = [
            _insn(0xb7, 7, imm=1),  # r7 = 1
            _insn(0xdb, 8, 7, 0, 0x01),  # r7 = atomic_fetch_add(*(u64 *)r8, r7)
            _map_fd(1, ring_fd), _insn(0xb7, 2, imm=s), _insn(0xb7, 3, imm=0),
            _insn(0x85, imm=RESERVE),
        ]
        fill = [
            _insn(0x7b, 0, 7, 0),  # *(u64 *)(r0 + 0) = r7
            _insn(0xb7, 1, imm=s), _insn(0x7b, 0, 1, 8),  # *(u64 *)(r0 + 8) = s
            *([_insn(0x7b, 0, 7, (s - 8) & ~7)] if s >= 24 else []),  # seq again, at the end
            _insn(0xbf, 1, 0), _insn(0xb7, 2, imm=wakeup),  # r1 = r0, r2 = the flags
        ]
        ring_bytes = (s + 8 + 7) & ~7
        if discard and counted:
            tail = [_insn(0xbf, 3, 7), _insn(0x57, 3, imm=discard - 1),
                    _insn(0x55, 3, off=4, imm=discard - 1),  # if r3 != discard-1: submit
                    _insn(0x85, imm=DISCARD), _imm64(1, ring_bytes), _insn(0x05, off=3),
                    _insn(0x85, imm=SUBMIT), _imm64(1, ring_bytes + (1 << SHIFT)), *add]
        elif discard:
            tail = [_insn(0xbf, 3, 7), _insn(0x57, 3, imm=discard - 1),
                    _insn(0x55, 3, off=2, imm=discard - 1),  # if r3 != discard-1: submit
                    _insn(0x85, imm=DISCARD), _insn(0x05, off=1),
                    _insn(0x85, imm=SUBMIT)]
        elif counted:
            tail = [_insn(0x85, imm=SUBMIT), _imm64(1, ring_bytes + (1 << SHIFT)), *add]
        else:
            tail = [_insn(0x85, imm=SUBMIT)]
        rest = fill + tail
        skip = sum(len(i) // 8 for i in rest)
        body += step + [_insn(0x15, 0, off=skip)] + rest  # if r0 == 0: skip this record
    lookup_counter = [_insn(0xbf, 2, 10), _insn(0x07, 2, imm=-4),
                      _map_fd(1, counter_fd), _insn(0x85, imm=LOOKUP)]
    rest = [_insn(0xbf, 8, 0)] + body
    inner = lookup_counter + [_insn(0x15, 0, off=sum(len(i) // 8 for i in rest))] + rest
    prog = [_insn(0x62, 10, off=-4, imm=0)]  # *(u32 *)(r10 - 4) = 0: the maps' key
    if counted:  # r9: the count, looked up first
        prog += [_insn(0xbf, 2, 10), _insn(0x07, 2, imm=-4), _map_fd(1, committed_fd),
                 _insn(0x85, imm=LOOKUP), _insn(0xbf, 9, 0)]
        prog += [_insn(0x15, 0, off=sum(len(i) // 8 for i in inner))]
    prog += inner
    prog += [_insn(0xb7, 0, imm=0), _insn(0x95)]
    return b"".join(prog)


class _CreateOpts(ctypes.Structure):
    # struct bpf_map_create_opts (libbpf 1.x), as far as map_flags and the rest.
    _fields_ = [("sz", ctypes.c_size_t), ("btf_fd", ctypes.c_uint32),
                ("btf_key_type_id", ctypes.c_uint32), ("btf_value_type_id", ctypes.c_uint32),
                ("btf_vmlinux_value_type_id", ctypes.c_uint32),
                ("inner_map_fd", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("map_extra", ctypes.c_uint64), ("numa_node", ctypes.c_uint32),
                ("map_ifindex", ctypes.c_uint32)]


MMAPABLE = 1 << 10  # BPF_F_MMAPABLE


class Producer:
    """A ring of `ring_bytes` and programs writing records of the given size patterns."""

    def __init__(self, ring_bytes: int, counted: bool = False) -> None:
        lib = libbpf()
        lib.bpf_map_create.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32,
                                       ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
        lib.bpf_map_create.restype = ctypes.c_int
        lib.bpf_prog_load.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
        lib.bpf_prog_load.restype = ctypes.c_int
        lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.bpf_prog_test_run_opts.restype = ctypes.c_int
        self.lib = lib
        self.counter = lib.bpf_map_create(ARRAY, b"seq", 4, 8, 1, None)
        if self.counter < 0:
            raise fail("bpf_map_create (array)", self.counter)
        self.ring = lib.bpf_map_create(RINGBUF, b"ring", 0, 0, ring_bytes, None)
        if self.ring < 0:
            raise fail("bpf_map_create (ringbuf)", self.ring)
        self.progs: dict = {}
        self.committed = None  # the count's map (counted), for RingReader's committed_fd
        if counted:
            opts = _CreateOpts(sz=ctypes.sizeof(_CreateOpts), map_flags=MMAPABLE)
            self.committed = lib.bpf_map_create(ARRAY, b"committed", 4, 8, 1,
                                                ctypes.byref(opts))
            if self.committed < 0:
                raise fail("bpf_map_create (mmapable array)", self.committed)

    def run(self, sizes: tuple[int, ...], times: int, discard: int = 0,
            wakeup: int = 0) -> None:
        """Run the program of these sizes `times` times (one test run, repeated), each record
        submitted with `wakeup` as its flags (0: the kernel's adaptive wakeup, NO_WAKEUP,
        FORCE_WAKEUP)."""
        key = (sizes, discard, wakeup)
        if key not in self.progs:
            code = assemble(self.counter, self.ring, list(sizes), discard, self.committed,
                            wakeup)
            fd = self.lib.bpf_prog_load(SCHED_CLS, b"fill", b"GPL", code, len(code) // 8, None)
            if fd < 0:
                raise fail("bpf_prog_load", fd)
            self.progs[key] = fd
        packet = ctypes.create_string_buffer(64)
        opts = TestRunOpts(sz=ctypes.sizeof(TestRunOpts), data_in=ctypes.addressof(packet),
                           data_size_in=64, repeat=times)
        if self.lib.bpf_prog_test_run_opts(self.progs[key], ctypes.byref(opts)):
            raise fail("BPF_PROG_TEST_RUN")

    def made(self) -> int:
        """Sequence numbers handed out so far (records reserved or refused)."""
        value = ctypes.c_uint64()
        key = ctypes.c_uint32(0)
        if libbpf().bpf_map_lookup_elem(self.counter, ctypes.byref(key), ctypes.byref(value)):
            raise fail("bpf_map_lookup_elem")
        return value.value

    def close(self) -> None:
        import os

        for fd in [*self.progs.values(), self.ring, self.counter]:
            os.close(fd)
        if self.committed is not None:
            os.close(self.committed)
        self.progs.clear()


def check(record, seq: int, size: int) -> None:
    """The record's bytes are those the program wrote for `seq` at `size`."""
    assert len(record) == size, (len(record), size)
    got = struct.unpack_from("<QQ", record)
    end = struct.unpack_from("<Q", record, (size - 8) & ~7)[0] if size >= 24 else seq
    assert got == (seq, size) and end == seq, (got, end, seq, size)
