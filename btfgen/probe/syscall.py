"""The bpf() syscall itself, for what Debian's libbpf (libbpf1, 1.1) cannot do: it predates
uprobe_multi links, so the multi and session links are made here, and so are the probes of
features.py and the info a link or program gives back. The syscall's number, the one per-arch
fact here, is the caller's: the trace manifest's `bpf_syscall`, which the arch's description
gives (btfgen.abi.arches.host_bpf_syscall outside).
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import c_long, c_uint64, c_void_p

from .libbpf import libc

libc.syscall.restype = c_long
libc.syscall.argtypes = [c_long, c_long, c_void_p, c_long]

BYTE_ORDER = sys.byteorder  # the kernel's info structs are in this machine's order
BPF_MAP_CREATE = 0
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_TYPE_ARRAY = 2
BPF_PROG_LOAD = 5
BPF_PROG_TYPE_KPROBE = 2
# prog_flags: a program that may sleep (a page fault in bpf_copy_from_user); uprobes only
# among kprobe-type programs (Linux 6.0+)
BPF_F_SLEEPABLE = 1 << 4
BPF_LINK_CREATE = 28
BPF_TRACE_KPROBE_MULTI = 42  # enum bpf_attach_type (kernel ≥ 5.18)
BPF_F_KPROBE_MULTI_RETURN = 1
BPF_TRACE_UPROBE_MULTI = 48  # enum bpf_attach_type (kernel ≥ 6.6)
BPF_F_UPROBE_MULTI_RETURN = 1
# One link for entry and exit, the kprobe_multi and uprobe_multi links' attach arms with these
# types (include/uapi/linux/bpf.h: the two after BPF_NETKIT_PEER).
BPF_TRACE_KPROBE_SESSION = 56  # kernel ≥ 6.10
BPF_TRACE_UPROBE_SESSION = 57  # kernel ≥ 6.13
# The trampoline's: a program of type TRACING on the kernel's BPF trampoline (include/uapi/
# linux/bpf.h, the enum's next four, as Debian's 7.2.13 vmlinux BTF names them). FSESSION
# (Linux 7.0) is entry and exit as one program on one function, fixed at load; the MULTI ones
# (7.2) one program on a tracing_multi link of many functions, its load target the kernel's
# placeholder bpf_multi_func.
BPF_PROG_TYPE_TRACING = 26
BPF_TRACE_FSESSION = 58
BPF_TRACE_FENTRY_MULTI = 59
BPF_TRACE_FEXIT_MULTI = 60
BPF_TRACE_FSESSION_MULTI = 61
BPF_LINK_TYPE_TRACING_MULTI = 15  # enum bpf_link_type


def sys_bpf(number: int, cmd: int, attr: ctypes.Structure) -> int:
    """bpf(cmd, attr) by the syscall's `number`, which varies by arch: this side has no arch
    descriptions, so the trace manifest says it."""
    return libc.syscall(number, cmd, ctypes.byref(attr), ctypes.sizeof(attr))


class LinkCreateUprobeMulti(ctypes.Structure):
    # union bpf_attr, the link_create member with its uprobe_multi arm (include/uapi/linux/bpf.h)
    _fields_ = [("prog_fd", ctypes.c_uint32), ("target_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("path", c_uint64), ("offsets", c_uint64), ("ref_ctr_offsets", c_uint64),
                ("cookies", c_uint64), ("cnt", ctypes.c_uint32), ("um_flags", ctypes.c_uint32),
                ("pid", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]


class LinkCreateKprobeMulti(ctypes.Structure):
    # the link_create member with its kprobe_multi arm
    _fields_ = [("prog_fd", ctypes.c_uint32), ("target_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("km_flags", ctypes.c_uint32), ("cnt", ctypes.c_uint32),
                ("syms", c_uint64), ("addrs", c_uint64), ("cookies", c_uint64)]


class LinkCreateTracingMulti(ctypes.Structure):
    # the link_create member with its tracing_multi arm (24 bytes after the head in 7.2's
    # vmlinux BTF: ids, cookies, cnt): `ids` the functions' BTF ids (u32 each) in the BTF the
    # program was loaded against (vmlinux, or a module's: a link per BTF object), `cookies` one
    # u64 per id
    _fields_ = [("prog_fd", ctypes.c_uint32), ("target_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("ids", c_uint64), ("cookies", c_uint64), ("cnt", ctypes.c_uint32),
                ("_pad", ctypes.c_uint32)]


class LinkCreateTracing(ctypes.Structure):
    # the link_create member with its tracing arm: a program loaded for one function (its
    # attach_btf_id) with target_btf_id 0, and the BPF cookie of the link (Linux 6.0+)
    _fields_ = [("prog_fd", ctypes.c_uint32), ("target_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("target_btf_id", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
                ("cookie", c_uint64)]


class InfoByFd(ctypes.Structure):
    # union bpf_attr, the BPF_OBJ_GET_INFO_BY_FD member
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", c_uint64)]


BPF_OBJ_GET_INFO_BY_FD = 15
# Where the kernel keeps its count of calls a program or link missed, in the info it hands back
# (the uapi structs are laid out alike on every arch: 8-aligned fields throughout).
PROG_INFO_SIZE = 232  # struct bpf_prog_info as of 6.1; a newer kernel fills only this much
PROG_RECURSION_MISSES = 208  # bpf_prog_info.recursion_misses (5.12+): the program did not run
LINK_INFO_SIZE = 64
KPROBE_MULTI_MISSED = 32  # bpf_link_info.kprobe_multi.missed (6.7+): fprobe missed the call


def info(number: int, fd: int, size: int) -> bytes | None:
    """The first `size` bytes of what BPF_OBJ_GET_INFO_BY_FD says of `fd` (a program or a
    link), or None where the kernel refuses."""
    buf = ctypes.create_string_buffer(size)
    attr = InfoByFd(bpf_fd=fd, info_len=size, info=ctypes.addressof(buf))
    if sys_bpf(number, BPF_OBJ_GET_INFO_BY_FD, attr) < 0:
        return None
    return buf.raw


class MapCreate(ctypes.Structure):
    # union bpf_attr, the BPF_MAP_CREATE member up to map_flags
    _fields_ = [("map_type", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32)]


class MapElem(ctypes.Structure):
    # union bpf_attr, the BPF_MAP_*_ELEM member: a map, pointers to a key and a value
    _fields_ = [("map_fd", ctypes.c_uint32), ("_pad", ctypes.c_uint32), ("key", c_uint64),
                ("value", c_uint64), ("flags", c_uint64)]


class ProgLoad(ctypes.Structure):
    # union bpf_attr, the BPF_PROG_LOAD member up to expected_attach_type
    _fields_ = [("prog_type", ctypes.c_uint32), ("insn_cnt", ctypes.c_uint32),
                ("insns", c_uint64), ("license", c_uint64), ("log_level", ctypes.c_uint32),
                ("log_size", ctypes.c_uint32), ("log_buf", c_uint64),
                ("kern_version", ctypes.c_uint32), ("prog_flags", ctypes.c_uint32),
                ("prog_name", ctypes.c_char * 16), ("prog_ifindex", ctypes.c_uint32),
                ("expected_attach_type", ctypes.c_uint32)]


class ProgLoadAttach(ctypes.Structure):
    # the BPF_PROG_LOAD member on to attach_btf_obj_fd: a TRACING program's target (its BTF id
    # and the BTF object it is in, 0 for vmlinux)
    _fields_ = [*ProgLoad._fields_,
                ("prog_btf_fd", ctypes.c_uint32), ("func_info_rec_size", ctypes.c_uint32),
                ("func_info", c_uint64), ("func_info_cnt", ctypes.c_uint32),
                ("line_info_rec_size", ctypes.c_uint32), ("line_info", c_uint64),
                ("line_info_cnt", ctypes.c_uint32), ("attach_btf_id", ctypes.c_uint32),
                ("attach_btf_obj_fd", ctypes.c_uint32)]


# A kernel module's BTF object (tracing_multi on its functions: the program loaded against it,
# attach_btf_obj_fd, and the link's ids its own), found by name among the kernel's BTF objects.
BPF_BTF_GET_FD_BY_ID = 19
BPF_BTF_GET_NEXT_ID = 23


class GetId(ctypes.Structure):
    # union bpf_attr, the *_GET_NEXT_ID / *_GET_FD_BY_ID member: an id, the next one, flags
    _fields_ = [("id", ctypes.c_uint32), ("next_id", ctypes.c_uint32),
                ("open_flags", ctypes.c_uint32)]


class BtfInfo(ctypes.Structure):
    # struct bpf_btf_info (5.11+ for name and kernel_btf)
    _fields_ = [("btf", c_uint64), ("btf_size", ctypes.c_uint32), ("id", ctypes.c_uint32),
                ("name", c_uint64), ("name_len", ctypes.c_uint32),
                ("kernel_btf", ctypes.c_uint32)]


def kernel_btf_fd(number: int, name: str) -> int | None:
    """A file descriptor of the kernel's BTF object called `name` (a module's: the name
    lsmod gives it), or None: none loaded (or the kernel says no names)."""
    import os

    attr = GetId(id=0)
    while sys_bpf(number, BPF_BTF_GET_NEXT_ID, attr) == 0:
        attr = GetId(id=attr.next_id)
        fd = sys_bpf(number, BPF_BTF_GET_FD_BY_ID, GetId(id=attr.id))
        if fd < 0:
            continue
        text = ctypes.create_string_buffer(64)
        got = BtfInfo(name=ctypes.addressof(text), name_len=len(text))
        query = InfoByFd(bpf_fd=fd, info_len=ctypes.sizeof(got), info=ctypes.addressof(got))
        if (sys_bpf(number, BPF_OBJ_GET_INFO_BY_FD, query) == 0 and got.kernel_btf
                and text.value.decode(errors="replace") == name):
            return fd
        os.close(fd)
    return None
