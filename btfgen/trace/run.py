"""`btfgen trace`'s run step: load a trace directory (build.py) and print every traced call and
return. Standard library and libbpf only: this is what runs on the target, copied into the trace
directory beside bpfload.py and btfgen_trace.py (tool.py).

Functions are attached with one session link where the kernel has them (kprobe.session, Linux
6.10+; uprobe.session, 6.13+: one program for entry and exit, the per-call state in the session
cookie), else one kprobe_multi (uprobe_multi) link per direction, else one kprobe and
kretprobe (uprobe and uretprobe) each, Linux 5.15+ (Debian 12's 6.1 has no uprobe_multi). The
cookie of each function (spec_format.Cookie) is its index in the manifest, which is also where
its spec sits in the `specs` map, and, where the register image decodes it, its BTF id and a
bit per direction.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import platform
import signal
import struct
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

try:  # in the package, or copied into a trace directory beside its siblings
    from . import bpfload, output, recording
except ImportError:
    import bpfload
    import output
    import recording

TRACEFS = Path(bpfload.TRACEFS)
# (btfgen.btf.reader.DEFAULT_PATH: this side runs without btfgen.)
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
# What trace.json holds: 2 added the arch facts this side once kept in tables of its own; 3 the
# functions' BTF ids and the spec table (specs.bin) this side no longer makes.
FORMAT = 3

# How messages name the tool: `btfgen trace`, or a trace directory's `btfgen_trace` (tool.main).
PROG = "btfgen trace"


class RunError(Exception):
    """One line for the user."""


class InputError(RunError):
    """Bad input (a directory that is no trace directory): exit status 2, as every command."""


@dataclass
class Options:
    command: list[str]  # run this and trace it while it runs (user mode: the program's args)
    pid: int = 0  # or trace this running process
    duration: float | None = None  # or stop after this many seconds
    errors: bool = False  # print only the calls that returned an error, with their arguments
    as_json: bool = False  # JSON lines instead of text
    record: str | None = None  # write the raw events to this file instead of printing
    attach: str = "auto"  # "session" (one kprobe.session/uprobe.session link), "multi"
    # (kprobe_multi/uprobe_multi pairs), "single" (one kprobe or uprobe each, with its cookie),
    # or "auto": the first of these the kernel has
    ring_mib: int | None = None  # the ring buffer's size; None: ring_size(functions)
    timings: bool = False  # say how long each stage took (Timings)


class Timings:
    """Where the time goes: each stage's wall time, said on stderr as it ends when asked
    (--timings) as `PROG: time: STAGE: SECONDS s`, a line a benchmark can read."""

    def __init__(self, on: bool, out=None) -> None:
        self.on = on
        self.out = out
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        yield  # a stage that failed is not timed: its error is what is said
        took = self.seconds[name] = time.perf_counter() - start
        if self.on:
            print(f"{PROG}: time: {name}: {took:.6f} s", file=self.out or sys.stderr,
                  flush=True)


@dataclass(frozen=True)
class Processes:
    """What a trace runs and which processes it reports."""
    argv: tuple[str, ...] | None  # run this command, and report it and its children
    pid: int  # else report this process and its children; 0: every process but the tracer


def processes(manifest: dict, opts: Options) -> Processes:
    """A program is run (its arguments after --) unless --pid; a library (the manifest's
    `library`: only a probe target, never run, though glibc's libc.so.6 would run) and the
    kernel are traced in the command after --, in --pid, or else in every process."""
    if opts.pid:
        return Processes(None, opts.pid)
    if manifest["kind"] == "kernel" or manifest.get("library"):
        return Processes(tuple(opts.command) or None, 0)
    return Processes((manifest["program"], *opts.command), 0)


def everyone(choice: Processes) -> bool:
    return choice.argv is None and not choice.pid


MIB = 1 << 20


def ring_size(functions: int, pointer_size: int = 8) -> int:
    """The ring buffer's default size in bytes: 16 MiB, and 256 KiB a function past 64
    functions, up to 64 MiB (16 MiB on a 32-bit kernel, whose few hundred MiB of vmalloc space
    refused 64 at load on i386). An event is about 1 KiB, and a program calling a traced
    function in a loop makes one every few microseconds: 16 MiB holds a second or more of that
    while the reader decodes."""
    size = 16 * MIB
    top = 64 * MIB if pointer_size == 8 else 16 * MIB
    while size < functions * 256 * 1024 and size < top:
        size *= 2
    return size


def load_manifest(directory: Path) -> dict:
    path = directory / "trace.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{directory}: not a trace directory (no trace.json; make one with "
                         "--build)") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from None
    if manifest.get("format") != FORMAT:
        raise InputError(f"{path}: format {manifest.get('format')!r}, this btfgen trace reads "
                         f"{FORMAT}: build the directory again")
    return manifest


def load_decoders(directory: Path, manifest: dict):
    path = directory / manifest["module"]
    spec = importlib.util.spec_from_file_location("btfgen_trace_decoders", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError as e:
        raise RunError(f"{path}: {e}") from None
    return module


def check_target(manifest: dict) -> list[str]:
    """Refuse another arch; warnings (not errors) for what may still work."""
    here = platform.machine()
    if here not in manifest["uname"] or sys.byteorder != manifest["byte_order"]:
        raise RunError(f"built for {manifest['arch']} ({manifest['byte_order']}-endian "
                       f"{' or '.join(manifest['uname'])}), this machine is {sys.byteorder}-"
                       f"endian {here}")
    warnings = []
    if manifest["kind"] == "kernel" and manifest.get("btf_sha256"):
        try:
            digest = hashlib.sha256(KERNEL_BTF.read_bytes()).hexdigest()
        except OSError:
            digest = None
        if digest and digest != manifest["btf_sha256"]:
            warnings.append(f"built for the BTF of {manifest['btf']}, not this kernel's: "
                            "arguments may be misplaced")
    return warnings


def traceable(names: list[str]) -> tuple[list[int], list[str]]:
    """(indexes of the functions ftrace can attach to, names it cannot), by
    available_filter_functions; everything when that list cannot be read."""
    try:
        text = (TRACEFS / "available_filter_functions").read_text()
    except OSError:
        return list(range(len(names))), []
    known = {line.split()[0] for line in text.splitlines() if line.strip()}
    keep = [i for i, n in enumerate(names) if n in known]
    return keep, [n for n in names if n not in known]


def run(directory: Path, opts: Options, out=sys.stdout) -> int:
    timings = Timings(opts.timings)
    manifest = load_manifest(directory)
    with timings.stage("run: decoders load"):
        decoders = load_decoders(directory, manifest)
    for warning in check_target(manifest):
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    reason = bpfload.bpf_unavailable()
    if reason:
        raise RunError(f"BPF unavailable: {reason}")
    kernel = manifest["kind"] == "kernel"
    names = manifest["functions"]
    bpfload.mount_tracefs()
    if kernel:
        with timings.stage("run: symbol check"):
            keep, skipped = traceable(names)
        if skipped:
            print(f"{PROG}: not traceable here (not in available_filter_functions), "
                  f"skipped: {', '.join(skipped)}", file=sys.stderr)
        if not keep:
            raise RunError("none of the functions can be traced on this kernel")
    else:
        keep = list(range(len(names)))
    who = everyone(processes(manifest, opts))  # then each line says whose call it was
    sink = writer = printer = None
    with timings.stage("run: output setup"):
        if opts.record:
            writer = recorder(opts.record, manifest, decoders, who)
            sink = writer.record
        else:
            printer = output.Printer(LazyFunctions(decoders, names, manifest["btf_ids"]),
                                     decoders.BYTE_ORDER, out, who=who, errors=opts.errors,
                                     as_json=opts.as_json, prog=PROG, batch=True)
            sink = printer.record
    try:
        status, lost = _trace(directory, manifest, decoders, opts, keep, sink, timings,
                              printer.flush_lines if printer else None)
    except BaseException:
        if writer:
            writer.abandon()
        raise
    finally:
        if printer and not printer.flush_lines() and out is sys.stdout:
            # Python flushes stdout again at exit: to nothing, not to the closed pipe.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if writer:
        writer.close(lost)
        print(f"{PROG}: recorded {writer.events} events in {opts.record}", file=sys.stderr)
    # Never silent about what the ring buffer had no room for.
    print(f"{PROG}: {lost} records lost (ring buffer full)", file=sys.stderr)
    return status


class LazyFunctions(dict):
    """BTF id -> the decoder of the function with that id, made at its first event: making
    every one up front took a minute and most of a guest's memory for the whole kernel."""

    def __init__(self, decoders, names: list[str], btf_ids: list[int]) -> None:
        super().__init__()
        self._decoders = decoders
        self._names = dict(zip(btf_ids, names))

    def get(self, btf_id: int, default=None):
        fn = super().get(btf_id)
        if fn is None and btf_id in self._names:
            fn = self[btf_id] = self._decoders.function(self._names[btf_id])
        return default if fn is None else fn


def recorder(path: str, manifest: dict, decoders, who: bool):
    header = {"format": "btfgen trace recording", "arch": manifest["arch"], "who": who,
              "byte_order": decoders.BYTE_ORDER, "pointer_size": decoders.POINTER_SIZE,
              "kernel_release": os.uname().release, "kind": manifest["kind"],
              "host": os.uname().nodename, "clock_offset_ns": time.time_ns() - time.monotonic_ns(),
              "program": manifest.get("program"), "btf": manifest.get("btf"),
              "btf_sha256": manifest.get("btf_sha256")}
    descs = [decoders._descriptor(n)[0] for n in manifest["functions"]]
    try:
        return recording.Writer(path, header, descs, decoders.BYTE_ORDER)
    except OSError as e:
        raise RunError(f"{path}: {e.strerror}") from None


def _trace(directory: Path, manifest: dict, decoders, opts: Options, keep: list[int],
           sink, timings: Timings | None = None, drained=None) -> tuple[int, int]:
    """(the exit status, records lost); `drained()` after each drain of the ring buffer."""
    kernel = manifest["kind"] == "kernel"
    timings = timings or Timings(False)
    fork_offset = child_pid_offset()
    choice = processes(manifest, opts)
    following = not everyone(choice)
    if following and fork_offset is None:
        print(f"{PROG}: warning: no sched_process_fork event here: child processes "
              "are not traced", file=sys.stderr)
    modes = attach_modes(opts.attach, kernel, manifest)
    child = Gated(list(choice.argv)) if choice.argv else None
    only = child.pid if child else choice.pid
    try:
        for n, mode in enumerate(modes):
            obj = bpfload.BpfObject(str(directory / mode.object),
                                    bpf_syscall=manifest["bpf_syscall"])
            try:
                before = _load_and_attach(obj, directory, mode, manifest, opts, keep, only,
                                          fork_offset, following, timings, decoders)
                break
            except BaseException as e:
                obj.close()
                if not isinstance(e, bpfload.BpfLoadError) or n + 1 == len(modes):
                    raise
                # Auto: a session the probe let through may still be refused (a kernel that
                # cannot put every function on the function-graph stack): the pair still works.
                print(f"{PROG}: the {mode.said} was refused ({str(e).splitlines()[0]}): "
                      f"{modes[n + 1].announce()}", file=sys.stderr)
    except BaseException:
        if child:
            child.cancel()
        raise
    with _detaching(obj, timings) as probes:
        probes.append(before)
        behind = Behind(sink, decoders.BYTE_ORDER)
        with bpfload.RingBuffer(obj.map_fd("events"), behind.record) as rb:
            if child:
                child.start()
            else:
                what = "kernel functions" if kernel else "functions"
                if manifest.get("library"):
                    what += f" of {Path(manifest['program']).name} in " + (
                        f"process {only}" if only else
                        "every process that maps it (this one excepted)")
                until = f"for {opts.duration:g}s" if opts.duration else "until Ctrl-C"
                print(f"{PROG}: tracing {len(keep)} {what} {until}", file=sys.stderr,
                      flush=True)
            with timings.stage("run: tracing"):
                status = _follow(rb, child, opts, lambda: Losses(
                    _lost(obj), obj.missed(mode.programs), behind.take()), drained)
            missed = obj.missed(mode.programs)  # while the links that count it are there
            # Then no call makes a record any more: what the ring buffer holds is all there
            # is, drained to the end (a traced process that goes on calling, after a signal
            # stopped the tracing, cannot keep the drain going).
            _detach(obj, probes, timings)
            while rb.poll(50) > 0:
                pass
            # The BPF side wakes the reader only at a quarter full: a poll that times out has
            # not consumed what no wakeup announced.
            while rb.drain() > 0:
                pass
            if drained:
                drained()
        if missed or kernel:
            # Calls that never reached the program: nothing of them is in the ring buffer.
            counted = "" if _counts_missed_calls() or not kernel else (
                "; kernels before 6.7 do not count them all")
            print(f"{PROG}: {missed} calls missed by the kernel (the program did not run: "
                  f"another BPF program was running on that CPU, or the probe could not "
                  f"deliver the call{counted})", file=sys.stderr)
        return status, _lost(obj)


def _load_and_attach(obj, directory: Path, mode: AttachMode, manifest: dict, opts: Options,
                     keep: list[int], only: int, fork_offset: int | None, following: bool,
                     timings: Timings, decoders) -> int:
    """Load `obj` for `mode` and attach it; -> how many links it had before the function
    probes (what _detaching detaches, timed). `decoders`: the generated module (its pointer
    size, and its copy of spec_format for the cookies)."""
    pointer_size = decoders.POINTER_SIZE
    kernel = manifest["kind"] == "kernel"
    names = manifest["functions"]
    if mode.kind != "single":
        for prog in mode.programs:
            (obj.expect_kprobe_multi if kernel else obj.expect_uprobe_multi)(
                prog, session=mode.kind == "session")
    obj.set_autoload("follow_fork", following and fork_offset is not None)
    obj.set_max_entries("events", opts.ring_mib * MIB if opts.ring_mib else
                        ring_size(len(keep), pointer_size))
    if mode.kind == "single":
        _enough_files(2 * len(keep) + 64)
    # One spec per function of the directory, however many (the object's own size is only a
    # default).
    obj.set_max_entries("specs", len(names))
    with timings.stage("run: object load"):
        obj.load()
    specs = (directory / manifest["specs"]).read_bytes()
    with timings.stage("run: spec map fill"):
        obj.fill_array("specs", specs, len(names))
    for at, value in enumerate((1 if only else 0, os.getpid(), fork_offset or 0)):
        obj.update("filter", struct.pack("I", at), struct.pack("I", value))
    if only:
        obj.update("followed", struct.pack("I", only), b"\x01")
    if only and fork_offset is not None:
        obj.attach("follow_fork")
    before = len(obj.links)
    with timings.stage("run: attach"):
        _attach(obj, manifest, keep, mode,
                cookies(decoders, specs, len(names), manifest["byte_order"]))
    return before


def _enough_files(wanted: int) -> None:
    """One kprobe or kretprobe is one perf event file: a thousand functions attached singly
    passed the usual soft limit of 1,024 open files (EMFILE), and a whole kernel (Debian 12's
    6.1 has no kprobe_multi) the usual hard limit of 4,096. Raise them as far as allowed (root
    may raise the hard limit up to fs.nr_open); where that is not far enough, say so before
    attaching, not one EMFILE a probe after it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return
        except (OSError, ValueError):
            pass
    new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    if new < wanted:
        raise RunError(f"attaching one kprobe and kretprobe per function needs {wanted} open "
                         f"files, and this process may open {new} (ulimit -n; root may raise "
                         "it up to fs.nr_open): trace fewer functions, or raise the limit")


@contextmanager
def _detaching(obj, timings: Timings):
    """Detach the function probes on the way out, timed apart from the rest (the fork
    tracepoint's link, the object): the other half of the attach stage, whose caller appends
    to the list this yields how many links `obj` had before it."""
    probes: list[int] = []
    try:
        yield probes
    finally:
        _detach(obj, probes, timings)
        with timings.stage("run: object close"):
            obj.close()


def _detach(obj, probes: list[int], timings: Timings) -> None:
    """Destroy the function probes' links (once: `probes` is emptied)."""
    if probes:
        with timings.stage("run: detach"):
            for link in reversed(obj.links[probes[0]:]):
                link.destroy()
        probes.clear()


def _lost(obj) -> int:
    """Events the ring buffer had no room for so far (the BPF side counts them per CPU)."""
    ncpu = bpfload.possible_cpus()
    counts = obj.lookup("lost", struct.pack("I", 0), 8 * ncpu)
    return sum(struct.unpack(f"{ncpu}Q", counts))


def _counts_missed_calls() -> bool:
    """Whether this kernel reports kprobe_multi's missed calls (link info, Linux 6.7+)."""
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 7)


class AttachMode(NamedTuple):
    kind: str  # "session", "multi" or "single"
    object: str  # its BPF object in the trace directory
    programs: tuple[str, ...]
    said: str  # what is attached, for the messages
    why: str = ""  # why this one: the others are missing, or it was asked for

    def announce(self) -> str:
        return f"attaching {self.said}" + (f" ({self.why})" if self.why else "")


def attach_modes(asked: str, kernel: bool, manifest: dict) -> list[AttachMode]:
    """The ways to attach, best first (a refused one falls back to the next), saying which
    one is tried and why."""
    modes = []
    if asked in ("auto", "session"):
        session, why = _session_mode(kernel, manifest)
        if session is None and asked == "session":
            raise RunError(f"--attach session: {why}")
        if session is not None:
            modes.append(session._replace(why="as asked" if asked == "session" else
                                          "entry and exit on one link"))
            if asked == "auto":
                modes.append(_pair_or_single("auto", kernel, manifest, quiet=True))
        else:
            modes.append(_pair_or_single("auto", kernel, manifest, no_session=why))
    else:
        modes.append(_pair_or_single(asked, kernel, manifest))
    print(f"{PROG}: {modes[0].announce()}", file=sys.stderr)
    return modes


def _session_mode(kernel: bool, manifest: dict) -> tuple[AttachMode | None, str]:
    objects = manifest.get("session_objects")
    if not objects:
        return None, "this trace directory has no session program (built by an older btfgen)"
    variant, why = bpfload.session_support(manifest["bpf_syscall"], kernel)
    if variant is None:
        return None, why
    kind = "kprobe" if kernel else "uprobe"
    return AttachMode("session", objects[variant], ("trace_session",),
                      f"one {kind}.session link"), ""


def _pair_or_single(asked: str, kernel: bool, manifest: dict, quiet: bool = False,
                    no_session: str = "") -> AttachMode:
    """multi or single: kprobe_multi (uprobe_multi) pairs where the kernel has them in auto."""
    pair, obj = ("trace_entry", "trace_exit"), manifest["object"]
    multi = AttachMode("multi", obj, pair, "kprobe_multi links" if kernel else
                       "uprobe_multi links", "as asked" if asked == "multi" else no_session)
    single = AttachMode("single", obj, pair, "one kprobe and kretprobe per function" if kernel
                        else "one uprobe and uretprobe per function",
                        "as asked" if asked == "single" else "")
    if asked != "auto":
        return single if asked == "single" else multi
    why = (bpfload.kprobe_multi_unavailable if kernel else
           bpfload.uprobe_multi_unavailable)(manifest["bpf_syscall"])
    if why is None:
        return multi
    also = bpfload.kprobes_unavailable() if kernel else None
    if also and not quiet:
        raise RunError(f"{why}; {also}")
    return single._replace(why=why)


def cookies(decoders, specs: bytes, n: int, byte_order: str) -> list[int]:
    """Each function's attach cookie (spec_format.Cookie: its index, the key of its spec, and
    whether the register image decodes it) from the `n` specs of specs.bin, by the generated
    module's copy of spec_format."""
    size = len(specs) // n
    return [decoders.cookie(i, specs[i * size:(i + 1) * size], byte_order) for i in range(n)]


def _attach(obj, manifest: dict, keep: list[int], mode: AttachMode,
            cookie: list[int]) -> None:
    # No pid on the uprobe links: the processes to trace are the BPF side's `followed` set,
    # which grows as they fork.
    kernel = manifest["kind"] == "kernel"
    names = [manifest["functions"][i] for i in keep]
    session = mode.kind == "session"
    unprobed: list[str] = []
    for prog, ret in zip(mode.programs, (False, True)):
        if mode.kind == "single":
            # The same program on every function: the cookie (Linux 5.15+) picks the spec.
            for i, name in zip(keep, names):
                if not kernel:
                    obj.attach_uprobe(prog, manifest["program"], name, cookie=cookie[i],
                                      retprobe=ret, offset=manifest["offsets"][i])
                    continue
                if name in unprobed:
                    continue
                try:
                    obj.attach_kprobe(prog, name, cookie[i], retprobe=ret)
                except bpfload.BpfLoadError as e:
                    # A kprobe names its function, and a name several functions share, or
                    # the kprobe blacklist's, is refused: that function only is left out
                    # (a kretprobe never runs without its kprobe: both go together).
                    if e.errno not in (errno.EADDRNOTAVAIL, errno.EINVAL) or ret:
                        raise
                    unprobed.append(name)
        elif kernel:
            obj.attach_kprobe_multi(prog, names, [cookie[i] for i in keep], retprobe=ret,
                                    session=session)
        else:
            obj.attach_uprobe_multi(prog, manifest["program"], names, [cookie[i] for i in keep],
                                    retprobe=ret,
                                    offsets=[manifest["offsets"][i] for i in keep],
                                    session=session)
    if unprobed:
        if len(unprobed) == len(names):
            raise RunError(f"no function could take a kprobe by name (as {unprobed[0]}: "
                           "several functions of the name, or on the kprobe blacklist)")
        print(f"{PROG}: left out, a kprobe by name refused (several functions of the name, or "
              f"the kprobe blacklist): {', '.join(unprobed[:10])}"
              f"{f' and {len(unprobed) - 10} more' if len(unprobed) > 10 else ''}",
              file=sys.stderr)


def child_pid_offset() -> int | None:
    """Where sched_process_fork's child_pid sits in the event (its tracefs format: the comm
    fields before it changed size across kernel versions), or None without the event."""
    try:
        text = (TRACEFS / "events/sched/sched_process_fork/format").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = dict(part.strip().split(":", 1) for part in line.split(";") if ":" in part)
        if fields.get("field", "").split()[-1:] == ["child_pid"]:
            return int(fields["offset"])
    return None


# The BPF side wakes the reader only once the ring is a quarter full (a wakeup per event cost
# the traced program as much as the event): between wakeups, the reader drains on this clock.
DRAIN_MS = 10


# A reader this far behind the calls (seconds) says so while running.
BEHIND_S = 1.0


class Behind:
    """How far the reader is behind the traced calls: each event's age as it is handed on (its
    bpf_ktime_get_ns and time.monotonic_ns read one clock), the largest since last taken."""

    def __init__(self, sink, order: str) -> None:
        self._sink = sink
        self._head = output.HEADS[order]
        self._worst = 0

    def record(self, raw) -> None:
        if len(raw) >= self._head.size:  # else the sink says what is wrong with it
            age = time.monotonic_ns() - self._head.unpack_from(raw)[3]
            if age > self._worst:
                self._worst = age
        self._sink(raw)

    def take(self) -> float:
        """Seconds; 0 once taken, until the next event."""
        worst, self._worst = self._worst, 0
        return worst / 1e9


@dataclass(frozen=True)
class Losses:
    lost: int  # records the ring buffer had no room for, since the start
    missed: int  # calls the kernel did not run the program for (its missed counts), since the start
    behind_s: float  # how old the oldest event handed on in the last second was


def say_losses(now: Losses, said: Losses) -> Losses:
    """Once a second while running: what was lost, when it grew, and how far behind the reader
    is, when it is (a printing path slower than the calls). Returns what has been said."""
    if now.lost > said.lost or now.missed > said.missed or now.behind_s >= BEHIND_S:
        behind = (f"; the reader is {now.behind_s:.1f}s behind the calls"
                  if now.behind_s >= BEHIND_S else "")
        print(f"{PROG}: {now.lost} records lost so far (ring buffer full: the reader is "
              f"behind; a larger --ring-size may help), {now.missed} calls missed by the kernel"
              f"{behind}", file=sys.stderr, flush=True)
        return now
    return said


def _follow(rb, child, opts: Options, losses, drained=None) -> int:
    drained = drained or (lambda: None)
    stop: list[int] = []
    # Ctrl-C, or a SIGTERM (timeout(1), a service manager): the probes are detached, the ring
    # buffer drained and its lines printed before the end, as when the command exits.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    deadline = None if opts.duration is None else time.monotonic() + opts.duration
    status = None
    said, said_at = Losses(0, 0, 0.0), time.monotonic()
    while not stop:
        rb.poll(DRAIN_MS)
        rb.drain()
        if drained() is False:  # the lines' reader went away (`| head`): as SIGPIPE would
            stop.append(signal.SIGPIPE)
        now = time.monotonic()
        if now - said_at >= 1:
            # Falling behind, and what the kernel missed, is said while it happens, not only at
            # the end.
            said_at, said = now, say_losses(losses(), said)
        if child and (status := child.poll()) is not None:
            break
        if opts.pid and not os.path.exists(f"/proc/{opts.pid}"):
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
    if status is not None:
        return status
    # Ctrl-C is how tracing without a command ends; with one, the signal is said as a shell does.
    return 128 + stop[0] if stop and child else 0


class Gated:
    """A command forked now but exec'd only on start(): its pid can be filtered on, and the
    probes are in place, before it runs."""

    def __init__(self, argv: list[str]) -> None:
        r, self._w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._w)
            if os.read(r, 1) != b"x":  # the tracer gave up
                os._exit(1)
            try:
                os.execvp(argv[0], argv)
            except OSError as e:
                print(f"{PROG}: cannot run {argv[0]}: {e.strerror}", file=sys.stderr)
            os._exit(127)
        os.close(r)

    def start(self) -> None:
        os.write(self._w, b"x")
        os.close(self._w)

    def cancel(self) -> None:
        os.close(self._w)
        os.waitpid(self.pid, 0)

    def poll(self) -> int | None:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return None
        return os.waitstatus_to_exitcode(status)
