"""Just enough libbpf, through ctypes, to load a BPF object, attach uprobes, kprobe_multi and
uprobe_multi links (pairs, or one session link) and read a ring buffer. Standard library only
(btfgen and pyelftools are needed just to find a user function's file offset, which the run side
is given), so it runs on a target that has nothing but Python and libbpf.

Debian's libbpf (libbpf1, 1.1) predates uprobe_multi links, so the multi links are made with the
bpf() syscall itself (its number, the one per-arch fact here, is the caller's: the trace
manifest's `bpf_syscall`, which the arch's description gives); everything else is libbpf's own
API. Errors become `BpfLoadError` carrying libbpf's log (the verifier's complaint, when loading
fails).

    obj = BpfObject("trace.bpf.o", bpf_syscall=manifest["bpf_syscall"])
    obj.load()
    link = obj.attach_uprobe("on_entry", "/usr/bin/prog", "parse")
    with RingBuffer(obj.map_fd("events"), lambda raw: print(raw.hex())) as rb:
        rb.poll(100)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from collections.abc import Callable, Sequence
from ctypes import CFUNCTYPE, POINTER, c_bool, c_char_p, c_int, c_long, c_size_t, c_uint64, c_void_p

TRACEFS = "/sys/kernel/tracing"
_BYTE_ORDER = sys.byteorder  # the kernel's info structs are in this machine's order


class BpfLoadError(RuntimeError):
    def __init__(self, message: str, errno: int = 0):
        super().__init__(message)
        self.errno = errno  # what the kernel or libbpf said, where known (0: not known)


# -- libbpf ----------------------------------------------------------------------------------

class _UprobeOpts(ctypes.Structure):
    # struct bpf_uprobe_opts (libbpf.h): the size field lets libbpf accept older/newer layouts.
    _fields_ = [("sz", c_size_t), ("ref_ctr_offset", c_size_t), ("bpf_cookie", c_uint64),
                ("retprobe", c_bool), ("func_name", c_char_p)]


class _KprobeOpts(ctypes.Structure):
    # struct bpf_kprobe_opts as libbpf 1.1 has it (later ones only add fields after these).
    _fields_ = [("sz", c_size_t), ("bpf_cookie", c_uint64), ("offset", c_size_t),
                ("retprobe", c_bool)]


_PRINT_FN = CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
_SAMPLE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)

_log: list[str] = []
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]


@_PRINT_FN
def _collect_log(level, fmt, args):
    # Whatever libbpf hands over as va_list is passed on unchanged: on every Linux ABI it is one
    # register (a pointer on x86_64, s390x, arm64 — an array, or a large struct passed by
    # reference — and the pointer itself on riscv, ppc64, loongarch, i386 and arm).
    buf = ctypes.create_string_buffer(4096)
    _libc.vsnprintf(buf, len(buf), fmt, args)
    _log.append(buf.value.decode(errors="replace"))
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
            [c_void_p, c_int, c_char_p, c_size_t, POINTER(_UprobeOpts)], c_void_p),
        "bpf_program__attach": ([c_void_p], c_void_p),
        "bpf_program__attach_kprobe_opts": (
            [c_void_p, c_char_p, POINTER(_KprobeOpts)], c_void_p),
        "bpf_link__destroy": ([c_void_p], c_int),
        "bpf_map__fd": ([c_void_p], c_int),
        "bpf_map__set_max_entries": ([c_void_p, ctypes.c_uint32], c_int),
        "bpf_map_update_elem": ([c_int, c_void_p, c_void_p, c_uint64], c_int),
        "bpf_map_lookup_elem": ([c_int, c_void_p, c_void_p], c_int),
        "libbpf_num_possible_cpus": ([], c_int),
        "ring_buffer__new": ([c_int, _SAMPLE_FN, c_void_p, c_void_p], c_void_p),
        "ring_buffer__poll": ([c_void_p, c_int], c_int),
        "ring_buffer__consume": ([c_void_p], c_int),
        "ring_buffer__free": ([c_void_p], None),
        "libbpf_set_print": ([_PRINT_FN], c_void_p),
        "libbpf_probe_bpf_prog_type": ([c_int, c_void_p], c_int),
        "btf__load_vmlinux_btf": ([], c_void_p),
        "btf__find_by_name_kind": ([c_void_p, c_char_p, ctypes.c_uint32], c_int),
        "btf__type_by_id": ([c_void_p, ctypes.c_uint32], c_void_p),
        "btf__free": ([c_void_p], None),
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


def _fail(what: str, err: int | None = None) -> BpfLoadError:
    err = ctypes.get_errno() if err is None else err
    log = "\n".join(line.rstrip() for line in _log[-40:] if line.strip())
    _log.clear()
    detail = f": {os.strerror(abs(err))}" if err else ""
    return BpfLoadError(f"{what}{detail}" + (f"\n{log}" if log else ""), abs(err or 0))


JIT_SYSCTL = "/proc/sys/net/core/bpf_jit_enable"


def _jit_off() -> str:
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


# -- where a function is in its file -----------------------------------------------------------

def function_file_offset(binary: str, name: str) -> int:
    """The file offset of function `name` (what uprobes attach by): its default symbol version,
    never an IFUNC's resolver (btfgen.trace.symbols says why)."""
    from btfgen.trace import symbols  # build side only: the run side is given the offsets

    try:
        return symbols.function_file_offset(binary, name)
    except symbols.SymbolError as e:
        raise BpfLoadError(str(e)) from None


def function_file_offsets(binary: str, names: Sequence[str]) -> list[int]:
    """The file offsets of `names`, the binary's symbols read once (read again for each name,
    thousands of functions took minutes)."""
    from btfgen.trace import symbols  # build side only

    try:
        return [fn.offset for fn in symbols.functions(binary, list(names))]
    except symbols.SymbolError as e:
        raise BpfLoadError(str(e)) from None


# -- the bpf() syscall, for what libbpf 1.1 cannot do ----------------------------------------------

_BPF_PROG_LOAD = 5
_BPF_PROG_TYPE_KPROBE = 2
_BPF_LINK_CREATE = 28
BPF_TRACE_KPROBE_MULTI = 42  # enum bpf_attach_type (kernel ≥ 5.18)
BPF_F_KPROBE_MULTI_RETURN = 1
BPF_TRACE_UPROBE_MULTI = 48  # enum bpf_attach_type (kernel ≥ 6.6)
BPF_F_UPROBE_MULTI_RETURN = 1
# One link for entry and exit, the kprobe_multi and uprobe_multi links' attach arms with these
# types (include/uapi/linux/bpf.h: the two after BPF_NETKIT_PEER).
BPF_TRACE_KPROBE_SESSION = 56  # kernel ≥ 6.10
BPF_TRACE_UPROBE_SESSION = 57  # kernel ≥ 6.13


def _sys_bpf(number: int, cmd: int, attr: ctypes.Structure) -> int:
    """bpf(cmd, attr) by the syscall's `number`, which varies by arch: this side has no arch
    descriptions, so the trace manifest says it (btfgen.abi.arches.host_bpf_syscall outside)."""
    return _libc.syscall(number, cmd, ctypes.byref(attr), ctypes.sizeof(attr))


class _LinkCreateUprobeMulti(ctypes.Structure):
    # union bpf_attr, the link_create member with its uprobe_multi arm (include/uapi/linux/bpf.h)
    _fields_ = [("prog_fd", ctypes.c_uint32), ("target_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("path", c_uint64), ("offsets", c_uint64), ("ref_ctr_offsets", c_uint64),
                ("cookies", c_uint64), ("cnt", ctypes.c_uint32), ("um_flags", ctypes.c_uint32),
                ("pid", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]


class _LinkCreateKprobeMulti(ctypes.Structure):
    # the link_create member with its kprobe_multi arm
    _fields_ = [("prog_fd", ctypes.c_uint32), ("target_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("km_flags", ctypes.c_uint32), ("cnt", ctypes.c_uint32),
                ("syms", c_uint64), ("addrs", c_uint64), ("cookies", c_uint64)]


class _InfoByFd(ctypes.Structure):
    # union bpf_attr, the BPF_OBJ_GET_INFO_BY_FD member
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", c_uint64)]


_BPF_OBJ_GET_INFO_BY_FD = 15
# Where the kernel keeps its count of calls a program or link missed, in the info it hands back
# (the uapi structs are laid out alike on every arch: 8-aligned fields throughout).
_PROG_INFO_SIZE = 232  # struct bpf_prog_info as of 6.1; a newer kernel fills only this much
_PROG_RECURSION_MISSES = 208  # bpf_prog_info.recursion_misses (5.12+): the program did not run
_LINK_INFO_SIZE = 64
_KPROBE_MULTI_MISSED = 32  # bpf_link_info.kprobe_multi.missed (6.7+): fprobe missed the call


def _info(number: int, fd: int, size: int) -> bytes | None:
    buf = ctypes.create_string_buffer(size)
    attr = _InfoByFd(bpf_fd=fd, info_len=size, info=ctypes.addressof(buf))
    if _sys_bpf(number, _BPF_OBJ_GET_INFO_BY_FD, attr) < 0:
        return None
    return buf.raw


class _ProgLoad(ctypes.Structure):
    # union bpf_attr, the BPF_PROG_LOAD member up to expected_attach_type
    _fields_ = [("prog_type", ctypes.c_uint32), ("insn_cnt", ctypes.c_uint32),
                ("insns", c_uint64), ("license", c_uint64), ("log_level", ctypes.c_uint32),
                ("log_size", ctypes.c_uint32), ("log_buf", c_uint64),
                ("kern_version", ctypes.c_uint32), ("prog_flags", ctypes.c_uint32),
                ("prog_name", ctypes.c_char * 16), ("prog_ifindex", ctypes.c_uint32),
                ("expected_attach_type", ctypes.c_uint32)]


_libc.syscall.restype = c_long
_libc.syscall.argtypes = [c_long, c_long, c_void_p, c_long]


class FdLink:
    """A link made with the raw syscall: a file descriptor to close."""

    def __init__(self, fd: int, kprobe_multi: bool = False) -> None:
        self.fd = fd
        self.kprobe_multi = kprobe_multi  # a kprobe_multi link (a kprobe session's too)

    def destroy(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class LibbpfLink:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def destroy(self) -> None:
        if self.ptr:
            libbpf().bpf_link__destroy(self.ptr)
            self.ptr = 0


# -- objects ---------------------------------------------------------------------------------------

class BpfObject:
    def __init__(self, path: str, *, bpf_syscall: int) -> None:
        """`bpf_syscall`: the bpf() syscall's number on this machine."""
        lib = libbpf()
        self.path = path
        self.bpf_syscall = bpf_syscall
        self._obj = lib.bpf_object__open_file(path.encode(), None)
        if not self._obj:
            raise _fail(f"{path}: libbpf could not open the object")
        self.links: list[LibbpfLink | FdLink] = []

    def program(self, name: str) -> int:
        prog = libbpf().bpf_object__find_program_by_name(self._obj, name.encode())
        if not prog:
            raise BpfLoadError(f"{self.path}: no program {name!r}")
        return prog

    def expect_uprobe_multi(self, name: str, *, session: bool = False) -> None:
        """Call before load() for a program to be attached with attach_uprobe_multi (with
        session=True: as a uprobe session, entry and exit on one link)."""
        self._expect(name, BPF_TRACE_UPROBE_SESSION if session else BPF_TRACE_UPROBE_MULTI)

    def _expect(self, name: str, attach_type: int) -> None:
        if libbpf().bpf_program__set_expected_attach_type(self.program(name), attach_type):
            raise _fail(f"{self.path}: {name}: cannot set expected attach type")

    def set_autoload(self, name: str, on: bool) -> None:
        libbpf().bpf_program__set_autoload(self.program(name), on)

    def set_max_entries(self, map_name: str, n: int) -> None:
        """Before load(): a map's size (a ring buffer's, in bytes: a power of two pages)."""
        m = libbpf().bpf_object__find_map_by_name(self._obj, map_name.encode())
        if not m or libbpf().bpf_map__set_max_entries(m, n):
            raise _fail(f"{self.path}: cannot size map {map_name} to {n}")

    def missed(self, programs: Sequence[str]) -> int:
        """Calls the kernel counted as missed: each program's runs skipped because another BPF
        program was running on that CPU (recursion_misses, 5.12+), and each kprobe_multi link's
        calls fprobe could not deliver (6.7+). Older kernels count neither, and say 0."""
        total = 0
        for name in programs:
            fd = libbpf().bpf_program__fd(self.program(name))
            info = _info(self.bpf_syscall, fd, _PROG_INFO_SIZE) if fd >= 0 else None
            if info:
                total += int.from_bytes(info[_PROG_RECURSION_MISSES:][:8], _BYTE_ORDER)
        for link in self.links:
            if isinstance(link, FdLink) and link.kprobe_multi and link.fd >= 0:
                info = _info(self.bpf_syscall, link.fd, _LINK_INFO_SIZE)
                if info:
                    total += int.from_bytes(info[_KPROBE_MULTI_MISSED:][:8], _BYTE_ORDER)
        return total

    def load(self) -> None:
        _log.clear()
        err = libbpf().bpf_object__load(self._obj)
        if err:
            raise _fail(f"{self.path}: loading failed{_jit_off()}", err)

    def map_fd(self, name: str) -> int:
        m = libbpf().bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise BpfLoadError(f"{self.path}: no map {name!r}")
        return libbpf().bpf_map__fd(m)

    def update(self, map_name: str, key: bytes, value: bytes) -> None:
        k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(value,
                                                                                       len(value))
        if libbpf().bpf_map_update_elem(self.map_fd(map_name), k, v, 0):
            raise _fail(f"{self.path}: updating map {map_name}")

    def fill_array(self, map_name: str, values: bytes, count: int) -> None:
        """Set an array map's entries 0..count-1 to `values` (count values of equal size, one
        after the other): in one bpf() call where the kernel (5.6+) and libbpf batch updates,
        else one call an entry."""
        size = len(values) // count if count else 0
        if not count:
            return
        fd = self.map_fd(map_name)
        lib = libbpf()
        if hasattr(lib, "bpf_map_update_batch"):
            keys = (ctypes.c_uint32 * count)(*range(count))
            vals = ctypes.create_string_buffer(values, len(values))
            n = ctypes.c_uint32(count)
            if lib.bpf_map_update_batch(fd, keys, vals, ctypes.byref(n), None) == 0:
                return
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, 524):  # 524: ENOTSUPP
                raise _fail(f"{self.path}: updating map {map_name} ({count} entries)", err)
        for i in range(count):
            self.update(map_name, i.to_bytes(4, sys.byteorder), values[i * size:(i + 1) * size])

    def lookup(self, map_name: str, key: bytes, size: int) -> bytes:
        """The value at `key`: `size` bytes (for a per-CPU map, every possible CPU's value,
        each padded to 8 bytes)."""
        k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(size)
        if libbpf().bpf_map_lookup_elem(self.map_fd(map_name), k, v):
            raise _fail(f"{self.path}: reading map {map_name}")
        return v.raw

    def attach_uprobe(self, prog: str, binary: str, func: str, *, retprobe: bool = False,
                      cookie: int = 0, pid: int = -1, offset: int | None = None) -> LibbpfLink:
        """One uprobe (or uretprobe) link for `prog` on `func` of `binary`, with a BPF cookie
        (Linux 5.15+); `offset` (its file offset) spares libbpf looking the name up."""
        opts = _UprobeOpts(sz=ctypes.sizeof(_UprobeOpts), bpf_cookie=cookie, retprobe=retprobe,
                           func_name=None if offset is not None else func.encode())
        _log.clear()
        link = libbpf().bpf_program__attach_uprobe_opts(self.program(prog), pid,
                                                        os.path.abspath(binary).encode(),
                                                        offset if offset is not None else 0,
                                                        ctypes.byref(opts))
        if not link:
            raise _fail(f"{'uretprobe' if retprobe else 'uprobe'} on {binary}:{func}",
                        -ctypes.get_errno())
        self.links.append(LibbpfLink(link))
        return self.links[-1]

    def attach_uprobe_multi(self, prog: str, binary: str, funcs: Sequence[str],
                            cookies: Sequence[int], *, retprobe: bool = False,
                            pid: int = 0, offsets: Sequence[int] | None = None,
                            session: bool = False) -> FdLink:
        """One link for `prog` on every function of `funcs`, each with its cookie; `offsets`
        (their file offsets) spare reading the binary's symbols. session=True: entry and exit
        (the program loaded with expect_uprobe_multi(session=True))."""
        n = len(funcs)
        path = ctypes.create_string_buffer(os.path.abspath(binary).encode())
        if offsets is None:
            offsets = function_file_offsets(binary, funcs)
        offsets = (c_uint64 * n)(*offsets)
        cooks = (c_uint64 * n)(*cookies)
        attr = _LinkCreateUprobeMulti(
            prog_fd=libbpf().bpf_program__fd(self.program(prog)),
            attach_type=BPF_TRACE_UPROBE_SESSION if session else BPF_TRACE_UPROBE_MULTI,
            path=ctypes.addressof(path), offsets=ctypes.addressof(offsets),
            cookies=ctypes.addressof(cooks), cnt=n,
            um_flags=BPF_F_UPROBE_MULTI_RETURN if retprobe else 0, pid=pid)
        fd = _sys_bpf(self.bpf_syscall, _BPF_LINK_CREATE, attr)
        if fd < 0:
            raise _fail(f"uprobe_{'session' if session else 'multi'} link for {prog} on "
                        f"{binary} ({n} functions)")
        self.links.append(FdLink(fd))
        return self.links[-1]

    def expect_kprobe_multi(self, name: str, *, session: bool = False) -> None:
        """Call before load() for a program to be attached with attach_kprobe_multi (with
        session=True: as a kprobe session, entry and exit on one link)."""
        self._expect(name, BPF_TRACE_KPROBE_SESSION if session else BPF_TRACE_KPROBE_MULTI)

    def attach_kprobe_multi(self, prog: str, funcs: Sequence[str], cookies: Sequence[int], *,
                            retprobe: bool = False, session: bool = False) -> FdLink:
        """One link for `prog` on every kernel function of `funcs`, each with its cookie;
        session=True: entry and exit (the program loaded with expect_kprobe_multi(session=True)).
        """
        n = len(funcs)
        names = [ctypes.create_string_buffer(f.encode()) for f in funcs]
        syms = (c_char_p * n)(*(ctypes.cast(b, c_char_p) for b in names))
        cooks = (c_uint64 * n)(*cookies)
        attr = _LinkCreateKprobeMulti(
            prog_fd=libbpf().bpf_program__fd(self.program(prog)),
            attach_type=BPF_TRACE_KPROBE_SESSION if session else BPF_TRACE_KPROBE_MULTI,
            km_flags=BPF_F_KPROBE_MULTI_RETURN if retprobe else 0, cnt=n,
            syms=ctypes.addressof(syms), cookies=ctypes.addressof(cooks))
        fd = _sys_bpf(self.bpf_syscall, _BPF_LINK_CREATE, attr)
        if fd < 0:
            err = ctypes.get_errno()
            why = (session_unavailable(self.bpf_syscall, kernel=True) if session else
                   kprobe_multi_unavailable(self.bpf_syscall))
            if why:
                raise BpfLoadError(why)
            kind = "kprobe.session" if session else \
                f"{'kretprobe' if retprobe else 'kprobe'}.multi"
            raise _fail(f"{kind} link for {prog} ({n} kernel functions)", err)
        self.links.append(FdLink(fd, kprobe_multi=True))
        return self.links[-1]

    def attach_kprobe(self, prog: str, func: str, cookie: int, *,
                      retprobe: bool = False) -> LibbpfLink:
        """One kprobe (or kretprobe) link for `prog` on kernel function `func`, with a BPF
        cookie (Linux 5.15+): where kprobe_multi links are missing or broken."""
        opts = _KprobeOpts(sz=ctypes.sizeof(_KprobeOpts), bpf_cookie=cookie, retprobe=retprobe)
        _log.clear()
        link = libbpf().bpf_program__attach_kprobe_opts(self.program(prog), func.encode(),
                                                        ctypes.byref(opts))
        if not link:
            raise _fail(f"{'kretprobe' if retprobe else 'kprobe'} on {func}",
                        -ctypes.get_errno())
        self.links.append(LibbpfLink(link))
        return self.links[-1]

    def attach(self, prog: str) -> LibbpfLink:
        """Attach where the program's section says (tracepoint/CATEGORY/NAME, ...)."""
        link = libbpf().bpf_program__attach(self.program(prog))
        if not link:
            raise _fail(f"attaching {prog}")
        self.links.append(LibbpfLink(link))
        return self.links[-1]

    def close(self) -> None:
        for link in reversed(self.links):
            link.destroy()
        self.links.clear()
        if self._obj:
            libbpf().bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RingBuffer:
    """Calls `on_record(bytes)` for each record of a BPF_MAP_TYPE_RINGBUF map.

    libbpf consumes for as long as new records keep coming: where the traced calls come faster
    than `on_record` takes them, a poll would never return, and a caller could neither stop
    nor say what it is losing. So a poll or drain hands over at most BATCH records, then
    returns (the callback's negative return ends libbpf's loop, the record it was given
    already consumed); what is left waits for the next one."""

    BATCH = 4096

    def __init__(self, map_fd: int, on_record: Callable[[bytes], None]) -> None:
        self._taken = 0

        def sample(_ctx, data, size):
            on_record(ctypes.string_at(data, size))
            self._taken += 1
            return -1 if self._taken >= self.BATCH else 0

        self._cb = _SAMPLE_FN(sample)  # kept alive as long as libbpf may call it
        self._rb = libbpf().ring_buffer__new(map_fd, self._cb, None, None)
        if not self._rb:
            raise _fail("ring_buffer__new")

    def poll(self, timeout_ms: int) -> int:
        """Records handed over (at most BATCH), waiting up to `timeout_ms` for the first."""
        self._taken = 0
        n = libbpf().ring_buffer__poll(self._rb, timeout_ms)
        if n < 0 and self._taken >= self.BATCH:
            return self._taken
        if n < 0 and -n != errno.EINTR:
            raise _fail("ring_buffer__poll", n)
        return max(n, 0)

    def drain(self) -> int:
        """Records handed over (at most BATCH) of those there now, without waiting."""
        self._taken = 0
        n = libbpf().ring_buffer__consume(self._rb)
        return self._taken if n < 0 and self._taken >= self.BATCH else n

    def close(self) -> None:
        if self._rb:
            libbpf().ring_buffer__free(self._rb)
            self._rb = None

    def __enter__(self) -> RingBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def possible_cpus() -> int:
    n = libbpf().libbpf_num_possible_cpus()
    if n <= 0:
        raise _fail("counting the possible CPUs", -n)
    return n


def bpf_unavailable() -> str | None:
    """Why BPF uprobes cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (CAP_BPF and CAP_PERFMON)"
    try:
        libbpf()
    except BpfLoadError as e:
        return str(e)
    # Not the kernel's BTF: the programs here read by offsets, with no CO-RE relocation (Debian's
    # 686-pae 6.1 kernel runs them without one).
    # Root in a container may still be refused bpf(): load a trivial kprobe-type program.
    if libbpf().libbpf_probe_bpf_prog_type(_BPF_PROG_TYPE_KPROBE, None) != 1:
        return "the kernel refuses to load kprobe/uprobe BPF programs here"
    return None


def _probe_link(bpf_syscall: int, attach_type: int, kernel: bool) -> tuple[int, int]:
    """(errno, 0) of a link of `attach_type` for a trivial program on a kernel function, or
    a user file, that does not exist: ESRCH or ENOENT say the kernel looked the name up, so it
    has the link type. (0, errno) when the program itself was refused."""
    # r0 = 0; exit (the opcode is the first byte in either byte order)
    insns = ctypes.create_string_buffer(b"\xb7" + bytes(7) + b"\x95" + bytes(7), 16)
    license_ = ctypes.create_string_buffer(b"GPL")
    load = _ProgLoad(prog_type=_BPF_PROG_TYPE_KPROBE, insn_cnt=2,
                     insns=ctypes.addressof(insns), license=ctypes.addressof(license_),
                     expected_attach_type=attach_type)
    prog_fd = _sys_bpf(bpf_syscall, _BPF_PROG_LOAD, load)
    if prog_fd < 0:
        return 0, ctypes.get_errno()
    name = ctypes.create_string_buffer(b"btfgen_no_such_function" if kernel else
                                       b"/nonexistent/btfgen-no-such-file")
    try:
        if kernel:
            syms = (c_char_p * 1)(ctypes.cast(name, c_char_p))
            attr = _LinkCreateKprobeMulti(prog_fd=prog_fd, attach_type=attach_type, cnt=1,
                                          syms=ctypes.addressof(syms))
        else:
            offsets = (c_uint64 * 1)(0)
            attr = _LinkCreateUprobeMulti(prog_fd=prog_fd, attach_type=attach_type,
                                          path=ctypes.addressof(name),
                                          offsets=ctypes.addressof(offsets), cnt=1)
        fd = _sys_bpf(bpf_syscall, _BPF_LINK_CREATE, attr)
        err = ctypes.get_errno()
    finally:
        os.close(prog_fd)
    if fd >= 0:
        os.close(fd)
        return 0, 0
    return err, 0


def kprobe_multi_unavailable(bpf_syscall: int) -> str | None:
    """Why this kernel cannot make kprobe_multi links, or None when it can: a trivial program
    asks for a link on a function that does not exist, which only such a kernel looks up."""
    err, refused = _probe_link(bpf_syscall, BPF_TRACE_KPROBE_MULTI, kernel=True)
    if refused:
        return f"the kernel refuses to load a kprobe program: {os.strerror(refused)}"
    if err in (0, errno.ESRCH, errno.ENOENT):  # it looked the name up: the link type exists
        return None
    if err == errno.EOPNOTSUPP:
        return "this kernel has no kprobe_multi links (built without CONFIG_FPROBE)"
    if err in (errno.EPERM, errno.EACCES):
        return f"kprobe_multi links are not permitted here: {os.strerror(err)}"
    return (f"this kernel has no kprobe_multi links (they need Linux 5.18 or later with "
            f"CONFIG_FPROBE): {os.strerror(err)}")


def uprobe_multi_unavailable(bpf_syscall: int) -> str | None:
    """Why this kernel cannot make uprobe_multi links (Linux 6.6+), or None when it can: as
    kprobe_multi_unavailable, on a file that does not exist."""
    err, refused = _probe_link(bpf_syscall, BPF_TRACE_UPROBE_MULTI, kernel=False)
    if refused:
        return f"the kernel refuses to load a uprobe program: {os.strerror(refused)}"
    if err in (0, errno.ESRCH, errno.ENOENT):
        return None
    if err in (errno.EPERM, errno.EACCES):
        return f"uprobe_multi links are not permitted here: {os.strerror(err)}"
    return f"this kernel has no uprobe_multi links (Linux 6.6+): {os.strerror(err)}"


# Where the session kfuncs' prototypes changed: Linux 7.0 added the ctx argument.
SESSION_KFUNCS = ("bpf_session_cookie", "bpf_session_is_return")
_BTF_KIND_FUNC = 12


def session_kfuncs() -> tuple[str | None, str]:
    """("ctx" or "no_ctx": how this kernel declares the session kfuncs, ""), or (None, why
    it has none), from its BTF: a session program must declare them as the kernel does."""
    lib = libbpf()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return None, f"the kernel's BTF cannot be read: {os.strerror(ctypes.get_errno())}"
    try:
        arity = set()
        for name in SESSION_KFUNCS:
            func = lib.btf__find_by_name_kind(btf, name.encode(), _BTF_KIND_FUNC)
            if func <= 0:
                return None, f"this kernel has no {name} kfunc (Linux 6.10+)"
            # struct btf_type {name_off, info, type}: a FUNC's type is its prototype, whose
            # info holds its parameter count in the low 16 bits.
            proto = ctypes.cast(lib.btf__type_by_id(btf, func), POINTER(ctypes.c_uint32))[2]
            arity.add(ctypes.cast(lib.btf__type_by_id(btf, proto),
                                  POINTER(ctypes.c_uint32))[1] & 0xFFFF)
    finally:
        lib.btf__free(btf)
    if arity == {0}:
        return "no_ctx", ""
    if arity == {1}:
        return "ctx", ""
    return None, f"this kernel's session kfuncs take {sorted(arity)} arguments, not 0 or 1"


def session_unavailable(bpf_syscall: int, kernel: bool) -> str | None:
    """Why this kernel cannot run one program for entry and exit on one link (kprobe.session,
    Linux 6.10+; uprobe.session, 6.13+), or None when it can."""
    return session_support(bpf_syscall, kernel)[1] or None


def session_support(bpf_syscall: int, kernel: bool) -> tuple[str | None, str]:
    """(the session kfuncs' variant, as session_kfuncs says, "") where this kernel can make
    session links, else (None, why not)."""
    variant, why = session_kfuncs()
    if variant is None:
        return None, why
    kind = "kprobe" if kernel else "uprobe"
    err, refused = _probe_link(bpf_syscall, BPF_TRACE_KPROBE_SESSION if kernel else
                               BPF_TRACE_UPROBE_SESSION, kernel)
    if refused:
        return None, f"the kernel refuses a {kind}.session program: {os.strerror(refused)}"
    if err in (0, errno.ESRCH, errno.ENOENT):
        return variant, ""
    if err == errno.EOPNOTSUPP:
        return None, (f"this kernel has no {kind}.session links (built without "
                      f"{'CONFIG_FPROBE' if kernel else 'CONFIG_UPROBES'}, or a 32-bit one)")
    if err in (errno.EPERM, errno.EACCES):
        return None, f"{kind}.session links are not permitted here: {os.strerror(err)}"
    since = "6.10" if kernel else "6.13"
    return None, f"this kernel has no {kind}.session links (Linux {since}+): {os.strerror(err)}"


def kprobes_unavailable() -> str | None:
    """Why this kernel cannot make kprobe links, or None: libbpf needs the kprobe PMU, or
    tracefs's kprobe_events for its legacy way."""
    if os.path.exists("/sys/bus/event_source/devices/kprobe/type"):
        return None
    if os.path.exists(os.path.join(TRACEFS, "kprobe_events")):
        return None
    return "this kernel has no kprobes either (no kprobe PMU, no kprobe_events)"


def mount_tracefs() -> None:
    """libbpf creates uprobes through perf_event_open, but falls back to tracefs; mount it."""
    if os.path.ismount(TRACEFS):
        return
    rc = os.system(f"mount -t tracefs nodev {TRACEFS} 2>/dev/null")
    if rc and not os.path.ismount(TRACEFS):
        raise BpfLoadError(f"cannot mount tracefs on {TRACEFS}")
