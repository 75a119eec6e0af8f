"""Just enough libbpf, through ctypes: the library loaded once with the signatures used here,
its log collected, and its failures turned into BpfLoadError carrying that log (the
verifier's complaint, when loading fails).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import CFUNCTYPE, POINTER, c_bool, c_char_p, c_int, c_size_t, c_uint64, c_void_p

from .errors import BpfLoadError


class UprobeOpts(ctypes.Structure):
    # struct bpf_uprobe_opts (libbpf.h): the size field lets libbpf accept older/newer layouts.
    _fields_ = [("sz", c_size_t), ("ref_ctr_offset", c_size_t), ("bpf_cookie", c_uint64),
                ("retprobe", c_bool), ("func_name", c_char_p)]


class KprobeOpts(ctypes.Structure):
    # struct bpf_kprobe_opts as libbpf 1.1 has it (later ones only add fields after these).
    _fields_ = [("sz", c_size_t), ("bpf_cookie", c_uint64), ("offset", c_size_t),
                ("retprobe", c_bool)]


class TestRunOpts(ctypes.Structure):
    # struct bpf_test_run_opts as libbpf 1.1 has it, for bpf_prog_test_run_opts: the tests'
    # and benchmarks' producers run BPF programs this way (BPF_PROG_TEST_RUN with `repeat`).
    __test__ = False  # not a test class, whatever pytest makes of the name
    _fields_ = [("sz", c_size_t), ("data_in", c_void_p), ("data_out", c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", c_void_p), ("ctx_out", c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", c_int), ("duration", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


_PRINT_FN = CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
SAMPLE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)  # a ring buffer's callback

log: list[str] = []  # what libbpf said since it was last cleared
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]


_LOG_BUFFER = ctypes.create_string_buffer(1 << 20)


@_PRINT_FN
def _collect_log(level, fmt, args):
    # Whatever libbpf hands over as va_list is passed on unchanged: on every Linux ABI it is one
    # register (a pointer on x86_64, s390x, arm64 — an array, or a large struct passed by
    # reference — and the pointer itself on riscv, ppc64, loongarch, i386 and arm).
    # One vsnprintf only: a va_list is spent once read. The verifier's log comes in one
    # message, its reason for a refusal at the end: 4 KiB cut it off.
    libc.vsnprintf(_LOG_BUFFER, len(_LOG_BUFFER), fmt, args)
    log.append(_LOG_BUFFER.value.decode(errors="replace"))
    return 0


def _load_libbpf() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise BpfLoadError(f"libbpf: cannot load {name}: {e}") from None
    sigs = {
        "bpf_object__open_file": ([c_char_p, c_void_p], c_void_p),
        "bpf_object__load": ([c_void_p], c_int),
        "bpf_object__close": ([c_void_p], None),
        "bpf_object__find_program_by_name": ([c_void_p, c_char_p], c_void_p),
        "bpf_object__find_map_by_name": ([c_void_p, c_char_p], c_void_p),
        "bpf_program__fd": ([c_void_p], c_int),
        "bpf_program__set_expected_attach_type": ([c_void_p, c_int], c_int),
        "bpf_program__set_autoload": ([c_void_p, c_bool], c_int),
        "bpf_program__attach_uprobe_opts": (
            [c_void_p, c_int, c_char_p, c_size_t, POINTER(UprobeOpts)], c_void_p),
        "bpf_program__attach": ([c_void_p], c_void_p),
        "bpf_program__attach_kprobe_opts": (
            [c_void_p, c_char_p, POINTER(KprobeOpts)], c_void_p),
        "bpf_link__destroy": ([c_void_p], c_int),
        "bpf_map__fd": ([c_void_p], c_int),
        "bpf_map__set_max_entries": ([c_void_p, ctypes.c_uint32], c_int),
        "bpf_map_update_elem": ([c_int, c_void_p, c_void_p, c_uint64], c_int),
        "bpf_map_lookup_elem": ([c_int, c_void_p, c_void_p], c_int),
        "bpf_map_get_next_key": ([c_int, c_void_p, c_void_p], c_int),  # summary.py
        "libbpf_num_possible_cpus": ([], c_int),
        "ring_buffer__new": ([c_int, SAMPLE_FN, c_void_p, c_void_p], c_void_p),
        "ring_buffer__poll": ([c_void_p, c_int], c_int),
        "ring_buffer__consume": ([c_void_p], c_int),
        "ring_buffer__free": ([c_void_p], None),
        "libbpf_set_print": ([_PRINT_FN], c_void_p),
        "libbpf_probe_bpf_prog_type": ([c_int, c_void_p], c_int),
        "btf__load_vmlinux_btf": ([], c_void_p),
        "btf__find_by_name_kind": ([c_void_p, c_char_p, ctypes.c_uint32], c_int),
        "btf__type_by_id": ([c_void_p, ctypes.c_uint32], c_void_p),
        "btf__free": ([c_void_p], None),
        # the trampoline's programs (attach.py): a TRACING program in a plain section, its
        # target set before load; and the maps a second object shares with the first
        "btf__name_by_offset": ([c_void_p, ctypes.c_uint32], c_char_p),
        "bpf_program__set_type": ([c_void_p, c_int], c_int),
        "bpf_program__set_attach_target": ([c_void_p, c_int, c_char_p], c_int),
        "bpf_map__reuse_fd": ([c_void_p, c_int], c_int),
        # a program's instructions as loaded (0.7+), to load it again against a module's BTF
        "bpf_program__insns": ([c_void_p], c_void_p),
        "bpf_program__insn_cnt": ([c_void_p], ctypes.c_size_t),
    }
    for fn, (argtypes, restype) in sigs.items():
        f = getattr(lib, fn)
        f.argtypes, f.restype = argtypes, restype
    if hasattr(lib, "bpf_map_update_batch"):  # libbpf 0.0.8+: optional, update() stands in
        lib.bpf_map_update_batch.argtypes = [c_int, c_void_p, c_void_p,
                                             POINTER(ctypes.c_uint32), c_void_p]
        lib.bpf_map_update_batch.restype = c_int
    lib.libbpf_set_print(_collect_log)
    return lib


_lib: ctypes.CDLL | None = None


def libbpf() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = _load_libbpf()
    return _lib


def fail(what: str, err: int | None = None) -> BpfLoadError:
    err = ctypes.get_errno() if err is None else err
    said = "\n".join(line.rstrip() for line in log[-40:] if line.strip())
    log.clear()
    detail = f": {os.strerror(abs(err))}" if err else ""
    return BpfLoadError(f"{what}{detail}" + (f"\n{said}" if said else ""), abs(err or 0))


JIT_SYSCTL = "/proc/sys/net/core/bpf_jit_enable"


def jit_off() -> str:
    """Why a load may fail that the verifier's log only hints at ("requires BPF JIT compiler"):
    Debian's riscv64 kernel, for one, boots with the JIT off, and kernels refuse some programs
    to the interpreter. Turning it on is the administrator's call, so it is said, not done."""
    try:
        with open(JIT_SYSCTL) as f:
            if f.read().strip() != "0":
                return ""
    except OSError:
        return ""
    return (" (this kernel's BPF JIT is off, net.core.bpf_jit_enable = 0: "
            "`sysctl net.core.bpf_jit_enable=1` turns it on)")


def possible_cpus() -> int:
    n = libbpf().libbpf_num_possible_cpus()
    if n <= 0:
        raise fail("counting the possible CPUs", -n)
    return n

