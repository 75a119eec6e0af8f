"""What this kernel has, probed before anything is attached (as cilium/ebpf's features/ and
bpftrace's bpffeature): BPF programs at all, kprobe_multi and uprobe_multi links, session
links and the prototype of their kfuncs, the trampoline's links, sleepable uprobe programs in
each user attach mode, kprobes, whether kprobe_multi links hand their programs the right
cookies, and whether it counts missed calls. Each probe answers with an Availability (true where the kernel has it;
else why not, in words for the user), asked once a process: a kernel does not gain or lose a
feature while it is traced.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
from ctypes import POINTER, c_char_p, c_uint64
from dataclasses import dataclass
from functools import cache

from .errors import BpfLoadError
from .libbpf import libbpf
from .syscall import (
    BPF_LINK_CREATE,
    BPF_MAP_CREATE,
    BPF_MAP_LOOKUP_ELEM,
    BPF_MAP_TYPE_ARRAY,
    BPF_PROG_LOAD,
    BPF_PROG_TYPE_KPROBE,
    BPF_PROG_TYPE_TRACING,
    BPF_TRACE_FENTRY_MULTI,
    BPF_TRACE_FSESSION_MULTI,
    BPF_TRACE_KPROBE_MULTI,
    BPF_TRACE_KPROBE_SESSION,
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
    BPF_F_SLEEPABLE,
    LinkCreateKprobeMulti,
    LinkCreateTracingMulti,
    LinkCreateUprobeMulti,
    MapCreate,
    MapElem,
    ProgLoad,
    ProgLoadAttach,
    sys_bpf,
)
from .tracefs import TRACEFS


@dataclass(frozen=True)
class Availability:
    """A probe's answer: true where the kernel has the feature, else false and `why` not (never
    empty then). `variant`: which kind of it the kernel has, where the feature comes in more
    than one (the session kfuncs' "ctx" or "no_ctx"; "fsession_multi" or "fentry_multi")."""

    why: str = ""
    variant: str = ""

    def __post_init__(self) -> None:
        if self.why and self.variant:
            raise ValueError("an unavailable feature has no variant")

    def __bool__(self) -> bool:
        return not self.why


AVAILABLE = Availability()


@cache
def bpf_programs() -> Availability:
    """Whether BPF uprobe and kprobe programs can be used here."""
    if os.geteuid() != 0:
        return Availability("needs root (CAP_BPF and CAP_PERFMON)")
    try:
        libbpf()
    except BpfLoadError as e:
        return Availability(str(e))
    # Not the kernel's BTF: the programs here read by offsets, with no CO-RE relocation (Debian's
    # 686-pae 6.1 kernel runs them without one).
    # Root in a container may still be refused bpf(): load a trivial kprobe-type program.
    if libbpf().libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_KPROBE, None) != 1:
        return Availability("the kernel refuses to load kprobe/uprobe BPF programs here")
    return AVAILABLE


def _probe_link(bpf_syscall: int, attach_type: int, kernel: bool,
                flags: int = 0) -> tuple[int, int]:
    """(errno, 0) of a link of `attach_type` for a trivial program (loaded with prog_flags
    `flags`) on a kernel function, or a user file, that does not exist: ESRCH or ENOENT say
    the kernel looked the name up, so it has the link type. (0, errno) when the program itself
    was refused."""
    # r0 = 0; exit (the opcode is the first byte in either byte order)
    insns = ctypes.create_string_buffer(b"\xb7" + bytes(7) + b"\x95" + bytes(7), 16)
    license_ = ctypes.create_string_buffer(b"GPL")
    load = ProgLoad(prog_type=BPF_PROG_TYPE_KPROBE, insn_cnt=2,
                     insns=ctypes.addressof(insns), license=ctypes.addressof(license_),
                     expected_attach_type=attach_type, prog_flags=flags)
    prog_fd = sys_bpf(bpf_syscall, BPF_PROG_LOAD, load)
    if prog_fd < 0:
        return 0, ctypes.get_errno()
    if not attach_type:  # a single probe's: the load was the question
        os.close(prog_fd)
        return 0, 0
    name = ctypes.create_string_buffer(b"btfgen_no_such_function" if kernel else
                                       b"/nonexistent/btfgen-no-such-file")
    try:
        if kernel:
            syms = (c_char_p * 1)(ctypes.cast(name, c_char_p))
            attr = LinkCreateKprobeMulti(prog_fd=prog_fd, attach_type=attach_type, cnt=1,
                                          syms=ctypes.addressof(syms))
        else:
            offsets = (c_uint64 * 1)(0)
            attr = LinkCreateUprobeMulti(prog_fd=prog_fd, attach_type=attach_type,
                                          path=ctypes.addressof(name),
                                          offsets=ctypes.addressof(offsets), cnt=1)
        fd = sys_bpf(bpf_syscall, BPF_LINK_CREATE, attr)
        err = ctypes.get_errno()
    finally:
        os.close(prog_fd)
    if fd >= 0:
        os.close(fd)
        return 0, 0
    return err, 0


@cache
def kprobe_multi_links(bpf_syscall: int) -> Availability:
    """Whether this kernel makes kprobe_multi links: a trivial program asks for a link on a
    function that does not exist, which only such a kernel looks up."""
    err, refused = _probe_link(bpf_syscall, BPF_TRACE_KPROBE_MULTI, kernel=True)
    if refused:
        return Availability(f"the kernel refuses to load a kprobe program: "
                            f"{os.strerror(refused)}")
    if err in (0, errno.ESRCH, errno.ENOENT):  # it looked the name up: the link type exists
        return AVAILABLE
    if err == errno.EOPNOTSUPP:
        return Availability("this kernel has no kprobe_multi links (built without "
                            "CONFIG_FPROBE)")
    if err in (errno.EPERM, errno.EACCES):
        return Availability(f"kprobe_multi links are not permitted here: {os.strerror(err)}")
    return Availability(f"this kernel has no kprobe_multi links (they need Linux 5.18 or later "
                        f"with CONFIG_FPROBE): {os.strerror(err)}")


@cache
def uprobe_multi_links(bpf_syscall: int) -> Availability:
    """Whether this kernel makes uprobe_multi links (Linux 6.6+): as kprobe_multi_links, on a
    file that does not exist."""
    err, refused = _probe_link(bpf_syscall, BPF_TRACE_UPROBE_MULTI, kernel=False)
    if refused:
        return Availability(f"the kernel refuses to load a uprobe program: "
                            f"{os.strerror(refused)}")
    if err in (0, errno.ESRCH, errno.ENOENT):
        return AVAILABLE
    if err in (errno.EPERM, errno.EACCES):
        return Availability(f"uprobe_multi links are not permitted here: {os.strerror(err)}")
    return Availability(f"this kernel has no uprobe_multi links (Linux 6.6+): "
                        f"{os.strerror(err)}")


# The system call handlers kprobe_multi_cookies links on, by each arch's name for them (its
# syscall wrapper's prefix: x86_64, i386, arm64, riscv64, s390x; plain on ppc64, arm, loongarch):
# the first pair the kernel finds is taken. Called from here, deterministically, with no
# arguments and no side effect.
COOKIE_PROBE_PREFIXES = ("__x64_sys_", "__arm64_sys_", "__riscv_sys_", "__s390x_sys_",
                         "__ia32_sys_", "sys_")
COOKIE_PROBE_CALLS = (("getpid", os.getpid), ("getppid", os.getppid))
_COOKIE_SLOTS = 4  # the cookies seen: 0 (none found), 1, 2, anything else


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One BPF instruction in this machine's byte order (struct bpf_insn: its register
    nibbles are a bitfield, dst_reg first in the byte's low bits on a little-endian machine)."""
    regs = dst | src << 4 if sys.byteorder == "little" else dst << 4 | src
    return struct.pack("=BBhi", code, regs, off, imm)


def _cookie_program(map_fd: int) -> bytes:
    """map[slot] = 1, slot the cookie bpf_get_attach_cookie gives (1 or 2 where the kernel
    finds the function's; 0 where it finds none; 3 anything else)."""
    return b"".join((
        _insn(0x85, imm=174),                       # r0 = bpf_get_attach_cookie(ctx)
        _insn(0xb5, dst=0, off=1, imm=2),           # if r0 <= 2 goto +1
        _insn(0xb7, dst=0, imm=3),                  # r0 = 3
        _insn(0x63, dst=10, src=0, off=-4),         # *(u32 *)(r10 - 4) = r0: the key
        _insn(0x7a, dst=10, off=-16, imm=1),        # *(u64 *)(r10 - 16) = 1: the value
        _insn(0x18, dst=1, src=1, imm=map_fd),      # r1 = the map (ld_imm64, pseudo map fd)
        _insn(0x00),
        _insn(0xbf, dst=2, src=10),                 # r2 = r10 - 4
        _insn(0x07, dst=2, imm=-4),
        _insn(0xbf, dst=3, src=10),                 # r3 = r10 - 16
        _insn(0x07, dst=3, imm=-16),
        _insn(0xb7, dst=4),                         # r4 = BPF_ANY
        _insn(0x85, imm=2),                         # bpf_map_update_elem(r1, r2, r3, r4)
        _insn(0xb7, dst=0),                         # return 0
        _insn(0x95),
    ))


def _cookie_link(bpf_syscall: int, prog_fd: int) -> tuple[int, str]:
    """(a kprobe_multi link of `prog_fd` on the getpid and getppid handlers with cookies 1 and
    2, "") or (-1, why not)."""
    cookies = (c_uint64 * 2)(1, 2)
    err = 0
    for prefix in COOKIE_PROBE_PREFIXES:
        names = [ctypes.create_string_buffer(f"{prefix}{call}".encode())
                 for call, _ in COOKIE_PROBE_CALLS]
        syms = (c_char_p * 2)(*(ctypes.cast(n, c_char_p) for n in names))
        attr = LinkCreateKprobeMulti(prog_fd=prog_fd, attach_type=BPF_TRACE_KPROBE_MULTI,
                                     cnt=2, syms=ctypes.addressof(syms),
                                     cookies=ctypes.addressof(cookies))
        fd = sys_bpf(bpf_syscall, BPF_LINK_CREATE, attr)
        if fd >= 0:
            return fd, ""
        err = ctypes.get_errno()
        if err not in (errno.ESRCH, errno.ENOENT):  # found, and refused
            return -1, (f"the kernel refuses a kprobe_multi link on {prefix}getpid: "
                        f"{os.strerror(err)}")
    return -1, ("no getpid and getppid system call handlers found under the names "
                f"{', '.join(p + 'getpid' for p in COOKIE_PROBE_PREFIXES)}")


@cache
def kprobe_multi_cookies(bpf_syscall: int) -> Availability:
    """Whether this kernel's kprobe_multi links (kprobe.session links too: the same link)
    hand each function's program its own cookie: a program on a link over the getpid and
    getppid handlers, with cookies 1 and 2, notes the cookies it sees while both are called
    from here. Debian's 7.2.13 ppc64el kernel hands it 0 in every function (the lookup by
    address finds none; likely ppc64's two entry points a function), which a trace would read
    as its first function's. What it cannot tell is the two cookies swapped
    (other processes' calls of the two land in the same slots, so the slots are not read after
    each call). Asked only where kprobe_multi links exist; a kernel where the check itself
    cannot be made is not trusted either."""
    why = "kprobe_multi links are not used here: their cookies could not be checked: "
    attr = MapCreate(map_type=BPF_MAP_TYPE_ARRAY, key_size=4, value_size=8,
                     max_entries=_COOKIE_SLOTS)
    map_fd = sys_bpf(bpf_syscall, BPF_MAP_CREATE, attr)
    if map_fd < 0:
        return Availability(f"{why}no array map: {os.strerror(ctypes.get_errno())}")
    try:
        code = _cookie_program(map_fd)
        insns = ctypes.create_string_buffer(code, len(code))
        license_ = ctypes.create_string_buffer(b"GPL")
        load = ProgLoad(prog_type=BPF_PROG_TYPE_KPROBE, insn_cnt=len(code) // 8,
                        insns=ctypes.addressof(insns), license=ctypes.addressof(license_),
                        expected_attach_type=BPF_TRACE_KPROBE_MULTI)
        prog_fd = sys_bpf(bpf_syscall, BPF_PROG_LOAD, load)
        if prog_fd < 0:
            return Availability(f"{why}the kernel refuses the program: "
                                f"{os.strerror(ctypes.get_errno())}")
        try:
            link, refused = _cookie_link(bpf_syscall, prog_fd)
        finally:
            os.close(prog_fd)  # the link holds the program
        if link < 0:
            return Availability(why + refused)
        try:
            for _, call in COOKIE_PROBE_CALLS:
                call()
        finally:
            os.close(link)
        seen = []
        for slot in range(_COOKIE_SLOTS):
            key, value = ctypes.c_uint32(slot), c_uint64(0)
            lookup = MapElem(map_fd=map_fd, key=ctypes.addressof(key),
                             value=ctypes.addressof(value))
            if sys_bpf(bpf_syscall, BPF_MAP_LOOKUP_ELEM, lookup) < 0:
                return Availability(f"{why}{os.strerror(ctypes.get_errno())}")
            if value.value:
                seen.append(slot)
    finally:
        os.close(map_fd)
    if seen == [1, 2]:
        return AVAILABLE
    said = {0: "0 (none)", 3: "another"}
    return Availability("this kernel's kprobe_multi links hand their programs the wrong "
                        "cookie (a link on getpid and getppid with cookies 1 and 2: its "
                        f"program saw {', '.join(said.get(s, str(s)) for s in seen) or 'none'})"
                        ": each call would be read as another function's")


# Where the session kfuncs' prototypes changed: Linux 7.0 added the ctx argument.
SESSION_KFUNCS = ("bpf_session_cookie", "bpf_session_is_return")
_BTF_KIND_FUNC = 12


@cache
def session_kfuncs() -> Availability:
    """Whether this kernel has the session kfuncs, and how it declares them (the variant:
    "ctx" or "no_ctx"), from its BTF: a session program must declare them as the kernel
    does."""
    lib = libbpf()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return Availability(f"the kernel's BTF cannot be read: "
                            f"{os.strerror(ctypes.get_errno())}")
    try:
        arity = set()
        for name in SESSION_KFUNCS:
            func = lib.btf__find_by_name_kind(btf, name.encode(), _BTF_KIND_FUNC)
            if func <= 0:
                return Availability(f"this kernel has no {name} kfunc (Linux 6.10+)")
            # struct btf_type {name_off, info, type}: a FUNC's type is its prototype, whose
            # info holds its parameter count in the low 24 bits (16 before the BTF of 2026).
            proto = ctypes.cast(lib.btf__type_by_id(btf, func), POINTER(ctypes.c_uint32))[2]
            arity.add(ctypes.cast(lib.btf__type_by_id(btf, proto),
                                  POINTER(ctypes.c_uint32))[1] & 0xFFFFFF)
    finally:
        lib.btf__free(btf)
    if arity == {0}:
        return Availability(variant="no_ctx")
    if arity == {1}:
        return Availability(variant="ctx")
    return Availability(f"this kernel's session kfuncs take {sorted(arity)} arguments, not 0 "
                        "or 1")


@cache
def session_links(bpf_syscall: int, kernel: bool) -> Availability:
    """Whether this kernel runs one program for entry and exit on one link (kprobe.session,
    Linux 6.10+; uprobe.session, 6.13+), with the session kfuncs' variant (session_kfuncs)."""
    kfuncs = session_kfuncs()
    if not kfuncs:
        return kfuncs
    kind = "kprobe" if kernel else "uprobe"
    err, refused = _probe_link(bpf_syscall, BPF_TRACE_KPROBE_SESSION if kernel else
                               BPF_TRACE_UPROBE_SESSION, kernel)
    if refused:
        return Availability(f"the kernel refuses a {kind}.session program: "
                            f"{os.strerror(refused)}")
    if err in (0, errno.ESRCH, errno.ENOENT):
        return kfuncs
    if err == errno.EOPNOTSUPP:
        return Availability(f"this kernel has no {kind}.session links (built without "
                            f"{'CONFIG_FPROBE' if kernel else 'CONFIG_UPROBES'}, or a 32-bit "
                            "one)")
    if err in (errno.EPERM, errno.EACCES):
        return Availability(f"{kind}.session links are not permitted here: {os.strerror(err)}")
    since = "6.10" if kernel else "6.13"
    return Availability(f"this kernel has no {kind}.session links (Linux {since}+): "
                        f"{os.strerror(err)}")


# The trampoline's attach types by their names in enum bpf_attach_type, as the build reads
# them from the target's BTF (btfgen.trace.build) and this side from the running kernel's.
TRAMPOLINE_ATTACH_TYPES = ("BPF_TRACE_FSESSION", "BPF_TRACE_FENTRY_MULTI",
                           "BPF_TRACE_FEXIT_MULTI", "BPF_TRACE_FSESSION_MULTI")
_BTF_KIND_ENUM = 6


@cache
def _kernel_attach_types() -> tuple[frozenset[str] | None, str]:
    """(the names of enum bpf_attach_type in this kernel's BTF, "") or (None, why not): an
    attach type the kernel's UAPI lacks is one it cannot take. (The enum is the same on every
    arch: whether this arch's JIT builds the trampoline the probes below find out.) Not a
    probe's answer but what two of them read: a set of names."""
    lib = libbpf()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return None, f"the kernel's BTF cannot be read: {os.strerror(ctypes.get_errno())}"
    try:
        enum = lib.btf__find_by_name_kind(btf, b"bpf_attach_type", _BTF_KIND_ENUM)
        if enum <= 0:
            return None, "the kernel's BTF has no enum bpf_attach_type"
        # struct btf_type {name_off, info, size}, then vlen struct btf_enum {name_off, val}
        head = ctypes.cast(lib.btf__type_by_id(btf, enum), POINTER(ctypes.c_uint32))
        vlen = head[1] & 0xFFFFFF
        names = frozenset(lib.btf__name_by_offset(btf, head[3 + 2 * i]).decode()
                          for i in range(vlen))
    finally:
        lib.btf__free(btf)
    return names, ""


def _tracing_prog_refused(bpf_syscall: int, attach_type: int, btf_id: int = 0) -> int:
    """0 where this kernel loads a trivial TRACING program of `attach_type` on the multi
    placeholder (attach_btf_id 0: the kernel names bpf_multi_func itself) and, given a kernel
    function's `btf_id`, links it there; else the errno."""
    insns = ctypes.create_string_buffer(b"\xb7" + bytes(7) + b"\x95" + bytes(7), 16)
    license_ = ctypes.create_string_buffer(b"GPL")
    load = ProgLoadAttach(prog_type=BPF_PROG_TYPE_TRACING, insn_cnt=2,
                          insns=ctypes.addressof(insns), license=ctypes.addressof(license_),
                          expected_attach_type=attach_type)
    fd = sys_bpf(bpf_syscall, BPF_PROG_LOAD, load)
    if fd < 0:
        return ctypes.get_errno()
    err = 0
    if btf_id:
        # Debian's 7.2.13 arm64 kernel loads the program and refuses the link: EOPNOTSUPP.
        ids = (ctypes.c_uint32 * 1)(btf_id)
        cookies = (c_uint64 * 1)(0)
        attr = LinkCreateTracingMulti(prog_fd=fd, attach_type=attach_type,
                                      ids=ctypes.addressof(ids),
                                      cookies=ctypes.addressof(cookies), cnt=1)
        link = sys_bpf(bpf_syscall, BPF_LINK_CREATE, attr)
        err = ctypes.get_errno() if link < 0 else 0
        if link >= 0:
            os.close(link)
    os.close(fd)
    return err


@cache
def tracing_multi_links(bpf_syscall: int, btf_id: int = 0,
                        pair_only: bool = False) -> Availability:
    """Whether this kernel makes tracing_multi links, and which (the variant: "fsession_multi",
    one fsession.multi link, or "fentry_multi", an fentry.multi and an fexit.multi link): its
    BTF names the attach type, and it loads a program of that type and (given a function it
    takes: `btf_id`) links it there (an arch whose JIT has no multi trampoline refuses one or
    the other). `pair_only`: the fentry.multi / fexit.multi pair alone."""
    names, why = _kernel_attach_types()
    if names is None:
        return Availability(why)
    for variant, name, attach_type in (("fsession_multi", "BPF_TRACE_FSESSION_MULTI",
                                        BPF_TRACE_FSESSION_MULTI),
                                       ("fentry_multi", "BPF_TRACE_FENTRY_MULTI",
                                        BPF_TRACE_FENTRY_MULTI)):
        if name not in names or (pair_only and variant != "fentry_multi"):
            continue
        err = _tracing_prog_refused(bpf_syscall, attach_type, btf_id)
        if not err:
            return Availability(variant=variant)
        why = (f"the kernel refuses a {variant.replace('_', '.')} program or link: "
               f"{os.strerror(err) if err != 524 else 'not supported'}"
               f"{' (on this arch)' if err in (errno.EOPNOTSUPP, 524) else ''}")
        if variant == "fentry_multi":
            return Availability(why)
    return Availability(why or "this kernel has no tracing_multi links (Linux 7.2+)")


@cache
def fsession_programs() -> Availability:
    """Whether this kernel's BTF names BPF_TRACE_FSESSION (Linux 7.0+). Whether its JIT builds
    one is known at load: an fsession program names its function then."""
    names, why = _kernel_attach_types()
    if names is None:
        return Availability(why)
    if "BPF_TRACE_FSESSION" not in names:
        return Availability("this kernel has no fsession programs (Linux 7.0+)")
    return AVAILABLE


# The user-space attach modes by their AttachMode.kind, and the attach type of each one's link
# (0: a uprobe perf event's, made by libbpf).
_UPROBE_ATTACH_TYPES = {"single": 0, "multi": BPF_TRACE_UPROBE_MULTI,
                        "session": BPF_TRACE_UPROBE_SESSION}


@cache
def sleepable_uprobes(bpf_syscall: int, kind: str) -> Availability:
    """Whether this kernel runs a sleepable uprobe program (one that may fault user pages in:
    bpf_copy_from_user) in attach mode `kind` ("single", "multi", "session"): a trivial
    sleepable program is loaded, and for a link, asked for one on a file that
    does not exist (as _probe_link). Single uprobes since Linux 6.0 (the kernel loads a
    sleepable kprobe-type program only for them), uprobe_multi links since 6.6 (which made
    them sleepable from the start), uprobe.session links since they came (6.13)."""
    err, refused = _probe_link(bpf_syscall, _UPROBE_ATTACH_TYPES[kind], kernel=False,
                               flags=BPF_F_SLEEPABLE)
    if refused:
        return Availability(f"the kernel refuses a sleepable uprobe program (Linux 6.0+): "
                            f"{os.strerror(refused)}")
    if err in (0, errno.ESRCH, errno.ENOENT):
        return AVAILABLE
    link = "uprobe_multi" if kind == "multi" else "uprobe.session"
    return Availability(f"the kernel refuses a sleepable program on a {link} link: "
                        f"{os.strerror(err)}")


# Not cached: its answer changes once the run mounts tracefs (run.Run.setup), and two stat
# calls cost nothing.
def kprobes() -> Availability:
    """Whether this kernel makes kprobe links: libbpf needs the kprobe PMU, or tracefs's
    kprobe_events for its legacy way."""
    if os.path.exists("/sys/bus/event_source/devices/kprobe/type"):
        return AVAILABLE
    if os.path.exists(os.path.join(TRACEFS, "kprobe_events")):
        return AVAILABLE
    return Availability("this kernel has no kprobes either (no kprobe PMU, no kprobe_events)")


@cache
def missed_calls_counted() -> Availability:
    """Whether this kernel reports kprobe_multi's missed calls (link info, Linux 6.7+)."""
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
        counted = (major, minor) >= (6, 7)
    except ValueError:
        counted = False
    return AVAILABLE if counted else Availability("kernels before 6.7 do not count them all")
