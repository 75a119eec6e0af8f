"""A BPF object through libbpf: open, size its maps, load, fill and read maps, and attach its
programs (uprobes and kprobes one function a link, through libbpf; kprobe_multi and
uprobe_multi links, as pairs or one session link, through the raw syscall), each link kept
for close().

    obj = BpfObject("trace.bpf.o", bpf_syscall=manifest.bpf_syscall)
    obj.load()
    link = obj.attach_uprobe("on_entry", "/usr/bin/prog", "parse")
    with RingBuffer(obj.map_fd("events"), lambda raw: print(raw.hex())) as rb:
        rb.poll(100)
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Sequence
from ctypes import c_char_p, c_uint64

from . import features, syscall
from .errors import BpfLoadError
from .libbpf import KprobeOpts, UprobeOpts, fail, jit_off, libbpf, log
from .links import FdLink, LibbpfLink
from .syscall import (
    BPF_F_KPROBE_MULTI_RETURN,
    BPF_F_UPROBE_MULTI_RETURN,
    BPF_LINK_CREATE,
    BPF_PROG_LOAD,
    BPF_TRACE_KPROBE_MULTI,
    BPF_TRACE_KPROBE_SESSION,
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
    BPF_PROG_TYPE_TRACING,
    LinkCreateKprobeMulti,
    LinkCreateTracing,
    LinkCreateTracingMulti,
    LinkCreateUprobeMulti,
    ProgLoadAttach,
    sys_bpf,
)


class BpfObject:
    def __init__(self, path: str, *, bpf_syscall: int) -> None:
        """`bpf_syscall`: the bpf() syscall's number on this machine."""
        lib = libbpf()
        self.path = path
        self.bpf_syscall = bpf_syscall
        self._obj = lib.bpf_object__open_file(path.encode(), None)
        if not self._obj:
            raise fail(f"{path}: libbpf could not open the object")
        self.links: list[LibbpfLink | FdLink] = []
        self.companions: list[BpfObject] = []
        self.clones: list[int] = []  # load_clone's program fds

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
            raise fail(f"{self.path}: {name}: cannot set expected attach type")

    def expect_tracing(self, name: str, attach_type: int, target: str | None = None) -> None:
        """Call before load() for a program to run on the BPF trampoline: type TRACING, of
        `attach_type` (syscall.BPF_TRACE_*), on kernel function `target` (an fsession), or,
        without one, on the multi placeholder (attach_btf_id 0: the kernel names
        bpf_multi_func) for attach_tracing_multi. Its section is a plain one (libbpf 1.1 knows
        no fsession or .multi sections); libbpf loads it with these set, and the link is made
        here."""
        prog = self.program(name)
        lib = libbpf()
        if lib.bpf_program__set_type(prog, BPF_PROG_TYPE_TRACING):
            raise fail(f"{self.path}: {name}: cannot set the program type")
        self._expect(name, attach_type)
        if target is not None and lib.bpf_program__set_attach_target(prog, 0, target.encode()):
            raise fail(f"{self.path}: {name}: no kernel function {target} in the kernel's BTF",
                       -ctypes.get_errno())

    def share_maps(self, other: BpfObject, names: Sequence[str]) -> None:
        """Before load(): this object's maps `names` are `other`'s (loaded) own: a second
        object of the same run (the kprobe link of what the trampoline cannot take, or one
        fsession program a function) writes to the same ring and reads the same settings."""
        lib = libbpf()
        for name in names:
            m = lib.bpf_object__find_map_by_name(self._obj, name.encode())
            if not m or lib.bpf_map__reuse_fd(m, other.map_fd(name)):
                raise fail(f"{self.path}: cannot share map {name}")

    def set_autoload(self, name: str, on: bool) -> None:
        libbpf().bpf_program__set_autoload(self.program(name), on)

    def set_max_entries(self, map_name: str, n: int) -> None:
        """Before load(): a map's size (a ring buffer's, in bytes: a power of two pages)."""
        m = libbpf().bpf_object__find_map_by_name(self._obj, map_name.encode())
        if not m or libbpf().bpf_map__set_max_entries(m, n):
            raise fail(f"{self.path}: cannot size map {map_name} to {n}")

    def missed(self, programs: Sequence[str]) -> int:
        """Calls the kernel counted as missed: each program's runs skipped because another BPF
        program was running on that CPU (recursion_misses, 5.12+), and each kprobe_multi link's
        calls fprobe could not deliver (6.7+). Older kernels count neither, and say 0."""
        total = 0
        for other in self.companions:
            # their programs' misses (their links are in self.links: counted below)
            total += other.missed([p for p in ("trace_session", "trace_entry", "trace_exit")
                                   if other.has_program(p)]) - other.links_missed()
        for name in programs:
            fd = libbpf().bpf_program__fd(self.program(name))
            info = syscall.info(self.bpf_syscall, fd, syscall.PROG_INFO_SIZE) if fd >= 0 else None
            if info:
                total += int.from_bytes(info[syscall.PROG_RECURSION_MISSES:][:8],
                                        syscall.BYTE_ORDER)
        for fd in self.clones:
            info = syscall.info(self.bpf_syscall, fd, syscall.PROG_INFO_SIZE)
            if info:
                total += int.from_bytes(info[syscall.PROG_RECURSION_MISSES:][:8],
                                        syscall.BYTE_ORDER)
        return total + self.links_missed()

    def links_missed(self) -> int:
        """The calls this object's kprobe_multi links missed (6.7+; else 0)."""
        total = 0
        for link in self.links:
            if isinstance(link, FdLink) and link.kprobe_multi and link.fd >= 0:
                info = syscall.info(self.bpf_syscall, link.fd, syscall.LINK_INFO_SIZE)
                if info:
                    total += int.from_bytes(info[syscall.KPROBE_MULTI_MISSED:][:8],
                                            syscall.BYTE_ORDER)
        return total

    def has_program(self, name: str) -> bool:
        return bool(libbpf().bpf_object__find_program_by_name(self._obj, name.encode()))

    def load(self) -> None:
        log.clear()
        err = libbpf().bpf_object__load(self._obj)
        if err:
            raise fail(f"{self.path}: loading failed{jit_off()}", err)

    def has_map(self, name: str) -> bool:
        return bool(libbpf().bpf_object__find_map_by_name(self._obj, name.encode()))

    def map_fd(self, name: str) -> int:
        m = libbpf().bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise BpfLoadError(f"{self.path}: no map {name!r}")
        return libbpf().bpf_map__fd(m)

    def update(self, map_name: str, key: bytes, value: bytes) -> None:
        k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(value,
                                                                                       len(value))
        if libbpf().bpf_map_update_elem(self.map_fd(map_name), k, v, 0):
            raise fail(f"{self.path}: updating map {map_name}")

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
                raise fail(f"{self.path}: updating map {map_name} ({count} entries)", err)
        for i in range(count):
            self.update(map_name, i.to_bytes(4, sys.byteorder), values[i * size:(i + 1) * size])

    def lookup(self, map_name: str, key: bytes, size: int) -> bytes:
        """The value at `key`: `size` bytes (for a per-CPU map, every possible CPU's value,
        each padded to 8 bytes)."""
        k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(size)
        if libbpf().bpf_map_lookup_elem(self.map_fd(map_name), k, v):
            raise fail(f"{self.path}: reading map {map_name}")
        return v.raw

    def attach_uprobe(self, prog: str, binary: str, func: str, *, retprobe: bool = False,
                      cookie: int = 0, pid: int = -1, offset: int | None = None) -> LibbpfLink:
        """One uprobe (or uretprobe) link for `prog` on `func` of `binary`, with a BPF cookie
        (Linux 5.15+); `offset` (its file offset) spares libbpf looking the name up."""
        opts = UprobeOpts(sz=ctypes.sizeof(UprobeOpts), bpf_cookie=cookie, retprobe=retprobe,
                           func_name=None if offset is not None else func.encode())
        log.clear()
        link = libbpf().bpf_program__attach_uprobe_opts(self.program(prog), pid,
                                                        os.path.abspath(binary).encode(),
                                                        offset if offset is not None else 0,
                                                        ctypes.byref(opts))
        if not link:
            raise fail(f"{'uretprobe' if retprobe else 'uprobe'} on {binary}:{func}",
                        -ctypes.get_errno())
        self.links.append(LibbpfLink(link))
        return self.links[-1]

    def attach_uprobe_multi(self, prog: str, binary: str, funcs: Sequence[str],
                            cookies: Sequence[int], *, retprobe: bool = False,
                            offsets: Sequence[int], pid: int = 0,
                            session: bool = False) -> FdLink:
        """One link for `prog` on every function of `funcs` of `binary`, each with its cookie
        and at its file offset (the build reads the symbols: this side cannot). session=True:
        entry and exit (the program loaded with expect_uprobe_multi(session=True))."""
        n = len(funcs)
        path = ctypes.create_string_buffer(os.path.abspath(binary).encode())
        offsets = (c_uint64 * n)(*offsets)
        cooks = (c_uint64 * n)(*cookies)
        attr = LinkCreateUprobeMulti(
            prog_fd=libbpf().bpf_program__fd(self.program(prog)),
            attach_type=BPF_TRACE_UPROBE_SESSION if session else BPF_TRACE_UPROBE_MULTI,
            path=ctypes.addressof(path), offsets=ctypes.addressof(offsets),
            cookies=ctypes.addressof(cooks), cnt=n,
            um_flags=BPF_F_UPROBE_MULTI_RETURN if retprobe else 0, pid=pid)
        fd = sys_bpf(self.bpf_syscall, BPF_LINK_CREATE, attr)
        if fd < 0:
            raise fail(f"uprobe_{'session' if session else 'multi'} link for {prog} on "
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
        attr = LinkCreateKprobeMulti(
            prog_fd=libbpf().bpf_program__fd(self.program(prog)),
            attach_type=BPF_TRACE_KPROBE_SESSION if session else BPF_TRACE_KPROBE_MULTI,
            km_flags=BPF_F_KPROBE_MULTI_RETURN if retprobe else 0, cnt=n,
            syms=ctypes.addressof(syms), cookies=ctypes.addressof(cooks))
        fd = sys_bpf(self.bpf_syscall, BPF_LINK_CREATE, attr)
        if fd < 0:
            err = ctypes.get_errno()
            links = (features.session_links(self.bpf_syscall, kernel=True) if session else
                     features.kprobe_multi_links(self.bpf_syscall))
            if not links:
                raise BpfLoadError(links.why)
            kind = "kprobe.session" if session else \
                f"{'kretprobe' if retprobe else 'kprobe'}.multi"
            raise fail(f"{kind} link for {prog} ({n} kernel functions)", err)
        self.links.append(FdLink(fd, kprobe_multi=True))
        return self.links[-1]

    def attach_tracing_multi(self, prog: str, btf_ids: Sequence[int], cookies: Sequence[int],
                             attach_type: int, what: str) -> FdLink:
        """One tracing_multi link (Linux 7.2) for `prog` (loaded with expect_tracing, no
        target) on the kernel functions of `btf_ids` (FUNC ids in the BTF it was loaded
        against), each with its cookie. `what`: the link, for the message of a refusal."""
        return self.attach_tracing_multi_fd(libbpf().bpf_program__fd(self.program(prog)),
                                            btf_ids, cookies, attach_type,
                                            f"{what} link for {prog}")

    def load_clone(self, name: str, attach_type: int, btf_obj_fd: int) -> int:
        """Program `name` of this loaded object loaded once more, with bpf() (libbpf 1.1 cannot
        set a program's BTF object without a target), as a TRACING program of `attach_type`
        against the kernel BTF object `btf_obj_fd` (a module's) with no target (the multi
        placeholder): a tracing_multi link takes the ids of the BTF its program was loaded
        against. Its instructions are libbpf's as loaded (the maps' fds in them: the same maps);
        its fd, for attach_tracing_multi, is closed with this object."""
        lib = libbpf()
        prog = self.program(name)
        count, insns = lib.bpf_program__insn_cnt(prog), lib.bpf_program__insns(prog)
        if not count or not insns:
            raise BpfLoadError(f"{self.path}: {name}: libbpf kept no instructions to load again")
        gpl = ctypes.create_string_buffer(b"GPL")
        attr = ProgLoadAttach(prog_type=BPF_PROG_TYPE_TRACING, insn_cnt=count, insns=insns,
                              license=ctypes.addressof(gpl), prog_name=name[:15].encode(),
                              expected_attach_type=attach_type, attach_btf_obj_fd=btf_obj_fd)
        fd = sys_bpf(self.bpf_syscall, BPF_PROG_LOAD, attr)
        if fd < 0:
            err = ctypes.get_errno()
            # again with the verifier's log, for its last lines
            text = ctypes.create_string_buffer(1 << 20)
            attr.log_level, attr.log_size, attr.log_buf = 1, len(text), ctypes.addressof(text)
            fd = sys_bpf(self.bpf_syscall, BPF_PROG_LOAD, attr)
            if fd < 0:
                said = "\n".join(text.value.decode(errors="replace").splitlines()[-5:])
                raise BpfLoadError(f"{name} loaded against the module's BTF: "
                                   f"{os.strerror(err)}" + (f"\n{said}" if said else ""), err)
        self.clones.append(fd)
        return fd

    def attach_tracing_multi_fd(self, prog_fd: int, btf_ids: Sequence[int],
                                cookies: Sequence[int], attach_type: int, what: str) -> FdLink:
        """attach_tracing_multi for a program fd (load_clone's). `what`: the link, whole."""
        n = len(btf_ids)
        ids = (ctypes.c_uint32 * n)(*btf_ids)
        cooks = (c_uint64 * n)(*cookies)
        attr = LinkCreateTracingMulti(prog_fd=prog_fd, attach_type=attach_type,
                                      ids=ctypes.addressof(ids),
                                      cookies=ctypes.addressof(cooks), cnt=n)
        fd = sys_bpf(self.bpf_syscall, BPF_LINK_CREATE, attr)
        if fd < 0:
            raise fail(f"{what} ({n} kernel functions)", ctypes.get_errno())
        self.links.append(FdLink(fd))
        return self.links[-1]

    def attach_tracing(self, prog: str, attach_type: int, cookie: int, what: str) -> FdLink:
        """The link of `prog`, loaded with expect_tracing on its one function, with a BPF
        cookie: an fsession's (libbpf 1.1 makes its links without one)."""
        attr = LinkCreateTracing(prog_fd=libbpf().bpf_program__fd(self.program(prog)),
                                 attach_type=attach_type, cookie=cookie)
        fd = sys_bpf(self.bpf_syscall, BPF_LINK_CREATE, attr)
        if fd < 0:
            raise fail(f"{what} link for {prog}", ctypes.get_errno())
        self.links.append(FdLink(fd))
        return self.links[-1]

    def attach_kprobe(self, prog: str, func: str, cookie: int, *,
                      retprobe: bool = False) -> LibbpfLink:
        """One kprobe (or kretprobe) link for `prog` on kernel function `func`, with a BPF
        cookie (Linux 5.15+): where kprobe_multi links are missing or broken."""
        opts = KprobeOpts(sz=ctypes.sizeof(KprobeOpts), bpf_cookie=cookie, retprobe=retprobe)
        log.clear()
        link = libbpf().bpf_program__attach_kprobe_opts(self.program(prog), func.encode(),
                                                        ctypes.byref(opts))
        if not link:
            raise fail(f"{'kretprobe' if retprobe else 'kprobe'} on {func}",
                        -ctypes.get_errno())
        self.links.append(LibbpfLink(link))
        return self.links[-1]

    def attach(self, prog: str) -> LibbpfLink:
        """Attach where the program's section says (tracepoint/CATEGORY/NAME, ...)."""
        link = libbpf().bpf_program__attach(self.program(prog))
        if not link:
            raise fail(f"attaching {prog}")
        self.links.append(LibbpfLink(link))
        return self.links[-1]

    def close(self) -> None:
        for link in reversed(self.links):
            link.destroy()
        self.links.clear()
        # the objects that share this one's maps (share_maps), their links already in ours
        for other in reversed(self.companions):
            other.close()
        self.companions.clear()
        for fd in self.clones:
            os.close(fd)
        self.clones.clear()
        if self._obj:
            libbpf().bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

