"""`btfgen trace`'s run step: load a trace directory (build.py) and print every traced call and
return. Standard library and libbpf only: this is what runs on the target, copied into the trace
directory beside bpfload.py and btfgen_trace.py (tool.py).

Kernel functions are attached with one kprobe.multi and one kretprobe.multi link, a user
program's with one uprobe_multi link per direction; the cookie of each function is its index in
the manifest, which is also where its spec sits in the `specs` map.
"""

from __future__ import annotations

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
    attach: str = "auto"  # kernel functions: "multi" (kprobe_multi), "single" (one kprobe
    # per function, each with its cookie), or "auto": multi where the kernel has it
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


MIB = 1 << 20


def ring_size(functions: int) -> int:
    """The ring buffer's default size in bytes: 16 MiB, and 256 KiB a function past 64
    functions, up to 64 MiB. An event is about 1 KiB, and a program calling a traced function
    in a loop makes one every few microseconds: 16 MiB holds a second or more of that while the
    reader decodes."""
    size = 16 * MIB
    while size < functions * 256 * 1024 and size < 64 * MIB:
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
    who = kernel and not opts.pid and not opts.command
    sink = writer = None
    with timings.stage("run: output setup"):
        if opts.record:
            writer = recorder(opts.record, manifest, decoders, who)
            sink = writer.record
        else:
            sink = output.Printer(LazyFunctions(decoders, names, manifest["btf_ids"]),
                                  decoders.BYTE_ORDER, out, who=who, errors=opts.errors,
                                  as_json=opts.as_json, prog=PROG).record
    try:
        status, lost = _trace(directory, manifest, decoders, opts, keep, sink, timings)
    except BaseException:
        if writer:
            writer.abandon()
        raise
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
           sink, timings: Timings | None = None) -> tuple[int, int]:
    """(the exit status, records lost)"""
    kernel = manifest["kind"] == "kernel"
    names = manifest["functions"]

    timings = timings or Timings(False)
    fork_offset = child_pid_offset()
    single = kernel and _single(opts.attach, manifest["bpf_syscall"])
    with bpfload.BpfObject(str(directory / manifest["object"]),
                           bpf_syscall=manifest["bpf_syscall"]) as obj, \
            _detaching(obj, timings) as probes:
        for prog in ("trace_entry", "trace_exit"):
            if not single:
                (obj.expect_kprobe_multi if kernel else obj.expect_uprobe_multi)(prog)
        following = bool(opts.command or opts.pid or not kernel)
        if following and fork_offset is None:
            print(f"{PROG}: warning: no sched_process_fork event here: child processes "
                  "are not traced", file=sys.stderr)
        obj.set_autoload("follow_fork", following and fork_offset is not None)
        obj.set_max_entries("events", opts.ring_mib * MIB if opts.ring_mib else
                            ring_size(len(keep)))
        # One spec per function of the directory, however many (the object's own size is
        # only a default).
        obj.set_max_entries("specs", len(names))
        with timings.stage("run: object load"):
            obj.load()
        with timings.stage("run: spec map fill"):
            obj.fill_array("specs", (directory / manifest["specs"]).read_bytes(), len(names))
        child = None
        if opts.command or not (opts.pid or kernel):
            program = [] if kernel else [manifest["program"]]
            child = Gated([*program, *opts.command])
        only = child.pid if child else opts.pid
        for at, value in enumerate((1 if only else 0, os.getpid(), fork_offset or 0)):
            obj.update("filter", struct.pack("I", at), struct.pack("I", value))
        if only:
            obj.update("followed", struct.pack("I", only), b"\x01")
        try:
            if only and fork_offset is not None:
                obj.attach("follow_fork")
            with timings.stage("run: attach"):
                probes.append(len(obj.links))
                _attach(obj, manifest, keep, kernel, single)
        except BaseException:
            if child:
                child.cancel()
            raise
        with bpfload.RingBuffer(obj.map_fd("events"), sink) as rb:
            if child:
                child.start()
            else:
                what = "kernel functions" if kernel else "functions"
                until = f"for {opts.duration:g}s" if opts.duration else "until Ctrl-C"
                print(f"{PROG}: tracing {len(keep)} {what} {until}", file=sys.stderr,
                      flush=True)
            with timings.stage("run: tracing"):
                status = _follow(rb, child, opts, lambda: _lost(obj))
        missed = obj.missed(("trace_entry", "trace_exit"))
        if missed or kernel:
            # Calls that never reached the program: nothing of them is in the ring buffer.
            counted = "" if _counts_missed_calls() or not kernel else (
                "; kernels before 6.7 do not count them all")
            print(f"{PROG}: {missed} calls missed by the kernel (the program did not run: "
                  f"another BPF program was running on that CPU, or the probe could not "
                  f"deliver the call{counted})", file=sys.stderr)
        return status, _lost(obj)


@contextmanager
def _detaching(obj, timings: Timings):
    """Detach the function probes on the way out, timed apart from the rest (the fork
    tracepoint's link, the object): the other half of the attach stage, whose caller appends
    to the list this yields how many links `obj` had before it."""
    probes: list[int] = []
    try:
        yield probes
    finally:
        if probes:
            with timings.stage("run: detach"):
                for link in reversed(obj.links[probes[0]:]):
                    link.destroy()
        with timings.stage("run: object close"):
            obj.close()


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


def _single(mode: str, bpf_syscall: int) -> bool:
    """Whether kernel functions get one kprobe and kretprobe link each (saying which way was
    taken, and why)."""
    if mode == "auto":
        why = bpfload.kprobe_multi_unavailable(bpf_syscall)
        if why is None:
            mode = "multi"
        else:
            also = bpfload.kprobes_unavailable()
            if also:
                raise RunError(f"{why}; {also}")
            print(f"{PROG}: attaching one kprobe and kretprobe per function ({why})",
                  file=sys.stderr)
            return True
    if mode == "multi":
        print(f"{PROG}: attaching kprobe_multi links", file=sys.stderr)
        return False
    print(f"{PROG}: attaching one kprobe and kretprobe per function (as asked)", file=sys.stderr)
    return True


def _attach(obj, manifest: dict, keep: list[int], kernel: bool, single: bool) -> None:
    # No pid on the uprobe links: the processes to trace are the BPF side's `followed` set,
    # which grows as they fork.
    names = [manifest["functions"][i] for i in keep]
    for prog, ret in (("trace_entry", False), ("trace_exit", True)):
        if single:
            # The same program on every function: the cookie (Linux 5.15+) picks the spec.
            for i, name in zip(keep, names):
                obj.attach_kprobe(prog, name, i, retprobe=ret)
        elif kernel:
            obj.attach_kprobe_multi(prog, names, keep, retprobe=ret)
        else:
            obj.attach_uprobe_multi(prog, manifest["program"], names, keep, retprobe=ret,
                                    offsets=[manifest["offsets"][i] for i in keep])


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


def _follow(rb, child, opts: Options, lost) -> int:
    stop: list[int] = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    deadline = None if opts.duration is None else time.monotonic() + opts.duration
    status = None
    said, said_at = 0, time.monotonic()
    while not stop:
        rb.poll(DRAIN_MS)
        rb.drain()
        now = time.monotonic()
        if now - said_at >= 1:
            # Falling behind is said while it happens, not only at the end.
            said_at, n = now, lost()
            if n > said:
                print(f"{PROG}: {n} records lost so far (ring buffer full: the reader is "
                      f"behind; a larger --ring-size may help)", file=sys.stderr, flush=True)
                said = n
        if child and (status := child.poll()) is not None:
            break
        if opts.pid and not os.path.exists(f"/proc/{opts.pid}"):
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
    while rb.poll(50) > 0:
        pass
    rb.drain()
    if status is not None:
        return status
    return 130 if stop and child else 0  # Ctrl-C is how tracing without a command ends


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
