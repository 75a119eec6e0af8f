"""Every value btfgen decodes, against the kernel's own BTF fetcher on the same calls.

The guest traces about a thousand kernel functions twice at once: `btfgen trace --record` and the
kernel's fprobe events (`c<i>`, i the function's index in the list: `%return $arg*
retval_=$retval`, the arguments fetched at entry and printed with the return value). A thread's
returns come in the same order on both sides, so one call's two returns are found by walking
both sequences together (pair()). Each value the kernel fetched is then classified by where
btfgen's placement says it lives: where the kernel's rule (argument n is the n-th argument
register, the return value the return register) is right, the two must agree; elsewhere the
kernel is wrong or refuses, and the cases are counted by kind.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections import defaultdict
from dataclasses import dataclass, field

from btfgen.btf import types as T
from btfgen.btf.walk import strip
from btfgen.layout import FunctionLayout, RegPiece, StackPiece, ValueLayout

GROUP = "btfgenf"

# What the workload calls, by subsystem; the arch's system call wrappers are added per arch.
GLOBS = (
    "vfs_*", "do_sys*", "ksys_*", "__sys_*", "filemap_*", "generic_file_*", "shmem_*",
    "tcp_*", "inet_*", "sock_*", "unix_*", "pipe_*", "path_*", "getname*", "do_mmap",
    "mmap_region", "*munmap*", "*mprotect*", "kernel_clone", "copy_process", "do_exit",
    "do_wait*", "*execve*", "fd_install", "alloc_fd", "__fput*", "fput*", "handle_mm_fault",
    "__handle_mm_fault", "do_anonymous_page", "__udp*", "udp_sendmsg", "udp_recvmsg",
)
# The system calls it makes, through the arch's wrappers (`__x64_sys_openat`, ...).
SYSCALLS = (
    "open", "openat", "read", "write", "pread64", "lseek", "close", "newfstat", "newfstatat",
    "statx", "ftruncate", "fsync", "rename", "renameat", "renameat2", "unlink", "unlinkat",
    "getdents64", "pipe", "pipe2", "clone", "clone3", "vfork", "wait4", "execve", "exit_group",
    "mmap", "munmap", "mprotect", "madvise", "brk", "msync", "socket", "socketpair", "bind",
    "listen", "connect", "accept", "accept4", "sendto", "recvfrom", "setsockopt",
    "getsockname", "shutdown",
)
# What btfgen's own run calls (the BPF program's helpers, its maps, its ring buffer): traced, they
# would fill the run with the tracer's own events, or count as missed (a BPF program does not
# run nested in another).
DENY = ("*bpf*", "*ringbuf*", "*_map_*", "*nofault*", "*lookup_elem*")
SYSCALL_WRAPPER = {"x86_64": "__x64_sys_", "arm64": "__arm64_sys_", "riscv64": "__riscv_sys_",
                   "ppc64le": "sys_", "s390x": "__s390x_sys_"}

# The kernel's rule (regs_get_kernel_argument, regs_return_value of each arch): argument n is the
# n-th of these registers, the return value is in the first.
KERNEL_ARG_REGS = {
    "x86_64": ("rdi", "rsi", "rdx", "rcx", "r8", "r9"),
    "arm64": tuple(f"x{i}" for i in range(8)),
    "riscv64": tuple(f"a{i}" for i in range(8)),
    "ppc64le": tuple(f"r{i}" for i in range(3, 11)),
    "s390x": tuple(f"r{i}" for i in range(2, 7)),
}
KERNEL_RET_REG = {"x86_64": "rax", "arm64": "x0", "riscv64": "a0", "ppc64le": "r3",
                  "s390x": "r2"}

# The kinds of values. RIGHT: where the kernel's fetcher is right; every value must agree.
RIGHT = "scalar or pointer in its own register"
STRUCT = "struct by value"
STRUCT_RETURN = "struct returned by value"
BY_REF = "struct passed by reference"
PAIR = "value in a register pair"
STACK = "stack argument"
SHIFTED = "register shifted by an earlier argument"
HIDDEN = "return through a hidden pointer"
UNAVAILABLE = "not in the trace context (FP)"


def select(funcs, arch: str) -> list[str]:
    """The functions to trace, sorted: what the workload calls, minus what the tracer calls."""
    prefix = SYSCALL_WRAPPER[arch]
    globs = (*GLOBS, *(prefix + call for call in SYSCALLS))
    names = {f.name for f in funcs}
    return sorted(n for n in names
                  if any(fnmatch.fnmatchcase(n, g) for g in globs)
                  and not any(fnmatch.fnmatchcase(n, d) for d in DENY))


def kind_of(value: ValueLayout, position: int | None, arch: str) -> str:
    """Where the value lives, as far as the kernel's fetcher cares; `position`: the argument's
    index (None: the return value)."""
    if value.unavailable:
        return UNAVAILABLE
    if value.by_ref:
        return HIDDEN if position is None else BY_REF
    if isinstance(strip(value.type), (T.Struct, T.Union)):
        return STRUCT if position is not None else STRUCT_RETURN
    if any(isinstance(p, StackPiece) for p in value.pieces):
        return STACK
    if len(value.pieces) > 1:
        return PAIR
    piece = value.pieces[0]
    assert isinstance(piece, RegPiece)
    if position is None:
        return RIGHT if piece.hwreg == KERNEL_RET_REG[arch] else SHIFTED
    regs = KERNEL_ARG_REGS[arch]
    return RIGHT if position < len(regs) and piece.hwreg == regs[position] else SHIFTED


RETVAL = "retval_"  # fetcher_probes.RETVAL: the field of the return value


@dataclass(frozen=True)
class KernelEvent:
    """One return, as the kernel's fprobe event printed it: the arguments fetched at entry and
    the return value."""

    tid: int
    index: int  # the function's index in the list
    ns: int  # the microsecond the kernel printed, in nanoseconds
    fields: dict[str, str]


@dataclass(frozen=True)
class Call:
    """One return btfgen recorded, with the arguments of its entry (None: entry not seen)."""

    function: str
    tid: int
    ns: int
    args: dict | None
    ret: object


_LINE = re.compile(
    r"-(?P<tid>\d+)\s+\[\d+\]\s+(?:\S+\s+)?(?P<sec>\d+)\.(?P<us>\d{6}): "
    r"c(?P<index>\d+): \([^)]*\)(?P<rest>.*)$")
_FIELD = re.compile(r"(\w+)=(\"[^\"]*\"|\S+)")


def parse_trace(text: str) -> list[KernelEvent]:
    out = []
    for line in text.splitlines():
        m = _LINE.search(line)
        if m:
            out.append(KernelEvent(int(m["tid"]), int(m["index"]),
                                   (int(m["sec"]) * 1_000_000 + int(m["us"])) * 1000,
                                   dict(_FIELD.findall(m["rest"]))))
    return out


def calls(events: list[dict]) -> list[Call]:
    """btfgen's events (`btfgen decode --format jsonl`) as calls: each exit with the arguments
    of the innermost open entry of its function on its thread; one the BPF side said not to
    pair (`"paired": false`: the kernel skipped its entry) with none, and nothing closed."""
    open_calls: dict[int, list[tuple[str, dict]]] = defaultdict(list)
    out = []
    for e in sorted(events, key=lambda e: e["timestamp"]):
        stack = open_calls[e["tid"]]
        if e["kind"] == "entry":
            stack.append((e["function"], e["args"]))
        elif e["kind"] == "exit":
            at = None if e.get("paired") is False else next(
                (i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == e["function"]),
                None)
            args = None
            if at is not None:
                args = stack[at][1]
                del stack[at:]
            out.append(Call(e["function"], e["tid"], e["timestamp"], args, e.get("return")))
    return out


def pair(kernel: list[KernelEvent], ours: list[Call], names: list[str],
         window: int = 64, lacking: set | None = None) -> tuple[list, list, list, list]:
    """(pairs of (kernel event, btfgen call), kernel events without one, btfgen calls without
    one, btfgen calls before the kernel's first event of their thread).

    A thread's returns come in the same order on both sides, except those one side missed: the
    two sequences of function names are walked together, and where they part, the side that
    has the extra return is the one whose skip meets the other side's next return soonest
    (the nearer in time where both could). Timestamps alone cannot pair them: an interrupt
    between the two return handlers puts milliseconds between one call's two events."""
    ks_by: dict[int, list[KernelEvent]] = defaultdict(list)
    cs_by: dict[int, list[Call]] = defaultdict(list)
    for k in kernel:
        ks_by[k.tid].append(k)
    for c in ours:
        cs_by[c.tid].append(c)
    pairs, lone_kernel, lone_ours, before = [], [], [], []
    for tid in sorted(set(ks_by) | set(cs_by)):
        ks = sorted(ks_by[tid], key=lambda k: k.ns)
        cs = sorted(cs_by[tid], key=lambda c: c.ns)
        if ks:
            # Until the workload adds itself to set_event_pid, the kernel's events skip it (the
            # margin: btfgen's handler runs first, and the kernel's time is truncated).
            start = ks[0].ns - 1_000_000
            before += [c for c in cs if c.ns < start]
            cs = [c for c in cs if c.ns >= start]
        kn = [names[k.index] for k in ks]
        i = j = 0
        while i < len(ks) and j < len(cs):
            if kn[i] == cs[j].function:
                skip = _burst(ks, kn, cs, i, j, window)
                if skip:
                    lone_kernel += ks[i:i + skip[0]]
                    lone_ours += cs[j:j + skip[1]]
                    i, j = i + skip[0], j + skip[1]
                    continue
                matched, skipped_k, skipped_c, i, j = _align_run(ks, kn, cs, i, j, window)
                pairs += matched
                lone_kernel += skipped_k
                lone_ours += skipped_c
                continue
            extra_kernel = next((n for n in range(1, window) if i + n < len(ks)
                                 and kn[i + n] == cs[j].function), None)
            extra_ours = next((n for n in range(1, window) if j + n < len(cs)
                               and cs[j + n].function == kn[i]), None)
            if extra_kernel is None and extra_ours is None:
                lone_kernel.append(ks[i])
                lone_ours.append(cs[j])
                i, j = i + 1, j + 1
            elif extra_ours is None or (extra_kernel is not None and (
                    extra_kernel, abs(ks[i + extra_kernel].ns - cs[j].ns))
                    < (extra_ours, abs(ks[i].ns - cs[j + extra_ours].ns))):
                lone_kernel += ks[i:i + extra_kernel]
                i += extra_kernel
            else:
                lone_ours += cs[j:j + extra_ours]
                j += extra_ours
        lone_kernel += ks[i:]
        lone_ours += cs[j:]
    if lacking is not None:  # (thread, function)s with a return on one side only, for undecided()
        lacking |= {(k.tid, names[k.index]) for k in lone_kernel}
        lacking |= {(c.tid, c.function) for c in lone_ours}
    # An interrupt between the two return handlers, with traced calls of its own, puts those
    # calls before the return on one side and after it on the other: the walk leaves both
    # returns alone. They are paired here, nearest first.
    reordered = _pair_nearest(lone_kernel, lone_ours, names, REORDERED_NS)
    done_k = {id(k) for k, _ in reordered}
    done_c = {id(c) for _, c in reordered}
    return (pairs + reordered, [k for k in lone_kernel if id(k) not in done_k],
            [c for c in lone_ours if id(c) not in done_c], before)


# A pair of returns of a function one side lacks a call of (on that thread) is kept only where
# each is the other's nearest of that name by this factor: one call's two returns are made by
# the same return path (within 1 us on the kprobe path, 30 us in 99 of 100 calls on the
# trampoline, under TCG), where the calls of a burst (page faults) come 30-90 us apart.
DECIDED_RATIO = 2


def undecided(pairs: list, lone_kernel: list, lone_ours: list, names: list[str],
              lacking: set) -> tuple[list, list]:
    """(the pairs kept, the pairs set aside as undecided) of pair()'s answer; `lacking`: the
    (thread, function)s pair() found a return of on one side only (before it paired returns an
    interrupt had reordered: its `lacking`).

    Where neither side lacks a call of a function on a thread, the two sequences of its returns
    are the same and pair in order. Where one side lacks one (the kernel skipped a trampoline
    program's run: its recursion check), which of the other side's returns is the lacking one
    is a guess by name and time, and a guess a call off pairs one call's values with the next
    call's. So there a pair is kept only where its two returns are each other's nearest of that
    name on the other side, DECIDED_RATIO times nearer than the next; any other is set aside
    (both returns unpaired, counted: never compared), not taken for a disagreement."""
    k_times: dict[tuple[int, str], list[int]] = defaultdict(list)
    c_times: dict[tuple[int, str], list[int]] = defaultdict(list)
    for k in [k for k, _ in pairs] + lone_kernel:
        k_times[(k.tid, names[k.index])].append(k.ns)
    for c in [c for _, c in pairs] + lone_ours:
        c_times[(c.tid, c.function)].append(c.ns)
    for times in (*k_times.values(), *c_times.values()):
        times.sort()
    kept, aside = [], []
    for k, c in pairs:
        key = (k.tid, names[k.index])
        if key not in lacking:
            kept.append((k, c))
            continue
        d = abs(k.ns - c.ns)
        # the next nearest: another kernel return to c, another of ours to k
        other = min(_nearest_other(k_times[key], c.ns, k.ns),
                    _nearest_other(c_times[key], k.ns, c.ns))
        (kept if d * DECIDED_RATIO < other else aside).append((k, c))
    return kept, aside


def _nearest_other(times: list[int], at: int, own: int) -> float:
    """The distance from `at` to the nearest of the sorted `times` but one `own` (its pair's)."""
    i = bisect.bisect_left(times, at)
    best = float("inf")
    skipped_own = False
    for t in times[max(0, i - 3):i + 3]:
        if t == own and not skipped_own:
            skipped_own = True
            continue
        best = min(best, abs(t - at))
    return best


# How far apart an interrupt can put one call's two returns (TCG is slow).
REORDERED_NS = 20_000_000
# Two returns of the same name further apart than this are taken for one call only when no
# return of that name on the other side, a few returns on, is within BURST_NEAR_NS of it.
BURST_FAR_NS = 1_000_000
BURST_NEAR_NS = 100_000


def _burst(ks, kn, cs, i: int, j: int, window: int) -> tuple[int, int] | None:
    """Where one side missed a run of calls of one function (a burst the kernel counts as
    missed: recursion, a preempted handler), the name walk pairs each of the other side's
    returns with the next call's, a call off, all along the run. The two returns of one call
    are made in the same return path, so far apart in time they are not one call when the
    other side has a return of that name close in time a few returns on: (kernel returns,
    btfgen returns) to set aside, or None."""
    if abs(ks[i].ns - cs[j].ns) <= BURST_FAR_NS:
        return None
    for n in range(1, window):
        if i + n < len(ks) and kn[i + n] == cs[j].function and \
                abs(ks[i + n].ns - cs[j].ns) <= BURST_NEAR_NS:
            return n, 0
        if j + n < len(cs) and cs[j + n].function == kn[i] and \
                abs(ks[i].ns - cs[j + n].ns) <= BURST_NEAR_NS:
            return 0, n
    return None


def _align_run(ks, kn, cs, i: int, j: int, window: int):
    """Pair a run of returns of one function on both sides, from (i, j) where both have it:
    (pairs, kernel returns set aside, btfgen returns set aside, the next i, the next j).

    Where one side missed a call of the run, pairing the runs in order pairs every return after
    the missed one with the other side's next call, all of them a call off, and close in time
    (a run of fput calls on unstable-amd64). The most pairs in order, and among those the ones
    nearest in time, pair each call with itself: one call's two returns are made by the same
    return path, microseconds apart, and calls of a run are further apart than that. Returns
    past the last pair are left to the walk: they may pair with returns after another name."""
    name = kn[i]
    rk = next((n for n in range(1, window) if i + n >= len(ks) or kn[i + n] != name), window)
    rc = next((n for n in range(1, window) if j + n >= len(cs) or cs[j + n].function != name),
              window)
    if rk == rc == 1:
        return [(ks[i], cs[j])], [], [], i + 1, j + 1
    # best[a][b]: (pairs, -(their distance in time)) of the runs' first a and b returns.
    best = [[(0, 0)] * (rc + 1) for _ in range(rk + 1)]
    for a in range(1, rk + 1):
        for b in range(1, rc + 1):
            near = min(abs(ks[i + a - 1].ns - cs[j + b - 1].ns), REORDERED_NS)
            both = best[a - 1][b - 1]
            best[a][b] = max(best[a - 1][b], best[a][b - 1], (both[0] + 1, both[1] - near))
    matched, a, b = [], rk, rc
    while a and b:
        if best[a][b] == best[a - 1][b]:
            a -= 1
        elif best[a][b] == best[a][b - 1]:
            b -= 1
        else:
            matched.append((a - 1, b - 1))
            a, b = a - 1, b - 1
    matched.reverse()
    last_k, last_c = matched[-1]
    paired_k = {a for a, _ in matched}
    paired_c = {b for _, b in matched}
    return ([(ks[i + a], cs[j + b]) for a, b in matched],
            [ks[i + a] for a in range(last_k) if a not in paired_k],
            [cs[j + b] for b in range(last_c) if b not in paired_c],
            i + last_k + 1, j + last_c + 1)


def _pair_nearest(ks: list[KernelEvent], cs: list[Call], names: list[str],
                  within_ns: int) -> list:
    free: dict[tuple[int, str], list[Call]] = defaultdict(list)
    for c in cs:
        free[(c.tid, c.function)].append(c)
    out = []
    for k in ks:
        options = free.get((k.tid, names[k.index]), [])
        best = min(options, key=lambda c: abs(c.ns - k.ns), default=None)
        if best is not None and abs(best.ns - k.ns) <= within_ns:
            options.remove(best)
            out.append((k, best))
    return out


def kernel_number(text: str | None) -> int | None:
    """A value as the kernel's fetcher printed it (decimal, 0x-hex, or a 'c'haracter)."""
    if text is None:
        return None
    if len(text) == 3 and text[0] == text[2] == "'":
        return ord(text[1])
    try:
        return int(text, 0)
    except ValueError:
        return None


def our_number(value) -> int | None:
    """btfgen's decoded value (`btfgen decode --format jsonl`) as a number: ints, bools, enums,
    a struct of one scalar member; None for what has no single number."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        if "value" in value and "name" in value:
            return our_number(value["value"])
        if len(value) == 1 and "unavailable" not in value and "unread" not in value:
            return our_number(next(iter(value.values())))
    return None


@dataclass
class Tally:
    agree: int = 0
    disagree: int = 0
    refused: int = 0  # the kernel did not fetch it (no event, no field, no number)
    example: dict | None = None  # the first case the kernel got wrong or refused


@dataclass
class Comparison:
    kinds: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    failures: list[str] = field(default_factory=list)  # RIGHT values that disagree
    functions_called: set[str] = field(default_factory=set)

    @property
    def compared(self) -> int:
        return sum(t.agree + t.disagree for t in self.kinds.values())


def compare(pairs, layouts: dict[str, FunctionLayout], arch: str) -> Comparison:
    out = Comparison()
    for k, call in pairs:
        fn = layouts[call.function]
        out.functions_called.add(fn.name)
        if call.args is not None:
            fetched = [v for name, v in k.fields.items() if name != RETVAL]
            for i, arg in enumerate(fn.args):
                theirs = fetched[i] if len(fetched) == len(fn.args) else None
                _one(out, fn.name, arg.name or f"arg{i}", kind_of(arg, i, arch), arg,
                     theirs, call.args.get(arg.name) if arg.name else None)
        if fn.ret is not None:
            _one(out, fn.name, "return", kind_of(fn.ret, None, arch), fn.ret,
                 k.fields.get(RETVAL), call.ret)
    return out


def _one(out: Comparison, function: str, what: str, kind: str, layout: ValueLayout,
         theirs: str | None, ours) -> None:
    tally = out.kinds[kind]
    k, b = kernel_number(theirs), our_number(ours)
    mask = (1 << 8 * min(layout.size, 8)) - 1
    if k is None:
        tally.refused += 1
        verdict = "refused"
    elif b is not None and (k - b) & mask == 0:
        tally.agree += 1
        return
    else:
        tally.disagree += 1
        verdict = "disagrees"
    if kind == RIGHT and verdict == "disagrees":
        out.failures.append(f"{function} {what} ({layout.type_name}): kernel {theirs!r}, "
                            f"btfgen {ours!r}")
    elif tally.example is None:
        tally.example = {"function": function, "value": what, "type": layout.type_name,
                         "kernel": theirs, "btfgen": ours, "verdict": verdict}
