"""What this kernel has, probed before anything is attached (as cilium/ebpf's features/ and
bpftrace's bpffeature): BPF programs at all, kprobe_multi and uprobe_multi links, session
links and the prototype of their kfuncs, sleepable uprobe programs in each user attach mode,
kprobes, and whether it counts missed calls. Each answer is None (it has it) or why not, in
words for the user.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from ctypes import POINTER, c_char_p, c_uint64

from .errors import BpfLoadError
from .libbpf import libbpf
from .syscall import (
    BPF_LINK_CREATE,
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
    ProgLoad,
    ProgLoadAttach,
    sys_bpf,
)
from .tracefs import TRACEFS


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
    if libbpf().libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_KPROBE, None) != 1:
        return "the kernel refuses to load kprobe/uprobe BPF programs here"
    return None


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
            # info holds its parameter count in the low 24 bits (16 before the BTF of 2026).
            proto = ctypes.cast(lib.btf__type_by_id(btf, func), POINTER(ctypes.c_uint32))[2]
            arity.add(ctypes.cast(lib.btf__type_by_id(btf, proto),
                                  POINTER(ctypes.c_uint32))[1] & 0xFFFFFF)
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


# The trampoline's attach types by their names in enum bpf_attach_type, as the build reads
# them from the target's BTF (btfgen.trace.build) and this side from the running kernel's.
TRAMPOLINE_ATTACH_TYPES = ("BPF_TRACE_FSESSION", "BPF_TRACE_FENTRY_MULTI",
                           "BPF_TRACE_FEXIT_MULTI", "BPF_TRACE_FSESSION_MULTI")
_BTF_KIND_ENUM = 6


def kernel_attach_types() -> tuple[frozenset[str] | None, str]:
    """(the names of enum bpf_attach_type in this kernel's BTF, "") or (None, why not): an
    attach type the kernel's UAPI lacks is one it cannot take. (The enum is the same on every
    arch: whether this arch's JIT builds the trampoline the probes below find out.)"""
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


def tracing_multi_support(bpf_syscall: int, btf_id: int = 0,
                          pair_only: bool = False) -> tuple[str | None, str]:
    """("fsession_multi": one fsession.multi link, or "fentry_multi": an fentry.multi and an
    fexit.multi link, "") where this kernel makes tracing_multi links, else (None, why not):
    its BTF names the attach type, and it loads a program of that type and (given a function
    it takes: `btf_id`) links it there (an arch whose JIT has no multi trampoline refuses
    one or the other). `pair_only`: the fentry.multi / fexit.multi pair alone."""
    names, why = kernel_attach_types()
    if names is None:
        return None, why
    for variant, name, attach_type in (("fsession_multi", "BPF_TRACE_FSESSION_MULTI",
                                        BPF_TRACE_FSESSION_MULTI),
                                       ("fentry_multi", "BPF_TRACE_FENTRY_MULTI",
                                        BPF_TRACE_FENTRY_MULTI)):
        if name not in names or (pair_only and variant != "fentry_multi"):
            continue
        err = _tracing_prog_refused(bpf_syscall, attach_type, btf_id)
        if not err:
            return variant, ""
        why = (f"the kernel refuses a {variant.replace('_', '.')} program or link: "
               f"{os.strerror(err) if err != 524 else 'not supported'}"
               f"{' (on this arch)' if err in (errno.EOPNOTSUPP, 524) else ''}")
        if variant == "fentry_multi":
            return None, why
    return None, why or "this kernel has no tracing_multi links (Linux 7.2+)"


def fsession_support() -> tuple[bool, str]:
    """(True, "") where this kernel's BTF names BPF_TRACE_FSESSION (Linux 7.0+), else (False,
    why not). Whether its JIT builds one is known at load: an fsession program names its
    function then."""
    names, why = kernel_attach_types()
    if names is None:
        return False, why
    if "BPF_TRACE_FSESSION" not in names:
        return False, "this kernel has no fsession programs (Linux 7.0+)"
    return True, ""


# The user-space attach modes by their AttachMode.kind, and the attach type of each one's link
# (0: a uprobe perf event's, made by libbpf).
_UPROBE_ATTACH_TYPES = {"single": 0, "multi": BPF_TRACE_UPROBE_MULTI,
                        "session": BPF_TRACE_UPROBE_SESSION}


def sleepable_uprobes_unavailable(bpf_syscall: int, kind: str) -> str | None:
    """Why this kernel cannot run a sleepable uprobe program (one that may fault user pages in:
    bpf_copy_from_user) in attach mode `kind` ("single", "multi", "session"), or None when it
    can: a trivial sleepable program is loaded, and for a link, asked for one on a file that
    does not exist (as _probe_link). Single uprobes since Linux 6.0 (the kernel loads a
    sleepable kprobe-type program only for them), uprobe_multi links since 6.6 (which made
    them sleepable from the start), uprobe.session links since they came (6.13)."""
    err, refused = _probe_link(bpf_syscall, _UPROBE_ATTACH_TYPES[kind], kernel=False,
                               flags=BPF_F_SLEEPABLE)
    if refused:
        return (f"the kernel refuses a sleepable uprobe program (Linux 6.0+): "
                f"{os.strerror(refused)}")
    if err in (0, errno.ESRCH, errno.ENOENT):
        return None
    link = "uprobe_multi" if kind == "multi" else "uprobe.session"
    return f"the kernel refuses a sleepable program on a {link} link: {os.strerror(err)}"


def kprobes_unavailable() -> str | None:
    """Why this kernel cannot make kprobe links, or None: libbpf needs the kprobe PMU, or
    tracefs's kprobe_events for its legacy way."""
    if os.path.exists("/sys/bus/event_source/devices/kprobe/type"):
        return None
    if os.path.exists(os.path.join(TRACEFS, "kprobe_events")):
        return None
    return "this kernel has no kprobes either (no kprobe PMU, no kprobe_events)"


def counts_missed_calls() -> bool:
    """Whether this kernel reports kprobe_multi's missed calls (link info, Linux 6.7+)."""
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 7)
