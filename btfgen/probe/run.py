"""`btfgen trace`'s run step: load a trace directory (btfgen.trace.build wrote it), attach its
functions, and print or record every traced call and return until the command exits. A run is
one object (Run) with a lifetime: set up (the directory's decoders, what can be traced here,
the output), trace (load, attach, follow the ring), detach. What it does at each step lives in
its own module: manifest.py, features.py, attach.py, ring.py, loop.py, losses.py, output.py,
recording.py.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from . import attach, features, output, prog, recording, stack_summary, stack_wire, summary, tracefs
from .bpf_object import BpfObject
from .errors import BadInput, BpfLoadError, Interrupted, RunError
from .loop import catch_signals, follow, restore_signals
from .losses import Behind, Losses, lost, lost_by_reason, say_lost, say_missed, skipped_entries
from .manifest import (
    DecoderView,
    LazyFunctions,
    Manifest,
    check_target,
    cookies,
    load_decoders,
    load_manifest,
)
from .options import Options
from .processes import Gated, command_path, everyone, processes
from .ring import MIB, mean_event, memory_total, reader, ring_size  # noqa: F401 (run.MIB, ...)
from .stack_notes import StackNotes
from .symbolize import KALLSYMS, Stacks
from .timings import Timings


def run(directory: Path, opts: Options, out=sys.stdout) -> int:
    # A signal from here on ends the run at its next step, never in the middle of one.
    stop, old = catch_signals()
    try:
        return Run(directory, opts, out, stop).main()
    finally:
        restore_signals(old)


class Run:
    """One trace run of a trace directory: what it was asked (opts), what the directory holds
    (manifest, decoders), what it decided here (the functions kept, the attach modes, the
    trampoline's refusals moved to the kprobe link), its output (a printer, a recording or a
    summary) and, once attached, its object, mode and links. main() is the whole run; set up,
    trace and detach are its steps. `stop`: the signals caught since the run began
    (loop.catch_signals): one before anything is attached ends the run (Interrupted), one after
    ends it as Ctrl-C while tracing does."""

    def __init__(self, directory: Path, opts: Options, out=sys.stdout,
                 stop: list[int] | None = None) -> None:
        self.directory, self.opts, self.out = directory, opts, out
        self.stop = [] if stop is None else stop
        self.timings = Timings(opts.timings)
        self.manifest: Manifest = load_manifest(directory)
        if self.manifest.stack_keys and opts.record:
            raise BadInput(f"{directory} was built with --by {self.manifest.stack_keys.by}: its "
                           "calls are counted by the tracer from their events; recording them "
                           "beside it is not built yet")
        if self.manifest.stack_keys and opts.map_size is not None:
            raise BadInput(f"{directory} was built with --by {self.manifest.stack_keys.by}: its "
                           "calls are counted by the tracer, in no map of --map-size")
        self.choice = processes(self.manifest, opts)
        if self.choice.argv:  # a command that cannot run is said before the setup, not after
            command_path(self.choice.argv[0])
        with self.timings.stage("run: decoders load"):
            self.decoders = load_decoders(directory, self.manifest)
        self.keep = list(range(len(self.manifest.functions)))
        self.view = DecoderView(self.decoders)
        self.modes: list[attach.AttachMode] = []
        # The module's functions the trampoline refused while attaching: on the kprobe link
        # of the run instead, and decoded as the kprobe's (decode_as).
        self.instead: list[int] = []
        self.writer = self.printer = self.summed = None
        self.sink = None
        self.child: Gated | None = None
        self.only = self.choice.pid  # the one process followed (0: every one)
        self.fork_offset: int | None = None
        self.following = False
        self.obj = self.mode = None
        self.probes_from: int | None = None  # the object's links from here on: the probes
        # The kernel's skipped calls so far, never less than read before: the links that
        # count some of them are gone once detached, and the summary's last print comes after.
        self.missed_most = 0
        self.missed = 0  # read as the tracing ended (missed_now)

    # -- the whole run ---------------------------------------------------------------------

    def main(self) -> int:
        self.setup()
        try:
            status, lost = self.trace()
        except BaseException:
            if self.writer:
                self.writer.abandon()
            raise
        finally:
            if self.printer and not self.printer.flush_lines() and self.out is sys.stdout:
                # Python flushes stdout again at exit: to nothing, not to the closed pipe.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if self.writer:
            self.writer.close(sum(lost))
            prog.say(f"recorded {self.writer.events} events in {self.opts.record}")
        # Never silent about what was lost, nor (recording) about what the BPF side made.
        say_lost(*lost, kept=self.writer.events if self.writer else None)
        return status

    # -- set up ----------------------------------------------------------------------------

    def setup(self) -> None:
        """What can be traced here, how it is attached, and where its events go."""
        manifest, opts = self.manifest, self.opts
        for warning in check_target(manifest):
            prog.say(f"warning: {warning}")
        bpf = features.bpf_programs()
        if not bpf:
            raise RunError(f"BPF unavailable: {bpf.why}")
        tracefs.mount_tracefs()
        if manifest.kernel:
            with self.timings.stage("run: symbol check"):
                self.keep, skipped = tracefs.traceable(manifest.functions)
            if skipped:
                prog.say("not traceable here (not in available_filter_functions), "
                         f"skipped: {', '.join(skipped)}")
            if not self.keep:
                raise RunError("none of the functions can be traced on this kernel")
        self.modes = attach.attach_modes(opts.attach, manifest.kernel, manifest, self.keep,
                                         adjust=lambda m: summary.entry_only(
                                             m, manifest, bool(opts.record)),
                                         sleepable=opts.sleepable)
        # Each function decoded by the module of the ctx it is attached through (the
        # trampoline's slots or the kprobe's registers): set for the first mode, again for one
        # it falls back to.
        self.decode_as(self.modes[0])
        # --count / --latency: the maps' summary, printed at the end and every --interval; no
        # event comes through the ring unless --record asks for them too.
        if manifest.summary:
            self.summed = summary.Summary(manifest, self.decoders, self.out,
                                          as_json=opts.as_json, interval=opts.interval,
                                          map_size=opts.map_size)
        elif manifest.stack_keys:  # --by kstack / ustack: summed here from the events
            self.summed = stack_summary.StackSummary(
                manifest, LazyFunctions(self.view, manifest.functions, manifest.btf_ids),
                self.stacks(), self.decoders.BYTE_ORDER, self.out, as_json=opts.as_json,
                interval=opts.interval)
        with self.timings.stage("run: output setup"):
            self.sink = self.output()

    def output(self):
        """The sink of the ring's spans: a recording, nothing (a summary), or the printer."""
        who = everyone(self.choice)  # then each line says whose call it was
        if self.opts.record:
            self.writer = recorder(self.opts.record, self.manifest, self.view, who)
            if self.manifest.stack:  # what names the stacks elsewhere, noted before each span
                return StackNotes(self.writer, self.view.descriptors(self.manifest.functions),
                                  self.manifest.arch, self.decoders.BYTE_ORDER,
                                  self.opts.kallsyms or KALLSYMS).span
            return self.writer.span  # a span of the ring, one write
        if self.manifest.stack_keys:
            return self.summed.records  # each call's event, counted by its stack
        if self.summed:
            return _no_events
        m = self.manifest
        self.printer = output.Printer(LazyFunctions(self.view, m.functions, m.btf_ids),
                                      self.decoders.BYTE_ORDER, self.out, who=who,
                                      errors=bool(self.opts.errors), kernel=m.kernel,
                                      errors_are=output.chosen_errors(self.opts.errors),
                                      decided=retval_decided(m), as_json=self.opts.as_json,
                                      batch=True, bytes_as=self.opts.bytes_as,
                                      stacks=self.stacks() if m.stack else None)
        # Formats the span's records, their lines in one write, keeping no view of the ring
        # (its bytes are the producer's again after the span).
        return self.printer.records

    def stacks(self) -> Stacks:
        """--stack's frames named: the kernel's by --kallsyms or this machine's."""
        return Stacks(self.manifest.arch, self.decoders.BYTE_ORDER,
                      self.opts.kallsyms or KALLSYMS)

    def decode_as(self, mode: attach.AttachMode) -> None:
        """The view decodes what `mode` puts on the trampoline with the trampoline ctx's
        module (not what the trampoline refused: on the kprobe link)."""
        if not mode.trampoline:
            self.view.use(None, ())
            return
        taken, _ = attach.trampoline_split(self.manifest, self.keep)
        instead = set(self.instead)
        taken = [i for i in taken if i not in instead]
        module = load_decoders(self.directory, self.manifest.trampoline.module)
        self.view.use(module, [self.manifest.functions[i] for i in taken])

    def rebind(self) -> None:
        """The sink for the mode attached in place of the first (nothing recorded yet)."""
        self.decode_as(self.mode)
        if self.opts.record:
            self.writer.abandon()
            self.writer = None
            self.sink = self.output()

    # -- trace -----------------------------------------------------------------------------

    def trace(self) -> tuple[int, tuple[int, int]]:
        """(the exit status, records lost by why: losses.lost_by_reason): attached, followed
        until the command exits (or the duration, or a signal), detached, drained."""
        if self.stop:
            raise Interrupted(self.stop[0])
        self.fork_offset = tracefs.child_pid_offset()
        self.following = not everyone(self.choice)
        if self.following and self.fork_offset is None:
            prog.say("warning: no sched_process_fork event here: child processes "
                     "are not traced")
        self.modes = self.modes or attach.attach_modes(self.opts.attach, self.manifest.kernel,
                                                       self.manifest,
                                                       sleepable=self.opts.sleepable)
        self.child = Gated(list(self.choice.argv)) if self.choice.argv else None
        self.only = self.child.pid if self.child else self.choice.pid
        try:
            self.attach()
        except BaseException:
            if self.child:
                self.child.cancel()
            raise
        drained = self.printer.flush_lines if self.printer else None
        if self.summed:
            if self.manifest.stack_keys:  # its calls' records lost are calls not counted
                self.summed.attached(self.obj, self.missed_now, lambda: lost(self.obj))
            else:
                self.summed.attached(self.obj, self.missed_now)
            drained = _and_tick(drained, self.summed)
        if self.mode.trampoline != self.modes[0].trampoline or self.instead:
            self.rebind()
        try:
            status = self.follow(drained)
            said = _trampoline_said(self.mode)
            say_missed(self.missed, self.manifest.kernel, said,
                       skipped_entries(self.obj) if said == "fsession" else 0)
            return status, lost_by_reason(self.obj)  # while its maps are open
        finally:
            self.detach()
            with self.timings.stage("run: object close"):
                self.obj.close()

    def attach(self) -> None:
        """The first of the modes this kernel takes, loaded and attached (a refused one said,
        and the next tried)."""
        modes = self.modes
        for n, mode in enumerate(modes):
            attach.held(mode, self.manifest)  # a fallback's: one line, as the first's
            obj = BpfObject(str(self.directory / mode.object),
                            bpf_syscall=self.manifest.bpf_syscall)
            try:
                self.probes_from = self.load_and_attach(obj, mode)
                self.obj, self.mode = obj, mode
                return
            except BaseException as e:
                obj.close()
                self.instead.clear()
                if not isinstance(e, BpfLoadError) or n + 1 == len(modes):
                    raise
                # Auto: a session the probe let through may still be refused (a kernel that
                # cannot put every function on the function-graph stack): the pair still works.
                prog.say(f"the {mode.what} was refused ({str(e).splitlines()[0]}): "
                         f"{modes[n + 1].announce()}")

    def follow(self, drained) -> int:
        """Trace until the end, then detach and drain the ring to its last record; the exit
        status."""
        obj, mode, timings = self.obj, self.mode, self.timings
        behind = Behind(self.sink, self.decoders.BYTE_ORDER)
        counted = obj.map_fd("committed") if obj.has_map("committed") else None
        with reader(obj.map_fd("events"), behind.span, counted) as rb:
            cpu = os.times()
            with timings.stage("run: tracing"), _reader_first(bool(self.opts.record)):
                status = follow(rb, self.child, self.opts, lambda: Losses.of(
                    obj, obj.missed(mode.programs), behind.take()), drained, self.begin,
                    self.stop)
            _say_cpu(timings, cpu, rb)
            self.missed = self.missed_now()  # while the links that count it are there
            # Then no call makes a record any more: what the ring buffer holds is all there
            # is, drained to the end (a traced process that goes on calling, after a signal
            # stopped the tracing, cannot keep the drain going).
            self.detach()
            rb.poll(50)  # a program still running at the detach: its record, 50 ms on
            while rb.drain() > 0:
                pass
            if drained:
                drained()
            if self.summed:  # what the maps hold since the last print, before they are closed
                self.summed.print()
        return status

    def begin(self) -> None:
        """The traced command started, or the line that tracing began."""
        if self.child:
            self.child.start()
            return
        m = self.manifest
        what = "kernel functions" if m.kernel else "functions"
        if m.library:
            what += f" of {Path(m.program).name} in " + (
                f"process {self.only}" if self.only else
                "every process that maps it (this one excepted)")
        until = f"for {self.opts.duration:g}s" if self.opts.duration else "until Ctrl-C"
        prog.say(f"tracing {len(self.keep)} {what} {until}",
                 flush=True)

    def missed_now(self) -> int:
        self.missed_most = max(self.missed_most, self.obj.missed(self.mode.programs))
        return self.missed_most

    # -- load and attach -------------------------------------------------------------------

    def load_and_attach(self, obj, mode: attach.AttachMode) -> int:
        """Load `obj` for `mode` and attach it; -> how many links it had before the function
        probes (what detach() destroys, timed)."""
        m, opts, timings = self.manifest, self.opts, self.timings
        names, keep = m.functions, self.keep
        if mode.trampoline:
            trampoline_keep, _ = attach.trampoline_split(m, keep)
            if not trampoline_keep:
                raise BpfLoadError("none of the functions the trampoline takes is traceable "
                                   "here")
            for program, attach_type in zip(mode.programs, mode.attach_types):
                obj.expect_tracing(program, attach_type, names[trampoline_keep[0]]
                                   if mode.kind == "fsession" else None)
        elif mode.kind != "single":
            for program in mode.programs:
                (obj.expect_kprobe_multi if m.kernel else obj.expect_uprobe_multi)(
                    program, session=mode.kind == "session")
        obj.set_autoload("follow_fork", self.following and self.fork_offset is not None)
        if obj.has_program("syscall_exit"):  # a user trace (built since it had one)
            obj.set_autoload("syscall_exit", self.errnos_wanted())
        if mode.kind in ("multi", "single") and "trace_exit" not in mode.programs:
            obj.set_autoload("trace_exit", False)  # a summary that needs no exit (entry_only)
        specs = (self.directory / (mode.specs or m.specs)).read_bytes()
        obj.set_max_entries("events", opts.ring_mib * MIB if opts.ring_mib else ring_size(
            mean_event(specs, len(names), keep, m.byte_order) + stack_wire.mean_part(m.stack),
            len(keep),
            self.decoders.POINTER_SIZE, memory_total()))
        if mode.kind == "single":
            attach.enough_files(2 * len(keep) + 64)
        # One spec per function of the directory, however many (the object's own size is
        # only a default).
        obj.set_max_entries("specs", len(names))
        if m.summary:
            summary.before_load(obj, m, opts.map_size)
        with timings.stage("run: object load"):
            obj.load()
        if self.stop:  # signalled while loading (a whole kernel's verification takes seconds)
            raise Interrupted(self.stop[0])
        with timings.stage("run: spec map fill"):
            obj.fill_array("specs", specs, len(names))
        if m.summary:
            summary.after_load(obj, self.directory, m, bool(opts.record))
        self.set_filter(obj)
        if obj.has_program("syscall_exit") and self.errnos_wanted():
            self.attach_errnos(obj)
        kprobe = None
        if mode.trampoline and attach.trampoline_split(m, keep)[1]:
            with timings.stage("run: object load (kprobe link's)"):
                kprobe = attach.kprobe_companion(obj, self.directory, m, mode.rest)
        before = len(obj.links)
        with timings.stage("run: attach"):
            if mode.trampoline:
                self.attach_trampoline(obj, mode, specs, kprobe)
            else:
                attach.attach_functions(obj, m, keep, mode, cookies(
                    self.decoders, specs, len(names), m.byte_order),
                    stopped=lambda: bool(self.stop))
        return before

    def errnos_wanted(self) -> bool:
        """A user function's exit is printed or recorded: its errno, where a system call in it
        failed, is sent with it (trace.bpf.c's syscall_exit). A summary alone prints none."""
        return not self.manifest.kernel and not self.manifest.stack_keys and (
            not self.manifest.summary or bool(self.opts.record))

    def attach_errnos(self, obj) -> None:
        """raw_syscalls:sys_exit, for the errno of a user function's -1 or NULL. Where it
        cannot be attached, said: every return is then shown bare, as one whose errno is not
        known."""
        try:
            obj.attach("syscall_exit")
        except BpfLoadError as e:
            prog.say(f"warning: no raw_syscalls:sys_exit program ({e}): a -1 or NULL return "
                     "is shown without its errno")

    def set_filter(self, obj) -> None:
        """The processes the BPF side reports (trace.bpf.c's filter and followed maps), and
        the fork tracepoint that follows their children."""
        only, fork_offset = self.only, self.fork_offset
        for at, value in enumerate((1 if only else 0, os.getpid(), fork_offset or 0)):
            obj.update("filter", struct.pack("I", at), struct.pack("I", value))
        if only:
            obj.update("followed", struct.pack("I", only), b"\x01")
        if only and fork_offset is not None:
            obj.attach("follow_fork")

    def attach_trampoline(self, obj, mode: attach.AttachMode, specs: bytes, kprobe) -> None:
        """The trampoline's links for what it takes of the functions kept, and the kprobe link
        (mode.rest) of `kprobe` (attach.kprobe_companion) for the rest."""
        m = self.manifest
        names, order = m.functions, m.byte_order
        taken, rest = attach.trampoline_split(m, self.keep)
        moved = attach.attach_trampoline(obj, m, taken, mode,
                                         cookies(self.decoders, specs, len(names), order),
                                         self.directory)
        if moved:
            # The module's functions the trampoline refused: on the kprobe link of the run
            # (made now if nothing else needed one), decoded as the kprobe's (decode_as).
            self.instead = list(moved)
            if mode.rest is None:
                mode = mode._replace(rest=attach.kprobe_mode(m))
            if kprobe is None:
                kprobe = attach.kprobe_companion(obj, self.directory, m, mode.rest)
            rest = sorted(rest + moved)
        if not rest:
            return
        kspecs = (self.directory / m.specs).read_bytes()
        attach.attach_companion(kprobe, obj, m, rest, mode.rest,
                                cookies(self.decoders, kspecs, len(names), order))

    # -- detach ----------------------------------------------------------------------------

    def detach(self) -> None:
        """Destroy the function probes' links (once), timed apart from the rest (the fork
        tracepoint's link, the object)."""
        if self.probes_from is not None:
            with self.timings.stage("run: detach"):
                for link in reversed(self.obj.links[self.probes_from:]):
                    link.destroy()
            self.probes_from = None


def retval_decided(manifest: Manifest) -> frozenset:
    """The BTF ids of the functions whose --filter decides on $retval."""
    return frozenset(manifest.btf_ids[i] for i in manifest.retval_filtered or ())


def recorder(path: str, manifest: Manifest, decoders, who: bool):
    header = {"format": "btfgen trace recording", "arch": manifest.arch, "who": who,
              "byte_order": decoders.BYTE_ORDER, "pointer_size": decoders.POINTER_SIZE,
              "kernel_release": os.uname().release, "kind": manifest.kind,
              "host": os.uname().nodename, "clock_offset_ns": time.time_ns() - time.monotonic_ns(),
              "program": manifest.program, "btf": manifest.btf,
              "btf_sha256": manifest.btf_sha256}
    if manifest.stack:  # what each entry's stack part holds: decode names it from the notes
        header["stack"] = list(manifest.stack)
    if manifest.retval_filtered:  # --errors on the recording: their filter chose their exits
        header["retval_filtered"] = sorted(retval_decided(manifest))
    if not isinstance(decoders, DecoderView):  # the generated module itself (benchmarks)
        decoders = DecoderView(decoders)
    descs = decoders.descriptors(manifest.functions)
    try:
        return recording.Writer(path, header, descs, decoders.BYTE_ORDER)
    except OSError as e:
        raise RunError(f"{path}: {e.strerror}") from None


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
        prog.say(f"the reader stays at nice {was} (nice {READER_NICE} refused: "
                 f"{e.strerror}): with what it traces on its CPU, it may fall behind")
        yield
        return
    prog.say(f"the reader runs at nice {READER_NICE} (the traced processes at "
             f"theirs): records wait less, the traced work runs slower")
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
    prog.say(f"time: run: tracing cpu: user {now[0] - before[0]:.2f} s, system "
             f"{now[1] - before[1]:.2f} s")
    if hasattr(rb, "walk_s"):
        prog.say(f"time: run: reader cpu: walk {rb.walk_s:.2f} s, sink "
                 f"{rb.sink_s:.2f} s; {rb.spans} spans, {rb.raw_spans} of them unwalked (the BPF "
                 f"side's count said them committed)")


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

