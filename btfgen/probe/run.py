"""`btfgen trace`'s run step: load a trace directory (btfgen.trace.build wrote it), attach its
functions, and print or record every traced call and return until the command exits. What it
does at each step lives in its own module: manifest.py, features.py, attach.py, ringspan.py,
loop.py, losses.py, output.py, recording.py.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from . import attach, features, output, prog, recording, ringspan, spec_format, summary, tracefs
from .bpf_object import BpfObject
from .errors import BpfLoadError, RunError
from .losses import Behind, Losses, lost_by_reason, say_lost, say_missed, skipped_entries
from .errors import Interrupted
from .loop import catch_signals, follow, restore_signals
from .manifest import (
    DecoderView,
    LazyFunctions,
    check_target,
    cookies,
    load_decoders,
    load_manifest,
)
from .options import Options
from .processes import Gated, Processes, command_path, everyone, processes
from .ringbuf import RingBuffer
from .timings import Timings

MIB = 1 << 20


# The default ring holds this many events of the traced functions' mean size, and this many
# more a function past 64: a program calling a traced function in a loop makes one every few
# microseconds (uprobes top out near 200,000 a second here), and more functions traced make
# more events. 131,072 events of 100 bytes (six arguments, entry and exit) are 16 MiB: a
# second or more of such a loop while the reader catches up, where the 16 MiB of 1,088-byte
# events every function had before held 15,000.
RING_EVENTS = 1 << 17
RING_EVENTS_A_FUNCTION = 2048
RING_HEADER = 8  # the kernel's header before each record in the ring (length, page offset)


def mean_event(specs: bytes, count: int, keep: list[int], byte_order: str) -> float:
    """The ring bytes of an event of the functions `keep` (indexes into `specs`, the trace
    directory's `count` struct btfgen_spec), entry and exit alike, on average: each with its
    ring header (spec_format.spec_event_sizes: what the BPF side sends, a multiple of 8)."""
    if not keep:
        return 0.0
    step = len(specs) // count
    total = 0
    for at in keep:
        entry, exit_ = spec_format.spec_event_sizes(specs[at * step:(at + 1) * step], byte_order)
        total += entry + exit_ + 2 * RING_HEADER
    return total / (2 * len(keep))


def ring_size(event_bytes: float, functions: int, pointer_size: int = 8,
              memory: int = 0) -> int:
    """The ring buffer's default size in bytes, from the bytes its events take (`event_bytes`:
    mean_event): room for RING_EVENTS of them and RING_EVENTS_A_FUNCTION more a function past
    64, as a power of two from 1 MiB up to 64 MiB (16 MiB on a 32-bit kernel, whose few hundred
    MiB of vmalloc space refused 64 at load on i386), or up to a sixteenth of the machine's
    `memory` (bytes) where that is more, at most 256 MiB: with the whole kernel traced, one
    large process's exit (its pages torn down) is hundreds of thousands of events at once,
    more than the reader writes in that time (the amd64 guest: docs/benchmarks.md, where the
    tracer's own fork once made such a burst). --ring-size says otherwise."""
    want = event_bytes * (RING_EVENTS + RING_EVENTS_A_FUNCTION * max(0, functions - 64))
    size = MIB
    top = 64 * MIB if pointer_size == 8 else 16 * MIB
    if pointer_size == 8:
        while top < RING_MOST and top * 2 * 16 <= memory:
            top *= 2
    while size < want and size < top:
        size *= 2
    return size


RING_MOST = 256 * MIB  # the default ring's largest (ring_size)


def memory_total() -> int:
    """This machine's memory in bytes (/proc/meminfo's MemTotal), 0 where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def run(directory: Path, opts: Options, out=sys.stdout) -> int:
    # A signal from here on ends the run at its next step, never in the middle of one.
    stop, old = catch_signals()
    try:
        return _run(directory, opts, out, stop)
    finally:
        restore_signals(old)


def _run(directory: Path, opts: Options, out, stop: list[int]) -> int:
    timings = Timings(opts.timings)
    manifest = load_manifest(directory)
    choice = processes(manifest, opts)
    if choice.argv:  # a command that cannot run is said before the setup, not after it
        command_path(choice.argv[0])
    with timings.stage("run: decoders load"):
        decoders = load_decoders(directory, manifest)
    for warning in check_target(manifest):
        print(f"{prog.NAME}: warning: {warning}", file=sys.stderr)
    reason = features.bpf_unavailable()
    if reason:
        raise RunError(f"BPF unavailable: {reason}")
    kernel = manifest.kernel
    names = manifest.functions
    tracefs.mount_tracefs()
    if kernel:
        with timings.stage("run: symbol check"):
            keep, skipped = tracefs.traceable(names)
        if skipped:
            print(f"{prog.NAME}: not traceable here (not in available_filter_functions), "
                  f"skipped: {', '.join(skipped)}", file=sys.stderr)
        if not keep:
            raise RunError("none of the functions can be traced on this kernel")
    else:
        keep = list(range(len(names)))
    who = everyone(choice)  # then each line says whose call it was
    modes = attach.attach_modes(opts.attach, kernel, manifest, keep, adjust=lambda m: (
        summary.entry_only(m, manifest, bool(opts.record))))
    # Each function decoded by the module of the ctx it is attached through (the trampoline's
    # slots or the kprobe's registers): set for the first mode, again for one it falls back to.
    view = DecoderView(decoders)
    _decode_as(view, directory, manifest, modes[0], keep)
    sink = printer = None
    # --count / --latency: the maps' summary, printed at the end and every --interval; no
    # event comes through the ring unless --record asks for them too.
    summed = summary.Summary(manifest, decoders, out, as_json=opts.as_json,
                             interval=opts.interval, map_size=opts.map_size) \
        if manifest.summary else None
    made: dict = {}  # the recording being written: a fallback writes it again
    with timings.stage("run: output setup"):
        if opts.record:
            made["writer"] = recorder(opts.record, manifest, view, who)
            sink = made["writer"].span  # a span of the ring, one write
        elif summed:
            sink = _no_events
        else:
            printer = output.Printer(LazyFunctions(view, names, manifest.btf_ids),
                                     decoders.BYTE_ORDER, out, who=who, errors=opts.errors,
                                     as_json=opts.as_json, prog=prog.NAME, batch=True,
                                     bytes_as=opts.bytes_as)
            # Formats the span's records, their lines in one write, keeping no view of the ring
            # (its bytes are the producer's again after the span).
            sink = printer.records

    def rebind(mode: attach.AttachMode, instead: list[int]):
        """The sink for `mode`, attached in place of the first (nothing recorded yet);
        `instead`: the functions the trampoline refused, on the kprobe link instead."""
        _decode_as(view, directory, manifest, mode, keep, instead)
        if not opts.record:
            return sink
        made["writer"].abandon()
        made["writer"] = recorder(opts.record, manifest, view, who)
        return made["writer"].span

    try:
        status, lost = _trace(directory, manifest, decoders, opts, keep, sink, timings,
                              printer.flush_lines if printer else None, modes, rebind,
                              summed, stop, choice)
    except BaseException:
        if made.get("writer"):
            made["writer"].abandon()
        raise
    finally:
        if printer and not printer.flush_lines() and out is sys.stdout:
            # Python flushes stdout again at exit: to nothing, not to the closed pipe.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    writer = made.get("writer")
    if writer:
        writer.close(sum(lost))
        print(f"{prog.NAME}: recorded {writer.events} events in {opts.record}", file=sys.stderr)
    # Never silent about what was lost, nor (recording) about what the BPF side made.
    say_lost(*lost, kept=writer.events if writer else None)
    return status


def recorder(path: str, manifest: Manifest, decoders, who: bool):
    header = {"format": "btfgen trace recording", "arch": manifest.arch, "who": who,
              "byte_order": decoders.BYTE_ORDER, "pointer_size": decoders.POINTER_SIZE,
              "kernel_release": os.uname().release, "kind": manifest.kind,
              "host": os.uname().nodename, "clock_offset_ns": time.time_ns() - time.monotonic_ns(),
              "program": manifest.program, "btf": manifest.btf,
              "btf_sha256": manifest.btf_sha256}
    if not isinstance(decoders, DecoderView):  # the generated module itself (benchmarks)
        decoders = DecoderView(decoders)
    descs = decoders.descriptors(manifest.functions)
    try:
        return recording.Writer(path, header, descs, decoders.BYTE_ORDER)
    except OSError as e:
        raise RunError(f"{path}: {e.strerror}") from None


def _decode_as(view: DecoderView, directory: Path, manifest: Manifest, mode: attach.AttachMode,
               keep: list[int], instead=()) -> None:
    """`view` decodes what `mode` puts on the trampoline with the trampoline ctx's module
    (not `instead`: the functions the trampoline refused, on the kprobe link)."""
    if not mode.trampoline:
        view.use(None, ())
        return
    taken, _ = attach.trampoline_split(manifest, keep)
    instead = set(instead)
    taken = [i for i in taken if i not in instead]
    module = load_decoders(directory, manifest.trampoline.module)
    view.use(module, [manifest.functions[i] for i in taken])


def _trace(directory: Path, manifest: Manifest, decoders, opts: Options, keep: list[int],
           sink, timings: Timings | None = None, drained=None, modes=None,
           rebind=None, summed: summary.Summary | None = None,
           stop: list[int] | None = None,
           choice: Processes | None = None) -> tuple[int, tuple[int, int]]:
    """(the exit status, records lost by why: losses.lost_by_reason); `sink(span)` takes each
    span of the ring's records (ringspan.Span); `drained()` after each drain of the ring
    buffer. `modes`: the ways to attach (attach.attach_modes); `rebind(mode)`: the sink for a
    mode fallen back to, where it decodes otherwise than the first; `summed` prints the
    summary maps every interval and at the end. `stop`: the signals caught since the run began
    (loop.catch_signals): one before anything is attached ends the run (Interrupted), one
    after ends it as Ctrl-C while tracing does. `choice`: what runs and is reported
    (processes(), as the caller found it)."""
    kernel = manifest.kernel
    stop = [] if stop is None else stop
    if stop:
        raise Interrupted(stop[0])
    timings = timings or Timings(False)
    fork_offset = tracefs.child_pid_offset()
    choice = choice or processes(manifest, opts)
    following = not everyone(choice)
    if following and fork_offset is None:
        print(f"{prog.NAME}: warning: no sched_process_fork event here: child processes "
              "are not traced", file=sys.stderr)
    modes = modes or attach.attach_modes(opts.attach, kernel, manifest)
    child = Gated(list(choice.argv)) if choice.argv else None
    instead: list[int] = []  # the trampoline's refusals, on the kprobe link
    only = child.pid if child else choice.pid
    try:
        for n, mode in enumerate(modes):
            obj = BpfObject(str(directory / mode.object), bpf_syscall=manifest.bpf_syscall)
            try:
                before = _load_and_attach(obj, directory, mode, manifest, opts, keep, only,
                                          fork_offset, following, timings, decoders, stop,
                                          instead)
                break
            except BaseException as e:
                obj.close()
                if not isinstance(e, BpfLoadError) or n + 1 == len(modes):
                    raise
                # Auto: a session the probe let through may still be refused (a kernel that
                # cannot put every function on the function-graph stack): the pair still works.
                print(f"{prog.NAME}: the {mode.said} was refused ({str(e).splitlines()[0]}): "
                      f"{modes[n + 1].announce()}", file=sys.stderr)
    except BaseException:
        if child:
            child.cancel()
        raise
    # The kernel's skipped calls so far, never less than read before: the links that count
    # some of them are gone once detached, and the summary's last print comes after that.
    missed_most = [0]

    def missed_now() -> int:
        missed_most[0] = max(missed_most[0], obj.missed(mode.programs))
        return missed_most[0]

    if summed:
        summed.attached(obj, missed_now)
        drained = _and_tick(drained, summed)
    if rebind and (mode.trampoline != modes[0].trampoline or instead):
        sink = rebind(mode, instead)
    with _detaching(obj, timings) as probes:
        probes.append(before)
        behind = Behind(sink, decoders.BYTE_ORDER)
        counted = obj.map_fd("committed") if obj.has_map("committed") else None
        with reader(obj.map_fd("events"), behind.span, counted) as rb:
            def begin():
                if child:
                    child.start()
                    return
                what = "kernel functions" if kernel else "functions"
                if manifest.library:
                    what += f" of {Path(manifest.program).name} in " + (
                        f"process {only}" if only else
                        "every process that maps it (this one excepted)")
                until = f"for {opts.duration:g}s" if opts.duration else "until Ctrl-C"
                print(f"{prog.NAME}: tracing {len(keep)} {what} {until}", file=sys.stderr,
                      flush=True)
            cpu = os.times()
            with timings.stage("run: tracing"), _reader_first(bool(opts.record)):
                status = follow(rb, child, opts, lambda: Losses.of(
                    obj, obj.missed(mode.programs), behind.take()), drained, begin, stop)
            _say_cpu(timings, cpu, rb)
            missed = missed_now()  # while the links that count it are there
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
            if summed:  # what the maps hold since the last print, before they are closed
                summed.print()
        said = _trampoline_said(mode)
        say_missed(missed, kernel, said, skipped_entries(obj) if said == "fsession" else 0)
        return status, lost_by_reason(obj)


# --record: the reader's nice value while tracing. On a CPU it shares with what it traces (one
# CPU, or more busy ones), the reader has the CPU in equal shares with the traced processes, and
# a record costs it more CPU than making it costs the kernel (the whole-kernel guest run,
# docs/benchmarks.md: ~23 us of the reader's against ~17 of the workload's): at nice 0 its
# thread had 33% of the one vCPU while tracing and kept 37% of the events. At -10 its weight is
# ~9 times a nice-0 process's (the scheduler's table): while records wait it runs first,
# slowing the traced work (which is then what tracing costs it) instead of losing its events;
# with nothing to read it sleeps and takes nothing.
READER_NICE = -10


@contextmanager
def _reader_first(recording: bool):
    """While recording, this thread (the reader) at READER_NICE, said; set back after. Where
    the system refuses (no CAP_SYS_NICE), that is said and the reader runs as it was."""
    if not recording:
        yield
        return
    try:
        was = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        yield
        return
    if was <= READER_NICE:
        yield
        return
    try:
        # PRIO_PROCESS of 0 on Linux: the calling thread only (nice is per thread); the traced
        # command was started before (Gated), at the tracer's nice before this.
        os.setpriority(os.PRIO_PROCESS, 0, READER_NICE)
    except OSError as e:
        print(f"{prog.NAME}: the reader stays at nice {was} (nice {READER_NICE} refused: "
              f"{e.strerror}): with what it traces on its CPU, it may fall behind",
              file=sys.stderr)
        yield
        return
    print(f"{prog.NAME}: the reader runs at nice {READER_NICE} (the traced processes at "
          f"theirs): records wait less, the traced work runs slower", file=sys.stderr)
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, was)
        except OSError:
            pass


def _say_cpu(timings: Timings, before, rb) -> None:
    """--timings: the tracer's CPU while tracing (user and system: a reader with less CPU than
    the tracing's wall time shared it with what it traced), and where the ring's reader spent
    its thread's (the walks of headers, the sink's writes)."""
    if not timings.on:
        return
    now = os.times()
    print(f"{prog.NAME}: time: run: tracing cpu: user {now[0] - before[0]:.2f} s, system "
          f"{now[1] - before[1]:.2f} s", file=sys.stderr)
    if hasattr(rb, "walk_s"):
        print(f"{prog.NAME}: time: run: reader cpu: walk {rb.walk_s:.2f} s, sink "
              f"{rb.sink_s:.2f} s; {rb.spans} spans, {rb.raw_spans} of them unwalked (the BPF "
              f"side's count said them committed)", file=sys.stderr)


def _trampoline_said(mode: attach.AttachMode) -> str:
    """What say_missed says of the trampoline's link: "fsession" (one program, a cookie a
    call), "fentry" (the fentry.multi / fexit.multi pair) or "" (not the trampoline)."""
    if not mode.trampoline:
        return ""
    return "fsession" if mode.programs == ("trace_session",) else "fentry"


def _no_events(span) -> None:
    """A summary's sink: the BPF side sends nothing then (a record here would be a bug of the
    BPF side's, not an event to print)."""


def _and_tick(drained, summed):
    """`drained` (or nothing), then the summary's interval clock."""
    def both():
        ok = drained() if drained else None
        summed.tick()
        return ok
    return both


def reader(map_fd: int, sink, committed_fd: int | None = None):
    """The ring's reader: its pages read in place (ringspan), or, where this machine has no
    fence to keep the ring's protocol with, libbpf's consumer (a record at a time, handed on
    as spans). `committed_fd`: the BPF side's count of committed records (trace.bpf.c's
    `committed`), where it keeps one."""
    why = ringspan.available()
    if not why:
        return ringspan.RingReader(map_fd, sink, committed_fd=committed_fd)
    print(f"{prog.NAME}: reading the ring buffer through libbpf: {why}", file=sys.stderr)
    return RingBuffer(map_fd, sink, spans=True)


def _load_and_attach(obj, directory: Path, mode: attach.AttachMode, manifest: Manifest,
                     opts: Options, keep: list[int], only: int, fork_offset: int | None,
                     following: bool, timings: Timings, decoders,
                     stop: list[int] | None = None, instead: list[int] | None = None) -> int:
    """Load `obj` for `mode` and attach it; -> how many links it had before the function
    probes (what _detaching detaches, timed). `decoders`: the generated module (its pointer
    size, and its copy of spec_format for the cookies)."""
    pointer_size = decoders.POINTER_SIZE
    kernel = manifest.kernel
    names = manifest.functions
    if mode.trampoline:
        trampoline_keep, _ = attach.trampoline_split(manifest, keep)
        if not trampoline_keep:
            raise BpfLoadError("none of the functions the trampoline takes is traceable here")
        for program, attach_type in zip(mode.programs, mode.attach_types):
            obj.expect_tracing(program, attach_type, names[trampoline_keep[0]]
                               if mode.kind == "fsession" else None)
    elif mode.kind != "single":
        for program in mode.programs:
            (obj.expect_kprobe_multi if kernel else obj.expect_uprobe_multi)(
                program, session=mode.kind == "session")
    obj.set_autoload("follow_fork", following and fork_offset is not None)
    if mode.kind in ("multi", "single") and "trace_exit" not in mode.programs:
        obj.set_autoload("trace_exit", False)  # a summary that needs no exit (entry_only)
    specs = (directory / (mode.specs or manifest.specs)).read_bytes()
    obj.set_max_entries("events", opts.ring_mib * MIB if opts.ring_mib else ring_size(
        mean_event(specs, len(names), keep, manifest.byte_order), len(keep), pointer_size,
        memory_total()))
    if mode.kind == "single":
        attach.enough_files(2 * len(keep) + 64)
    # One spec per function of the directory, however many (the object's own size is only a
    # default).
    obj.set_max_entries("specs", len(names))
    if manifest.summary:
        summary.before_load(obj, manifest, opts.map_size)
    with timings.stage("run: object load"):
        obj.load()
    if stop:  # signalled while loading (a whole kernel's verification takes seconds)
        raise Interrupted(stop[0])
    with timings.stage("run: spec map fill"):
        obj.fill_array("specs", specs, len(names))
    if manifest.summary:
        summary.after_load(obj, directory, manifest, bool(opts.record))
    for at, value in enumerate((1 if only else 0, os.getpid(), fork_offset or 0)):
        obj.update("filter", struct.pack("I", at), struct.pack("I", value))
    if only:
        obj.update("followed", struct.pack("I", only), b"\x01")
    if only and fork_offset is not None:
        obj.attach("follow_fork")
    kprobe = None
    if mode.trampoline and attach.trampoline_split(manifest, keep)[1]:
        with timings.stage("run: object load (kprobe link's)"):
            kprobe = _kprobe_companion(obj, directory, mode, manifest)
    before = len(obj.links)
    with timings.stage("run: attach"):
        if mode.trampoline:
            _attach_trampoline(obj, directory, mode, manifest, keep, specs, decoders, kprobe,
                               instead)
        else:
            attach.attach_functions(obj, manifest, keep, mode,
                                    cookies(decoders, specs, len(names), manifest.byte_order),
                                    stopped=lambda: bool(stop))
    return before


# What the objects of one run share (BpfObject.share_maps): the ring, its loss counts, and the
# settings. Not the scratch: a trampoline program may run inside another program on its CPU
# (the kernel keeps them from nesting only in themselves), so each object keeps its own.
SHARED_MAPS = ("events", "lost", "losses", "lost_threads", "filter", "followed")
# --count / --latency: every object's calls summed in the first one's maps (the ones read), and
# a thread's stack of call times one for all (an exit pops what its entry pushed, whichever
# object's program ran it).
SUMMARY_MAPS = ("sum_keys", "sum_mode", "sum_counts", "sum_hists", "sum_stats", "sum_calls",
                "sum_depth")


def _shared(manifest: Manifest, obj) -> tuple[str, ...]:
    # The ring's commit count (64-bit builds): every object writing to the ring adds to it.
    counted = ("committed",) if obj.has_map("committed") else ()
    return SHARED_MAPS + counted + (SUMMARY_MAPS if manifest.summary else ())


def _kprobe_companion(obj, directory: Path, mode: attach.AttachMode, manifest: Manifest):
    """The object of the kprobe link (mode.rest) for what the trampoline cannot take, loaded,
    writing to `obj`'s ring, its specs filled."""
    names = manifest.functions
    kprobe = BpfObject(str(directory / mode.rest.object), bpf_syscall=manifest.bpf_syscall)
    obj.companions.append(kprobe)
    kprobe.share_maps(obj, _shared(manifest, obj))
    if mode.rest.kind != "single":
        for program in mode.rest.programs:
            kprobe.expect_kprobe_multi(program, session=mode.rest.kind == "session")
    kprobe.set_autoload("follow_fork", False)
    kprobe.set_max_entries("specs", len(names))
    kprobe.load()
    kprobe.fill_array("specs", (directory / manifest.specs).read_bytes(), len(names))
    return kprobe


def _attach_trampoline(obj, directory: Path, mode: attach.AttachMode, manifest: Manifest,
                       keep: list[int], specs: bytes, decoders, kprobe,
                       instead: list[int]) -> None:
    """The trampoline's links for what it takes of `keep`, and the kprobe link (mode.rest) of
    `kprobe` (_kprobe_companion) for the rest."""
    names, order = manifest.functions, manifest.byte_order
    taken, rest = attach.trampoline_split(manifest, keep)

    def fsession_object(name: str):
        # One program a function: the object again, its program on `name`.
        more = BpfObject(str(directory / mode.object), bpf_syscall=manifest.bpf_syscall)
        obj.companions.append(more)
        more.share_maps(obj, (*_shared(manifest, obj), "specs"))
        more.expect_tracing(mode.programs[0], mode.attach_types[0], name)
        more.set_autoload("follow_fork", False)
        more.load()
        return more

    moved = attach.attach_trampoline(obj, manifest, taken, mode,
                                     cookies(decoders, specs, len(names), order),
                                     fsession_object)
    if moved:
        # The module's functions the trampoline refused: on the kprobe link of the run (made
        # now if nothing else needed one), decoded as the kprobe's (_decode_as).
        instead.extend(moved)
        if mode.rest is None:
            mode = mode._replace(rest=attach.kprobe_mode(manifest))
        if kprobe is None:
            kprobe = _kprobe_companion(obj, directory, mode, manifest)
        rest = sorted(rest + moved)
    if not rest:
        return
    kspecs = (directory / manifest.specs).read_bytes()
    attach.attach_functions(kprobe, manifest, rest, mode.rest,
                            cookies(decoders, kspecs, len(names), order))
    obj.links.extend(kprobe.links)


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
