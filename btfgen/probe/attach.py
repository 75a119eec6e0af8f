"""How a trace's functions are attached, best first (as bpftrace's attached_probe): for kernel
functions, the BPF trampoline where the kernel and the trace directory have it (one
fsession.multi link, Linux 7.2 on x86_64, else an fentry.multi and an fexit.multi link; each
function's arguments read from the trampoline's u64 slots), the functions it cannot take
(a struct returned, too many slots) on a kprobe link of the same run; then one session
link where the kernel has them (kprobe.session, Linux 6.10+; uprobe.session, 6.13+: one
program for entry and exit, the per-call state in the session cookie), else one kprobe_multi
(uprobe_multi) link per direction, else one kprobe and kretprobe (uprobe and uretprobe) each,
Linux 5.15+ (Debian 12's 6.1 has no uprobe_multi). The cookie of each function
(spec_format.Cookie) is its index in the manifest, which is also where its spec sits in the
`specs` map, and, where the register image decodes it, its BTF id and a bit per direction.
The trampoline's companions are here too: the objects loaded beside the first for its kprobe
link and for each function's fsession program, writing to the first one's ring and maps.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import NamedTuple

from . import features, prog
from .bpf_object import BpfObject
from .errors import BpfLoadError, InputError, RunError
from .manifest import KERNEL_BTF, Manifest
from .syscall import (
    BPF_TRACE_FENTRY_MULTI,
    BPF_TRACE_FEXIT_MULTI,
    BPF_TRACE_FSESSION,
    BPF_TRACE_FSESSION_MULTI,
)

# One fsession program a function, each verified on its own: for a few functions only.
FSESSION_MAX = 16
# What --attach takes on the trampoline, and the trace directory's objects for each variant
# (btfgen.trace.build.TRAMPOLINE_OBJECTS).
TRAMPOLINE_ASKED = ("tracing-multi", "fentry-multi", "fsession")


class AttachMode(NamedTuple):
    kind: str  # "session", "multi" or "single"; "tracing_multi" or "fsession" (trampoline)
    object: str  # its BPF object in the trace directory
    programs: tuple[str, ...]
    said: str  # what is attached, for the messages
    why: str = ""  # why this one: the others are missing, or it was asked for
    attach_types: tuple[int, ...] = ()  # the trampoline's: each program's (syscall.BPF_TRACE_*)
    specs: str = ""  # the trampoline's spec table (its ctx: slots), else the manifest's
    rest: AttachMode | None = None  # the trampoline's: how what it cannot take is attached
    sleepable: bool = False  # user functions: sleepable programs, user memory faulted in

    def announce(self) -> str:
        return f"attaching {self.what}" + (f" ({self.why})" if self.why else "")

    @property
    def what(self) -> str:
        """What is attached, sleepable or not."""
        return f"{self.said}, sleepable" if self.sleepable else self.said

    @property
    def trampoline(self) -> bool:
        return self.kind in ("tracing_multi", "fsession")


def attach_modes(asked: str, kernel: bool, manifest: Manifest,
                 keep: list[int] | None = None, adjust=None,
                 sleepable: bool = True) -> list[AttachMode]:
    """plan_modes' modes, what it has to say said (which one is tried and why)."""
    modes, said = plan_modes(asked, kernel, manifest, keep, adjust, sleepable)
    held(modes[0], manifest)  # before saying it is attached
    for line in said:
        prog.say(line)
    return modes


def held(mode: AttachMode, manifest: Manifest) -> None:
    """`mode`'s object is in the trace directory, else an InputError of one line: a directory
    built for a run on the machine that built it (one command) holds only the objects that run
    loads (objects_loaded), and a run with other options, or another kernel, may want
    another."""
    if not manifest.holds(mode.object):
        raise InputError(f"the trace directory holds no {mode.object} for the {mode.what} (it "
                         f"has {', '.join(manifest.objects) or 'none'}: built for another run's "
                         "attach mode); build it with --build DIR to have every one")


def objects_loaded(asked: str, manifest: Manifest,
                   sleepable: bool = True) -> list[str] | None:
    """A user trace directory's objects a run here with `--attach asked` (and --no-sleepable
    where not `sleepable`) may load, in the order it may: its first mode's, then each one it
    falls back to should the kernel refuse a load (Run.attach). The one decision both sides
    take: the run picks its object from plan_modes, and a build for a run on this machine (one
    command) compiles these and no other. A run that cannot be made here (an InputError or
    RunError) is plan_modes' to raise. None for a kernel trace: what its run loads depends on
    which functions are traceable here and which the trampoline refuses while attaching, so
    its build compiles every object."""
    if manifest.kernel:
        return None
    modes, _ = plan_modes(asked, False, manifest, sleepable=sleepable)
    return list(dict.fromkeys(mode.object for mode in modes))


def plan_modes(asked: str, kernel: bool, manifest: Manifest,
               keep: list[int] | None = None, adjust=None,
               sleepable: bool = True) -> tuple[list[AttachMode], list[str]]:
    """(the ways to attach, best first (a refused one falls back to the next); the lines that
    say which one is tried and why). `auto` takes one fsession.multi link where the kernel and
    the trace directory have it, else the kprobe modes; not the fentry.multi / fexit.multi
    pair, whose exits cannot be paired with their entries (FENTRY_PAIR_UNPAIRED). User
    functions: each mode's sleepable programs first where the kernel takes them (`sleepable`:
    unless asked not to). `adjust(mode)`: each kprobe mode as the run needs it (a summary's
    entry alone: summary.entry_only), before it is said."""
    if asked in TRAMPOLINE_ASKED:
        tramp, why = _trampoline_mode(asked, kernel, manifest, keep)
        if tramp is None:
            raise InputError(f"--attach {asked}: {why}")
        said = [tramp.announce()]
        if tramp.programs != ("trace_session",):
            said.append(FENTRY_PAIR_UNPAIRED)
        return [tramp], said
    if asked == "auto" and kernel and manifest.trampoline:
        tramp, why = _trampoline_mode(asked, kernel, manifest, keep)
        if tramp is not None:
            # Its fallbacks, should the kernel refuse the link: the kprobe modes, unsaid
            # until taken (where the kernel has no kprobes either, the trampoline alone).
            try:
                rest = _kprobe_modes(asked, kernel, manifest, quiet=True)
            except RunError:
                rest = []
            if adjust:
                rest = [adjust(m) for m in rest]
            return [tramp, *rest], [tramp.announce()]
        modes = _kprobe_modes(asked, kernel, manifest)
        modes[0] = modes[0]._replace(why="; ".join(
            w for w in (modes[0].why, f"not the BPF trampoline: {why}") if w))
    else:
        modes = _kprobe_modes(asked, kernel, manifest)
    if not kernel and sleepable:
        modes = _sleepable_first(modes, manifest)
    if adjust:
        modes = [adjust(m) for m in modes]
    return modes, [modes[0].announce()]


def _sleepable_first(modes: list[AttachMode], manifest: Manifest) -> list[AttachMode]:
    """Each user mode preceded by the same mode with the trace directory's sleepable programs
    (a page of user memory not yet mapped in is read, not a fault), where the kernel takes
    them in that mode; where it does not, the mode says why. A directory built without them
    (an older btfgen) reads as before, unsaid."""
    objects = manifest.sleepable_objects
    if not objects:
        return modes
    out = []
    for mode in modes:
        key = "pair" if mode.kind != "session" else next(
            (k for k, o in (manifest.session_objects or {}).items() if o == mode.object), None)
        why = features.sleepable_uprobes(manifest.bpf_syscall, mode.kind).why
        if key not in objects or why:
            why = why or "no sleepable program for it in this trace directory"
            out.append(mode._replace(why="; ".join(w for w in (
                mode.why, f"not sleepable, user memory not yet paged in reads as a fault: {why}")
                if w)))
            continue
        out += [mode._replace(object=objects[key], sleepable=True), mode]
    return out


# Said where the fentry.multi / fexit.multi pair is asked for (auto never takes it). The two
# programs are each skipped by the kernel's recursion check on their own (a trampoline's
# program runs preemptible; one already running on that CPU, as in a task it preempted, is
# skipped and counted in recursion_misses): in the amd64 7.2 guest thousands of runs over the
# fetcher test's workload (docs/live-kernels.md). No per-call state passes from one program to the
# other to tell an exit whose entry was skipped, which would then pair with an older open call
# of its function on its thread: such records are sent flagged (spec_format.EVENT_UNPAIRED).
FENTRY_PAIR_UNPAIRED = ("warning: the fentry.multi and fexit.multi programs are each skipped by "
                        "the kernel on their own, and nothing tells an exit whose entry was "
                        "skipped: exits are shown without their entry's arguments and duration "
                        "(an fsession.multi link, or --attach session, pairs them)")


def _kprobe_modes(asked: str, kernel: bool, manifest: Manifest,
                  quiet: bool = False) -> list[AttachMode]:
    """attach_modes without the trampoline, unsaid."""
    modes = []
    if asked in ("auto", "session"):
        session, why = _session_mode(kernel, manifest)
        if session is None and asked == "session":
            # Wrong cookies are not a missing feature but wrong values: refused as bad input.
            raise (InputError if why == _wrong_cookies(kernel, manifest) else RunError)(
                f"--attach session: {why}")
        if session is not None:
            modes.append(session._replace(why="as asked" if asked == "session" else
                                          "entry and exit on one link"))
            if asked == "auto":
                modes.append(_pair_or_single("auto", kernel, manifest, quiet=True))
        else:
            modes.append(_pair_or_single("auto", kernel, manifest, no_session=why,
                                         quiet=quiet))
    else:
        modes.append(_pair_or_single(asked, kernel, manifest))
    return modes


def _trampoline_mode(asked: str, kernel: bool, manifest: Manifest,
                     keep: list[int] | None) -> tuple[AttachMode | None, str]:
    """The trampoline's mode for `asked` ("tracing-multi": the first of tracing-multi this
    kernel has; "fentry-multi": its fentry.multi / fexit.multi pair; "fsession"; "auto": an
    fsession.multi link only), or (None, why not). `keep`:
    the functions traceable here (all: None)."""
    if not kernel:
        return None, "the trampoline is for kernel functions (--kernel)"
    tramp = manifest.trampoline
    if not tramp:
        return None, ("this trace directory has no trampoline programs (built for a kernel "
                      "whose BTF has no BPF_TRACE_FSESSION or BPF_TRACE_FENTRY_MULTI, for an "
                      "arch without a trampoline context, or by an older btfgen)")
    if not _same_btf(manifest):
        # The link names functions by BTF id: another kernel's ids are other functions.
        return None, (f"the trace directory was built for the BTF of {manifest.btf}, not "
                      "this kernel's, and the trampoline names functions by BTF id")
    names = manifest.functions
    here = range(len(names)) if keep is None else keep
    # What it cannot take of the functions traced here: on a kprobe link of the run.
    refused = {str(i): tramp.refused[str(i)] for i in here if str(i) in tramp.refused}
    taken = len(here) - len(refused)
    if not taken:
        first = next(iter(refused.items()), None)
        return None, "no function of this trace can be taken by the trampoline" + (
            f" (as {names[int(first[0])]}: {first[1]})" if first else "")
    rest = None
    if refused:
        rest = _kprobe_modes("auto", kernel, manifest, quiet=True)[0]
    objects = tramp.objects
    if asked == "fsession":
        if "fsession" not in objects:
            return None, ("this trace directory has no fsession program (built for a kernel "
                          "whose BTF has no BPF_TRACE_FSESSION)")
        fsession = features.fsession_programs()
        if not fsession:
            return None, fsession.why
        if taken > FSESSION_MAX:
            return None, (f"one fsession program a function, each verified: at most "
                          f"{FSESSION_MAX} functions, and this trace has {taken} (use "
                          "--attach tracing-multi)")
        return AttachMode("fsession", objects["fsession"], ("trace_session",),
                          f"one fsession program per function ({taken})",
                          "as asked" + _rest_said(rest, refused),
                          (BPF_TRACE_FSESSION,), tramp.specs, rest), ""
    if "fsession_multi" not in objects and "fentry_multi" not in objects:
        return None, ("this trace directory has no tracing_multi programs (built for a kernel "
                      "whose BTF has no BPF_TRACE_FENTRY_MULTI)")
    # A function it takes, for the probe's link: an arch may load the program and refuse that.
    first = next(i for i in here if str(i) not in refused)
    multi = features.tracing_multi_links(manifest.bpf_syscall, manifest.btf_ids[first],
                                         pair_only=asked == "fentry-multi")
    if not multi:
        return None, multi.why
    variant = multi.variant
    if asked == "fentry-multi" and variant not in objects:
        return None, ("this trace directory has no fentry.multi program (built for a kernel "
                      "whose BTF has no BPF_TRACE_FENTRY_MULTI)")
    if variant not in objects:
        if variant != "fsession_multi" or "fentry_multi" not in objects:
            return None, (f"this trace directory has no {variant.replace('_', '.')} program "
                          "(built for another kernel)")
        variant = "fentry_multi"  # a kernel with more than the one built for
    if asked == "auto" and variant != "fsession_multi":
        return None, ("no fsession.multi link here, only fentry.multi and fexit.multi, whose "
                      "exits cannot be paired with their entries (--attach tracing-multi takes "
                      "them, unpaired)")
    how = "as asked" if asked != "auto" else "the BPF trampoline: the kernel's cheapest"
    if variant == "fsession_multi":
        return AttachMode("tracing_multi", objects["fsession_multi"], ("trace_session",),
                          "one fsession.multi link", how + _rest_said(rest, refused),
                          (BPF_TRACE_FSESSION_MULTI,), tramp.specs, rest), ""
    return AttachMode("tracing_multi", objects["fentry_multi"], ("trace_entry", "trace_exit"),
                      "fentry.multi and fexit.multi links", how + _rest_said(rest, refused),
                      (BPF_TRACE_FENTRY_MULTI, BPF_TRACE_FEXIT_MULTI), tramp.specs,
                      rest), ""


def kprobe_mode(manifest: Manifest) -> AttachMode:
    """The kprobe link a trampoline run makes for what the trampoline does not take."""
    return _kprobe_modes("auto", True, manifest, quiet=True)[0]


def _rest_said(rest: AttachMode | None, refused: dict) -> str:
    if rest is None:
        return ""
    first = next(iter(refused.values()))
    return (f"; {len(refused)} functions the trampoline cannot take (as {first}) on "
            f"{rest.said}")


def _same_btf(manifest: Manifest) -> bool:
    """Whether the trace directory was built for this kernel's BTF (its digest), and for the
    module's as loaded (--module: its functions' ids are its BTF object's)."""
    import hashlib

    want = manifest.btf_sha256
    module = manifest.btf_module
    try:
        return (bool(want) and hashlib.sha256(KERNEL_BTF.read_bytes()).hexdigest() == want
                and (not module or hashlib.sha256(
                    (KERNEL_BTF.parent / module.name).read_bytes()).hexdigest()
                    == module.btf_sha256))
    except OSError:
        return False


def by_btf_object(manifest: Manifest, keep: list[int]) -> tuple[list[int], list[int]]:
    """(the functions of `keep` in the kernel's BTF, those in the module's: --module), by
    their BTF ids (a split BTF's own ids come after its base's)."""
    module = manifest.btf_module
    if not module:
        return list(keep), []
    ids, first = manifest.btf_ids, module.first_id
    return [i for i in keep if ids[i] < first], [i for i in keep if ids[i] >= first]


def trampoline_split(manifest: Manifest, keep: list[int]) -> tuple[list[int], list[int]]:
    """(the functions of `keep` the trampoline takes, those left to its kprobe link)."""
    refused = manifest.trampoline.refused if manifest.trampoline else {}
    return ([i for i in keep if str(i) not in refused], [i for i in keep if str(i) in refused])


def _session_mode(kernel: bool, manifest: Manifest) -> tuple[AttachMode | None, str]:
    objects = manifest.session_objects
    if not objects:
        return None, "this trace directory has no session program (built by an older btfgen)"
    session = features.session_links(manifest.bpf_syscall, kernel)
    if not session:
        return None, session.why
    wrong = _wrong_cookies(kernel, manifest)
    if wrong:
        return None, wrong
    kind = "kprobe" if kernel else "uprobe"
    return AttachMode("session", objects[session.variant], ("trace_session",),
                      f"one {kind}.session link"), ""


def _wrong_cookies(kernel: bool, manifest: Manifest) -> str:
    """Why this kernel's kprobe_multi and kprobe.session links cannot be used, though it makes
    them: their programs see the wrong function's cookie, and the trace would decode each
    call as another function's (features.kprobe_multi_cookies); "" where they are right, or
    where it has no such links (their absence is said where they are asked for). User
    functions: uprobe_multi's cookies are looked up by the probe's own link, not by address."""
    if not kernel or not features.kprobe_multi_links(manifest.bpf_syscall):
        return ""
    return features.kprobe_multi_cookies(manifest.bpf_syscall).why


def _pair_or_single(asked: str, kernel: bool, manifest: Manifest, quiet: bool = False,
                    no_session: str = "") -> AttachMode:
    """multi or single: kprobe_multi (uprobe_multi) pairs where the kernel has them in auto."""
    pair, obj = ("trace_entry", "trace_exit"), manifest.object
    multi = AttachMode("multi", obj, pair, "kprobe_multi links" if kernel else
                       "uprobe_multi links", "as asked" if asked == "multi" else no_session)
    single = AttachMode("single", obj, pair, "one kprobe and kretprobe per function" if kernel
                        else "one uprobe and uretprobe per function",
                        "as asked" if asked == "single" else "")
    if asked != "auto":
        wrong = _wrong_cookies(kernel, manifest) if asked == "multi" else ""
        if wrong:
            raise InputError(f"--attach multi: {wrong}")
        return single if asked == "single" else multi
    links = (features.kprobe_multi_links if kernel else
             features.uprobe_multi_links)(manifest.bpf_syscall)
    if links:
        wrong = _wrong_cookies(kernel, manifest)
        if not wrong:
            return multi
        links = features.Availability(wrong)
    kprobes = features.kprobes() if kernel else features.AVAILABLE
    if not kprobes and not quiet:
        raise RunError(f"{links.why}; {kprobes.why}")
    return single._replace(why=links.why)


def attach_trampoline(obj, manifest: Manifest, keep: list[int], mode: AttachMode,
                      cookie: list[int], directory: Path) -> list[int]:
    """The trampoline's links for the functions of `keep` (trampoline_split's first list):
    a tracing_multi link a program and BTF object (the kernel's; the module's, its program
    loaded again against the module's BTF), or an fsession program a function (each function
    after the first on a companion of `obj`: fsession_companion, from `directory`). -> the
    module's functions whose link the kernel refused (for a kprobe link of the run), said."""
    ids = manifest.btf_ids
    if mode.kind == "tracing_multi":
        kernel, module = by_btf_object(manifest, keep)
        for program, attach_type in zip(mode.programs, mode.attach_types):
            if kernel:
                obj.attach_tracing_multi(program, [ids[i] for i in kernel],
                                         [cookie[i] for i in kernel], attach_type,
                                         _MULTI_SAID[attach_type])
        return _attach_module(obj, manifest, module, mode, cookie) if module else []
    for n, i in enumerate(keep):
        target = obj if n == 0 else fsession_companion(obj, directory, manifest, mode,
                                                       manifest.functions[i])
        target.attach_tracing(mode.programs[0], BPF_TRACE_FSESSION, cookie[i],
                              f"fsession on {manifest.functions[i]}")
        if target is not obj:
            obj.links.extend(target.links)
    return []


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


def kprobe_companion(obj, directory: Path, manifest: Manifest, rest: AttachMode) -> BpfObject:
    """The object of the kprobe link `rest` (a trampoline mode's) for what the trampoline cannot
    take, loaded from `directory`, writing to `obj`'s ring, its specs filled; one of `obj`'s
    companions (closed with it)."""
    kprobe = BpfObject(str(directory / rest.object), bpf_syscall=manifest.bpf_syscall)
    obj.companions.append(kprobe)
    kprobe.share_maps(obj, _shared(manifest, obj))
    if rest.kind != "single":
        for program in rest.programs:
            kprobe.expect_kprobe_multi(program, session=rest.kind == "session")
    kprobe.set_autoload("follow_fork", False)
    kprobe.set_max_entries("specs", len(manifest.functions))
    kprobe.load()
    kprobe.fill_array("specs", (directory / manifest.specs).read_bytes(),
                      len(manifest.functions))
    return kprobe


def fsession_companion(obj, directory: Path, manifest: Manifest, mode: AttachMode,
                       name: str) -> BpfObject:
    """One fsession program a function: `obj`'s object again, loaded from `directory` with its
    program on `name`, sharing `obj`'s maps and specs; one of `obj`'s companions."""
    more = BpfObject(str(directory / mode.object), bpf_syscall=manifest.bpf_syscall)
    obj.companions.append(more)
    more.share_maps(obj, (*_shared(manifest, obj), "specs"))
    more.expect_tracing(mode.programs[0], mode.attach_types[0], name)
    more.set_autoload("follow_fork", False)
    more.load()
    return more


def attach_companion(kprobe, obj, manifest: Manifest, keep: list[int], rest: AttachMode,
                     cookie: list[int]) -> None:
    """The functions of `keep` (what the trampoline does not take) on the kprobe link `rest`
    of `kprobe` (kprobe_companion), its links held by `obj` too (detached with the probes)."""
    attach_functions(kprobe, manifest, keep, rest, cookie)
    obj.links.extend(kprobe.links)


_MULTI_SAID = {BPF_TRACE_FSESSION_MULTI: "fsession.multi", BPF_TRACE_FENTRY_MULTI: "fentry.multi",
               BPF_TRACE_FEXIT_MULTI: "fexit.multi"}


def _attach_module(obj, manifest: Manifest, module: list[int], mode: AttachMode,
                   cookie: list[int]) -> list[int]:
    """The module's tracing_multi link(s): each program loaded again against the module's
    BTF object, its link on the module's own ids. Refused (the module's BTF not found, the
    program or the link refused): none made, and `module` handed back, said."""
    from .syscall import kernel_btf_fd

    name, ids = manifest.btf_module.name, manifest.btf_ids
    made = len(obj.links)
    fd = kernel_btf_fd(manifest.bpf_syscall, name)
    try:
        if fd is None:
            raise BpfLoadError(f"no BTF object of module {name} in the kernel (not loaded?)")
        for program, attach_type in zip(mode.programs, mode.attach_types):
            what = f"{_MULTI_SAID[attach_type]} link on module {name}"
            prog_fd = obj.load_clone(program, attach_type, fd)
            obj.attach_tracing_multi_fd(prog_fd, [ids[i] for i in module],
                                        [cookie[i] for i in module], attach_type, what)
    except BpfLoadError as e:
        for link in obj.links[made:]:
            link.destroy()
        del obj.links[made:]
        prog.say(f"module {name}: the trampoline refused ({str(e).splitlines()[0]}):"
                 f" its {len(module)} functions on a kprobe link instead")
        return module
    finally:
        if fd is not None:
            import os

            os.close(fd)  # the programs loaded against it hold it
    prog.say(f"module {name}: its {len(module)} functions on their own "
             f"{' and '.join(_MULTI_SAID[t] for t in mode.attach_types)} link"
             f"{'s' if len(mode.attach_types) > 1 else ''} (the module's BTF object)")
    return []


def attach_functions(obj, manifest: Manifest, keep: list[int], mode: AttachMode,
            cookie: list[int], stopped=lambda: False) -> None:
    """`stopped()`: the run was signalled; single probes, one at a time (thousands take
    seconds), stop being attached then (the run ends with what it has)."""
    # No pid on the uprobe links: the processes to trace are the BPF side's `followed` set,
    # which grows as they fork.
    kernel = manifest.kind == "kernel"
    names = [manifest.functions[i] for i in keep]
    session = mode.kind == "session"
    unprobed: list[str] = []
    for program, ret in zip(mode.programs, (False, True)):
        if mode.kind == "single":
            # The same program on every function: the cookie (Linux 5.15+) picks the spec.
            for i, name in zip(keep, names):
                if stopped():
                    return
                if not kernel:
                    obj.attach_uprobe(program, manifest.program, name, cookie=cookie[i],
                                      retprobe=ret, offset=manifest.offsets[i])
                    continue
                if name in unprobed:
                    continue
                try:
                    obj.attach_kprobe(program, name, cookie[i], retprobe=ret)
                except BpfLoadError as e:
                    # A kprobe names its function, and a name several functions share, or
                    # the kprobe blacklist's, is refused: that function only is left out
                    # (a kretprobe never runs without its kprobe: both go together).
                    if e.errno not in (errno.EADDRNOTAVAIL, errno.EINVAL) or ret:
                        raise
                    unprobed.append(name)
        elif kernel:
            obj.attach_kprobe_multi(program, names, [cookie[i] for i in keep], retprobe=ret,
                                    session=session)
        else:
            obj.attach_uprobe_multi(program, manifest.program, names,
                                    [cookie[i] for i in keep], retprobe=ret,
                                    offsets=[manifest.offsets[i] for i in keep],
                                    session=session)
    if unprobed:
        if len(unprobed) == len(names):
            raise RunError(f"no function could take a kprobe by name (as {unprobed[0]}: "
                           "several functions of the name, or on the kprobe blacklist)")
        prog.say("left out, a kprobe by name refused (several functions of the "
                 f"name, or the kprobe blacklist): {', '.join(unprobed[:10])}"
                 f"{f' and {len(unprobed) - 10} more' if len(unprobed) > 10 else ''}")


def enough_files(wanted: int) -> None:
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
