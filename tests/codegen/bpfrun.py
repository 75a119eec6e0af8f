"""Loading BPF objects through libbpf (ctypes) and running `syscall` programs with
BPF_PROG_TEST_RUN: the running kernel's verifier and interpreter/JIT are the judge."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path


class BpfError(RuntimeError):
    pass


def _libbpf():
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    lib = ctypes.CDLL(name, use_errno=True)
    P = ctypes.c_void_p
    lib.bpf_object__open_file.restype = P
    lib.bpf_object__open_file.argtypes = [ctypes.c_char_p, P]
    lib.bpf_object__load.argtypes = [P]
    lib.bpf_object__close.argtypes = [P]
    lib.bpf_object__find_program_by_name.restype = P
    lib.bpf_object__find_program_by_name.argtypes = [P, ctypes.c_char_p]
    lib.bpf_program__fd.argtypes = [P]
    lib.bpf_object__next_map.restype = P
    lib.bpf_object__next_map.argtypes = [P, P]
    lib.bpf_map__name.restype = ctypes.c_char_p
    lib.bpf_map__name.argtypes = [P]
    lib.bpf_map__fd.argtypes = [P]
    lib.bpf_map__value_size.argtypes = [P]
    lib.bpf_map_lookup_elem.argtypes = [ctypes.c_int, P, P]
    lib.bpf_map_update_elem.argtypes = [ctypes.c_int, P, P, ctypes.c_uint64]
    lib.bpf_object__find_map_by_name.restype = P
    lib.bpf_object__find_map_by_name.argtypes = [P, ctypes.c_char_p]
    lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, P]
    lib.libbpf_get_error.argtypes = [P]
    lib.libbpf_get_error.restype = ctypes.c_long
    return lib


class _TestRunOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


_LIB = None


def lib():
    global _LIB
    if _LIB is None:
        _LIB = _libbpf()
    return _LIB


def bpf_permitted() -> str | None:
    """None when this process may load BPF, else the reason it may not."""
    if os.geteuid() != 0:
        return "not root: loading BPF needs CAP_BPF/CAP_SYS_ADMIN"
    try:
        lib()
    except OSError as e:
        return f"libbpf not loadable: {e}"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "kernel without BTF"
    return None


class BpfObject:
    def __init__(self, path: Path):
        l = lib()
        self.obj = l.bpf_object__open_file(str(path).encode(), None)
        if not self.obj or l.libbpf_get_error(self.obj):
            raise BpfError(f"{path}: bpf_object__open_file failed")
        err = l.bpf_object__load(self.obj)
        if err:
            l.bpf_object__close(self.obj)
            raise BpfError(f"{path}: the verifier refused it (error {err}; log on stderr)")

    def close(self):
        if self.obj:
            lib().bpf_object__close(self.obj)
            self.obj = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def prog_fd(self, name: str) -> int:
        prog = lib().bpf_object__find_program_by_name(self.obj, name.encode())
        if not prog:
            raise BpfError(f"no program {name}")
        return lib().bpf_program__fd(prog)

    def run(self, name: str, ctx: bytes) -> tuple[int, bytes]:
        """Run a `syscall` program on a copy of `ctx`: (return value, the ctx as the program
        left it)."""
        buf = ctypes.create_string_buffer(bytes(ctx), len(ctx))
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), ctx_in=ctypes.addressof(buf),
                            ctx_size_in=len(ctx))
        err = lib().bpf_prog_test_run_opts(self.prog_fd(name), ctypes.byref(opts))
        if err:
            raise BpfError(f"BPF_PROG_TEST_RUN {name}: error {err} (errno {ctypes.get_errno()})")
        return ctypes.c_int32(opts.retval).value, buf.raw

    def fill_array(self, map_name: str, values: list[bytes]) -> None:
        """An array map's entries 0, 1, ... (a benchmark's specs)."""
        l = lib()
        m = l.bpf_object__find_map_by_name(self.obj, map_name.encode())
        if not m:
            raise BpfError(f"no map {map_name}")
        for i, value in enumerate(values):
            key, val = ctypes.c_uint32(i), ctypes.create_string_buffer(value, len(value))
            if l.bpf_map_update_elem(l.bpf_map__fd(m), ctypes.byref(key), val, 0):
                raise BpfError(f"{map_name}[{i}]: update failed (errno {ctypes.get_errno()})")

    def global_data(self, suffix: str = ".bss") -> bytes:
        l = lib()
        m = l.bpf_object__next_map(self.obj, None)
        while m:
            if l.bpf_map__name(m).decode().endswith(suffix):
                size = l.bpf_map__value_size(m)
                key = ctypes.c_uint32(0)
                val = ctypes.create_string_buffer(size)
                if l.bpf_map_lookup_elem(l.bpf_map__fd(m), ctypes.byref(key), val):
                    raise BpfError(f"lookup of {suffix} failed")
                return val.raw
            m = l.bpf_object__next_map(self.obj, m)
        raise BpfError(f"no {suffix} map")

    def verified_insns(self, name: str) -> int:
        fd = self.prog_fd(name)
        for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
            if line.startswith("verified_insns:"):
                return int(line.split()[1])
        raise BpfError("kernel does not report verified_insns")
