"""`btfgen trace`'s build step: everything that needs btfgen and clang, written to a directory
that the run side (btfgen.probe) loads on the target with only the standard library and libbpf.

The directory holds the generated decoder module (btfgen_<arch>.py), the compiled BPF object
(trace.bpf.o), the manifest (trace.json: the functions in cookie order and what they were built
for), a copy of the run side (btfgen/probe, as btfgen_probe/) and its launcher (launcher.py, as
btfgen_trace.py), so copying it to the target is the whole install.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from btfgen.abi.arches import run_side_facts
from btfgen.btf.reader import DEFAULT_PATH
from btfgen.codegen import outputs, straight
from btfgen.probe import manifest as trace_manifest
from btfgen.probe import prog, spec_format
from btfgen.probe.errors import BadInput
from btfgen.probe.options import CALL_BUDGET, STRING_SIZE
from btfgen.probe.timings import Timings
from btfgen.trace import deny, symbols

HERE = Path(__file__).resolve().parent
# The run side, as the trace directory holds it: the package copied whole (its modules only),
# and the launcher that runs it.
PROBE = HERE.parent / "probe"
RUNTIME = {"launcher.py": "btfgen_trace.py"}
PROBE_COPY = "btfgen_probe"
OBJECT = "trace.bpf.o"
# The one-link session program, by the kernel's prototype of the session kfuncs (run.py picks by
# the target's BTF): without arguments (Linux 6.10 to 6.19), or taking the ctx (7.0 on).
SESSION_OBJECTS = {"no_ctx": "trace.session.bpf.o", "ctx": "trace.session-ctx.bpf.o"}
# A user trace's programs again as sleepable uprobe programs (-DBTFGEN_SLEEPABLE: user memory
# read with the helpers that fault pages in), by the attach mode each is for: the pair of links
# (single or multi), and the session by the kfuncs' prototype. The run side takes them where
# the kernel loads them (features.sleepable_uprobes).
SLEEPABLE_OBJECTS = {"pair": "trace.s.bpf.o", "no_ctx": "trace.session.s.bpf.o",
                     "ctx": "trace.session-ctx.s.bpf.o"}
# The BPF trampoline's programs (kernel functions; run.py's --attach tracing-multi / fsession),
# each built where the target's BTF names its attach type and the arch describes the trampoline
# ctx: the session program, as an fsession.multi link's or one fsession a function, and the
# fentry.multi/fexit.multi pair; the functions' arguments read from the trampoline's u64 slots,
# by their own header (TRAMPOLINE_DIR/btfgen.bpf.h, the `trampoline` ctx) and spec table.
TRAMPOLINE_DIR = "trampoline"
TRAMPOLINE_SESSION = "trace.tsession.bpf.o"
TRAMPOLINE_OBJECTS = {"fsession_multi": TRAMPOLINE_SESSION, "fsession": TRAMPOLINE_SESSION,
                      "fentry_multi": "trace.tpair.bpf.o"}
TRAMPOLINE_SPECS = "specs.trampoline.bin"
TRAMPOLINE_CTX = "trampoline"
# enum bpf_attach_type's names of each object's attach types (btfgen.probe.features)
_TRAMPOLINE_NEEDS = {"fsession_multi": "BPF_TRACE_FSESSION_MULTI", "fsession": "BPF_TRACE_FSESSION",
                     "fentry_multi": "BPF_TRACE_FENTRY_MULTI"}
# What the kernel refuses a trampoline on by name, not by prototype as the ctx's rules do: left to
# the kprobe link of the run, as those are. kernel/bpf/verifier.c's btf_id_deny (any tracing
# program; ___migrate_enable since migrate_enable became an inline wrapper of it) and
# noreturn_deny (the exit half of an fexit, fsession or fmod_ret: a __noreturn function never
# returns to it), both checked again per BTF id when a tracing_multi link is created, where one
# such id fails the whole link with EINVAL. Debian's 7.2.13 amd64 kernel refuses each of these
# it has on an empty fsession.multi program's link, and takes the other 42,633 functions its
# ftrace lists (tests/live_kernel/test_mass_attach.py). The sets' entries under a config option
# (kunit's, ia32's) are listed whatever the config: a kernel without them has no such function.
TRAMPOLINE_DENIED = dict.fromkeys(
    ("___migrate_enable", "migrate_disable", "migrate_enable", "rcu_read_unlock_strict",
     "preempt_count_add", "preempt_count_sub", "__rcu_read_lock", "__rcu_read_unlock"),
    "the verifier refuses a trampoline on it (btf_id_deny)") | dict.fromkeys(
    ("__ia32_sys_exit", "__ia32_sys_exit_group", "__kunit_abort", "kunit_try_catch_throw",
     "__module_put_and_kthread_exit", "__x64_sys_exit", "__x64_sys_exit_group", "do_exit",
     "do_group_exit", "kthread_complete_and_exit", "kthread_exit", "make_task_dead"),
    "__noreturn: the verifier refuses its exit half (noreturn_deny)")
# Every function's `struct btfgen_spec`, in cookie order: made here, where it is quick, so the
# run side fills the specs map from one read (tens of thousands made there took a minute).
SPECS = "specs.bin"


class BuildError(BadInput):
    """Bad input or a missing tool: one line for the user, and the exit status it means (2: bad
    usage or input, as every command; 1: a missing function)."""


@dataclass
class Request:
    functions: list[str]  # names (globs for kernel functions)
    kernel: bool = False
    btf: str | None = None  # kernel: the BTF file, else the running kernel's
    module: str | None = None  # kernel: a module whose functions are traced too (--module)
    module_btf: str | None = None  # its BTF (a .ko or raw split BTF), else /sys/kernel/btf/NAME
    dwarf: str | None = None  # DWARF of the same build; else the input's own, if it has any
    arch: str | None = None  # btfgen arch name, else the input's ELF machine, else the host's
    program: str | None = None  # user: the executable or shared library (a path, or a bare
    # name: libc.so.6, c, cat)
    headers: list[str] = field(default_factory=list)  # user: prototypes from C headers
    include: list[str] = field(default_factory=list)
    define: list[str] = field(default_factory=list)
    filters: list[str] = field(default_factory=list)  # --filter 'FUNC: EXPR'
    captures: list[str] = field(default_factory=list)  # --capture 'FUNC: PATH, PATH'
    strings: bool = True  # a string capture of every `char *` argument
    string_size: int = STRING_SIZE  # --value-size
    capture_budget: int = CALL_BUDGET  # record bytes a call's captures may take
    deny: bool = True  # kernel: leave out of the globs what btfgen itself calls (deny.txt)
    # --count / --latency, each kept in BPF maps (summary.bpf.h), keyed by --by options
    count: bool = False
    latency: bool = False
    by: list[str] = field(default_factory=list)
    # the --capture options the --by keys add (build's), each with the --by it is for
    by_captures: dict = field(default_factory=dict)
    timings: bool = False  # say how long each stage took
    # --stack: what each entry's record carries of where the call came from ("kernel", "user")
    stack: tuple = ()
    # --by kstack / ustack: --count / --latency summed by the tracer from the stacked events
    stack_keys: dict | None = None
    # One command (build and run here): the run's --attach and whether it takes sleepable
    # programs (not --no-sleepable); a user trace's build then compiles only the objects that
    # run loads (_loaded_here). None (--build): every object, for a run anywhere.
    run_here: tuple[str, bool] | None = None


# --stack user: where the user registers an offline unwind starts from sit in the uprobe's
# struct pt_regs (the instruction pointer, the stack pointer, the frame pointer, the link
# register where the arch returns through one), by arch: the kernel's struct pt_regs
# (arch/x86/include/asm/ptrace.h, arch/arm64/include/asm/ptrace.h). Another arch's user stack
# is refused at build (its unwinder's register numbers are probe/unwind.py's DWARF_REGS).
STACK_REGS = {"x86_64": {"IP": 128, "SP": 152, "FP": 32},
              "arm64": {"IP": 256, "SP": 248, "FP": 232, "LR": 240}}
# A kernel function's user stack reads the same registers from its task's pt_regs, and the word
# telling a user mode's from a kernel thread's (zeros, or a kernel mode's): (its offset, the
# mask, the masked value of user mode). x86_64: the cs selector's privilege level, 3
# (user_mode() in arch/x86/include/asm/ptrace.h); arm64: pstate's mode bits, EL0t of a 64-bit
# task (user_mode() in arch/arm64/include/asm/ptrace.h; a 32-bit task's differ, and its stack
# is not unwound by the 64-bit rules).
STACK_USER_MODE = {"x86_64": (136, 3, 3), "arm64": (264, 0x1f, 0)}


def stack_flags(stack: tuple, arch: str) -> list[str]:
    """clang's flags for --stack: what the program takes, and where the registers are."""
    flags = [f"-DBTFGEN_STACK_{what.upper()}" for what in stack]
    if "user" in stack:
        regs = STACK_REGS.get(arch)
        if regs is None:
            raise BuildError(f"--stack=user: unwinding a user stack on {arch} is not built "
                             f"(it is on {', '.join(STACK_REGS)})")
        mode, mask, user = STACK_USER_MODE[arch]
        words = [*regs.values(), mode]
        flags += [f"-DTRACE_REG_{name}={at}" for name, at in regs.items()]
        flags += [f"-DTRACE_REG_MODE={mode}", f"-DTRACE_MODE_MASK={mask}",
                  f"-DTRACE_MODE_USER={user}",
                  f"-DTRACE_REGS_FROM={min(words)}", f"-DTRACE_REGS_TO={max(words) + 8}"]
    return flags


def open_target(req: Request):
    """The request's input as every command opens its own (`btfgen.target.open_options`): the
    kernel's BTF (or --btf), the program's own BTF or DWARF, or its C headers; the arch by the
    one rule."""
    from types import SimpleNamespace

    from btfgen.target import open_options

    base = None
    if req.kernel:
        input = req.btf or DEFAULT_PATH
        if not Path(input).exists():
            raise BuildError(f"{input}: no such file (a kernel without BTF? give --btf FILE)")
        if req.module:
            # The module's split BTF over the kernel's: the kernel's types and functions by
            # their own ids, the module's after them (the ids its BTF object gives them).
            base, input = input, req.module_btf or str(Path(DEFAULT_PATH).parent / req.module)
            if not Path(input).exists():
                raise BuildError(f"{input}: no such file (module {req.module} not loaded? "
                                 "give --module-btf FILE: its .ko)")
    else:
        input = req.program
        if not Path(input).is_file():
            raise BuildError(f"{input}: no such file")
    # -I/-D without --header mean nothing to a trace, which has never refused them.
    headers = req.headers
    options = SimpleNamespace(header=headers, include_dirs=req.include if headers else (),
                              defines=req.define if headers else (), arch=req.arch,
                              dwarf=req.dwarf, base=base)
    return open_options(options, input)


def build(req: Request, out: Path) -> trace_manifest.Manifest:
    """Write the trace directory `out`; return its manifest."""
    from btfgen.typed import filter as typed_filter

    parsed = typed_filter.parse_options(req.filters)  # syntax first: no BTF read for a typo
    if not req.kernel:
        req = replace(req, program=_locate(req.program))
    timings = Timings(req.timings)
    with timings.stage("build: BTF load"):
        target = open_target(req)
    source = req.headers[0] if req.headers else target.input
    with timings.stage("build: selection"):
        funcs = _select(target, req, source)
    if not req.kernel:
        with timings.stage("build: symbol resolution"):
            kind, offsets, funcs = _probe_sites(req.program, funcs, target.convention)
    bys, keyed = _summary_bys(req, funcs)
    req = replace(req, captures=list(keyed) + req.captures, by_captures=keyed)
    if bys and not req.strings and req.string_size == Request.string_size:
        # Only the keys are captured: a string key is KEY_STRING_SIZE characters unless asked
        # (it is hashed on every call, and lives on the BPF stack).
        from btfgen.trace.summary import KEY_STRING_SIZE

        req = replace(req, string_size=KEY_STRING_SIZE)
    with timings.stage("build: placement"):
        plan = _plan(target, funcs, req, parsed)
    layout, conv = plan.layout, target.convention
    for line in plan.placement_notes:
        prog.say(line)
    out.mkdir(parents=True, exist_ok=True)
    with timings.stage("build: generation"):
        for name, text in plan.trace_files().items():
            (out / name).write_text(text)
    at_exit = frozenset(b.index for b in plan.filters if b.checked.exit is not None)
    summary = _summary(req, bys, out, [f.name for f in layout.functions], layout,
                       at_exit | _exit_keyed(bys, layout))
    summary_flags = summary.pop("flags", []) + stack_flags(req.stack, layout.arch)
    with timings.stage("build: compile"):
        objects = _compile(out, conv.target_arch, conv.byte_order, user=not req.kernel,
                           wanted=plan.filtered_names(), wide=conv.pointer_size == 8,
                           extra=summary_flags, only=_loaded_here(req, conv, layout.arch))
    _copy_run_side(out)
    names = [f.name for f in layout.functions]
    with timings.stage("build: spec table"):
        decoders = trace_manifest.load_decoders(out, outputs.file_name("python", layout.arch))
        specs = [decoders.spec(n) for n in names]
        (out / SPECS).write_bytes(b"".join(specs))
    if line := _interpreted(specs, conv.byte_order):
        prog.say(line)
    trampoline = None
    if req.kernel:
        # A summary's programs too (--count, --latency): the same maps, kept by the
        # trampoline's programs as by the kprobe's (summary.bpf.h).
        with timings.stage("build: trampoline"):
            trampoline = _trampoline(target, funcs, req, parsed, out, names,
                                     summary_flags, bys, summary)
    where = {}
    if req.kernel:
        # The run step warns when the target kernel's BTF is not the one built for.
        kernel_btf = (req.btf or DEFAULT_PATH) if req.module else source
        where = {"btf_sha256": hashlib.sha256(Path(kernel_btf).read_bytes()).hexdigest(),
                 "btf_module": _module_entry(req, source, target.types) if req.module
                 else None}
        source = kernel_btf
    else:
        # A library is only probed: the run side runs the command, or follows --pid, or every
        # process that maps it.
        where = {"program": str(Path(req.program).resolve()), "library": kind.library,
                 "offsets": [offsets[n] for n in names]}
    manifest = trace_manifest.Manifest(
        kind="kernel" if req.kernel else "user", arch=layout.arch,
        # the run side has no arch descriptions: uname spellings, byte order, bpf() number
        **run_side_facts(conv),
        module=outputs.file_name("python", layout.arch), object=OBJECT,
        session_objects=SESSION_OBJECTS,
        sleepable_objects=None if req.kernel else SLEEPABLE_OBJECTS, functions=names,
        btf_ids=[f.btf_id for f in layout.functions], specs=SPECS, btf=source,
        filters=req.filters, retval_filtered=sorted(at_exit) or None,
        summary=trace_manifest.SummarySpec(**summary) if summary else None,
        trampoline=trace_manifest.Trampoline(**trampoline) if trampoline else None,
        stack=list(req.stack) or None,
        stack_keys=trace_manifest.StackKeys(**req.stack_keys) if req.stack_keys else None,
        objects=objects + (sorted(set(trampoline["objects"].values())) if trampoline else []),
        **where)
    (out / trace_manifest.MANIFEST).write_text(manifest.to_json())
    if req.timings:
        prog.say(f"time: build: total: {sum(timings.seconds.values()):.6f} s")
    return manifest


def _module_entry(req: Request, path: str, types) -> trace_manifest.BtfModule:
    """The manifest's word on the module: its name, the first BTF id of its own (the
    functions from it on are its: a link of their own on the trampoline), and its BTF's
    digest (the run side compares it with /sys/kernel/btf/NAME's)."""
    from btfgen.btf import elf

    with Path(path).open("rb") as f:
        raw = f.read()
        if raw[:len(elf.MAGIC)] == elf.MAGIC:
            f.seek(0)
            raw = elf.read_btf_section(path, f)[0]
    return trace_manifest.BtfModule(name=req.module, btf=path, first_id=types.first_id,
                                    btf_sha256=hashlib.sha256(raw).hexdigest())


def trampoline_variants(types) -> list[str]:
    """The trampoline's variants (TRAMPOLINE_OBJECTS' keys) whose attach type the enum
    bpf_attach_type of `types` (the target kernel's BTF) names: what that kernel can take."""
    values = set()
    for enum in types.find_types("bpf_attach_type", "enum"):
        values |= {v.name for v in enum.values}
    return [k for k, name in _TRAMPOLINE_NEEDS.items() if name in values]


def _trampoline(target, funcs: list, req: Request, filters: list, out: Path,
                names: list[str], summary_flags: list[str] = (), bys: list = (),
                summary: dict | None = None) -> dict | None:
    """The trampoline's programs, spec table and manifest entry, where the target kernel has
    an attach type of it and the arch describes the ctx; None: not built. With a summary
    (`summary`: its manifest entry, `summary_flags` its compile flags, `bys` its keys), the
    programs keep it in the same maps as the kprobe's."""
    from btfgen.target import Target

    variants = trampoline_variants(target.types)
    if not variants or TRAMPOLINE_CTX not in target.convention.ctxs:
        return None
    ctx_target = Target(target.types, target.convention, TRAMPOLINE_CTX, target.input,
                        target.dwarf)
    plan = ctx_target.plan(funcs, captures=req.captures, strings=req.strings,
                           string_size=req.string_size, filters=filters, kernel=True,
                           self_contained=True)
    layout = plan.layout
    if [f.name for f in layout.functions] != names:
        raise BuildError("the trampoline's placement lists other functions than the "
                         "kprobe's", status=1)
    tdir = out / TRAMPOLINE_DIR
    tdir.mkdir(exist_ok=True)
    for name, text in plan.trace_files().items():
        (tdir / name).write_text(text)
    # BPF cpu v4 (Linux 6.6; fsession is 7.0, tracing_multi 7.2): its gotol lets clang reach
    # past a 16-bit jump, so the header inlines every slot read (bpf.h.j2, btfgen_tramp_slot).
    v4 = ["-mcpu=v4"]
    flags = {TRAMPOLINE_SESSION: ["-DBTFGEN_TRAMPOLINE", "-DBTFGEN_SESSION",
                                  "-DBTFGEN_SESSION_KFUNC_CTX", *v4],
             TRAMPOLINE_OBJECTS["fentry_multi"]: ["-DBTFGEN_TRAMPOLINE", *v4]}
    objects = {k: TRAMPOLINE_OBJECTS[k] for k in variants}
    conv = target.convention
    try:
        _compile(out, conv.target_arch, conv.byte_order, user=False,
                 wanted=plan.filtered_names(), extra=list(summary_flags),
                 variants={o: flags[o] for o in set(objects.values())}, headers=tdir)
    except BuildError as e:
        # The kprobe's programs are built: the trace directory still works, without the
        # trampoline (a whole kernel's slot decoders overran a BPF jump's range: "Branch target
        # out of insn range"), and says so.
        why = next((line for line in str(e).splitlines() if "error" in line), str(e))
        prog.say(f"the BPF trampoline's programs were not built ({why.strip()[:200]}):"
                 " the kprobe modes only")
        for name in set(objects.values()):
            (out / name).unlink(missing_ok=True)
        return None
    module = f"{TRAMPOLINE_DIR}/{outputs.file_name('python', layout.arch)}"
    decoders = trace_manifest.load_decoders(out, module)
    if summary and not _same_keys(decoders, names, bys, out / summary["keyspecs"]):
        # One sum_keys table for both (the maps are shared, and the run side decodes a key
        # with the kprobe's module): a key the slots' record lays out elsewhere would be read
        # wrong, so the summary stays on the kprobe links.
        prog.say("the BPF trampoline's programs were not built for this summary "
                 "(its records lay a --by key out otherwise than the kprobe's): the kprobe modes "
                 "only")
        for name in set(objects.values()):
            (out / name).unlink(missing_ok=True)
        return None
    (out / TRAMPOLINE_SPECS).write_bytes(b"".join(decoders.spec(n) for n in names))
    return {"variants": variants, "objects": objects, "specs": TRAMPOLINE_SPECS,
            "module": module,
            # index (a string: JSON) -> why the trampoline cannot take that function: it goes
            # through a kprobe link of the same run
            "refused": {str(i): f.refused or TRAMPOLINE_DENIED[f.name]
                        for i, f in enumerate(layout.functions)
                        if f.refused or f.name in TRAMPOLINE_DENIED}}


def _same_keys(decoders, names: list[str], bys: list, kprobe_keys: Path) -> bool:
    """Whether the summary's sum_keys table made from `decoders` (the trampoline ctx's) is the
    one made from the kprobe's, byte for byte."""
    from btfgen.trace import summary as trace_summary

    descs = [decoders._descriptor(n)[0] for n in names]
    try:
        _, blob, _ = trace_summary.keys(bys, names, descs, decoders.POINTER_SIZE,
                                        decoders.BYTE_ORDER)
    except trace_summary.KeyError_:
        return False
    return blob == kprobe_keys.read_bytes()


def _copy_run_side(out: Path) -> None:
    """The run side into `out`: the probe package whole (a directory built again gets it
    afresh, no module of an older layout left behind) and the launcher. Its modules only:
    lines.c is the source of an optional module pip builds, of no use in a copy."""
    shutil.rmtree(out / PROBE_COPY, ignore_errors=True)
    shutil.copytree(PROBE, out / PROBE_COPY, ignore=shutil.ignore_patterns("__pycache__", "*.c"))
    for module, name in RUNTIME.items():
        shutil.copyfile(HERE / module, out / name)


def _interpreted(specs: list[bytes], byte_order: str) -> str | None:
    """How many functions decode on the ops interpreter rather than a straight-line decoder
    (a spec's entry_plan / exit_plan is 0: past the decoders one program holds); None: none."""
    heads = [spec_format.read_head(s, byte_order) for s in specs]
    entry = sum(not h["entry_plan"] for h in heads)
    exit_ = sum(not h["exit_plan"] for h in heads)
    if not entry and not exit_:
        return None
    return (f"{entry} of {len(specs)} functions decode on the ops interpreter at entry, {exit_} "
            f"at exit (past the {straight.MAX_DECODERS} straight-line decoders of each kind one "
            "program holds: the ones the most functions share are kept; the interpreter costs "
            "~20 ns more a call)")


def _locate(name: str) -> str:
    """A bare name (libc.so.6, c, cat) as bpftrace finds it, and said."""
    try:
        path, how = symbols.locate(name)
    except symbols.SymbolError as e:
        raise BuildError(str(e)) from None
    if how:
        prog.say(f"{name} is {path} ({how})")
    return path


def _probe_sites(program: str, funcs: list, conv):
    """(what the file is, each function's file offset by name, the functions left to trace):
    a function another name of which is already traced (an alias: one address) is left out,
    else every call would be reported twice."""
    try:
        kind = symbols.file_kind(program)
        found = symbols.functions(program, [f.name for f in funcs])
    except symbols.SymbolError as e:
        raise BuildError(str(e), e.status) from None
    if (kind.machine, kind.pointer_size) != (conv.elf_machine, conv.pointer_size):
        # Offsets from one machine's file, decoders for another's convention: every value
        # would be misread.
        raise BuildError(f"{program}: a {kind.pointer_size * 8}-bit {kind.machine} file, not "
                         f"{conv.name}'s ({conv.pointer_size * 8}-bit {conv.elf_machine}): "
                         "give the file built for the arch traced")
    for note in (n for fn in found for n in fn.notes):
        prog.say(note)
    same = symbols.aliases(found)
    for name, first in same.items():
        prog.say(f"{name} is {first} (one function, at the same address): "
                 f"traced once, as {first}")
    return kind, {fn.name: fn.offset for fn in found}, [f for f in funcs if f.name not in same]


def _plan(target, funcs: list, req: Request, filters: list):
    """`Target.plan` for a trace directory (self-contained, for uprobes alone unless the
    kernel is traced); what it has to say about captures on stderr, a capture that does not fit
    a BuildError naming the option and the column."""
    from btfgen.typed import capture

    try:
        plan = target.plan(funcs, captures=req.captures, strings=req.strings,
                           string_size=req.string_size, filters=filters, kernel=req.kernel,
                           capture_budget=req.capture_budget,
                           self_contained=True)
    except capture.CaptureOptionError as e:
        line = str(e)
        for option, by in req.by_captures.items():  # a --by key's capture: said as the --by
            if line.startswith(f"--capture {option!r}:"):
                line = f"--by {by!r}:" + line[len(f"--capture {option!r}:"):]
        raise BuildError(line) from None
    left = plan.unguessable
    if left:
        prog.say(f"{target.arch}: strings not captured by default (kernel and user "
                 f"addresses overlap, and the BTF has no __user tags to say which a pointer "
                 f"is; name it: --capture 'FUNC: ARG:user'): "
                 f"{', '.join(left[:8])}{' ...' if len(left) > 8 else ''}")
    for line in plan.capture_notes:
        prog.say(f"--capture {line}")
    return plan


def _select(target, req: Request, source: str) -> list:
    found, missing = target.select(req.functions)
    if missing:
        raise BuildError(f"no function {missing[0]!r} in {source}"
                         + (f" (nor {', '.join(missing[1:])})" if missing[1:] else ""), status=1)
    # Static functions of one name in several files: a probe names a function by its symbol,
    # so one prototype per name. Where they differ, which one a call went to is unknown, and
    # decoding with the wrong one would print wrong values: leave the name out.
    by_name: dict[str, list] = {}
    for f in found:
        by_name.setdefault(f.name, []).append(f)
    ambiguous = [n for n, fs in by_name.items() if len({f.type_id for f in fs}) > 1]
    if ambiguous:
        prog.say("left out, several static functions of that name with different "
                 f"prototypes: {', '.join(ambiguous)}")
    funcs = [fs[0] for n, fs in by_name.items() if n not in ambiguous]
    if req.kernel and req.deny:
        funcs = _without_denied(funcs, req.functions)
    if not funcs:
        raise BuildError("nothing left to trace", status=1)
    # No limit on the count: the run side sizes the specs map to the functions it loads.
    return funcs


def _without_denied(funcs: list, asked: list[str]) -> list:
    """`funcs` without what deny.txt lists, unless named as it is; the count left out and why
    said on one line."""
    from btfgen.target import is_glob

    named = {w for w in asked if not is_glob(w)}
    denied = deny.split([f.name for f in funcs if f.name not in named], deny.patterns())
    if not denied.left_out:
        return funcs
    out = {n for names in denied.left_out.values() for n in names}
    groups = "; ".join(f"{why}: {len(names)} ({', '.join(names[:3])}"
                       f"{', ...' if len(names) > 3 else ''})"
                       for why, names in denied.left_out.items())
    prog.say(f"left out {len(out)} functions btfgen's own probes and run side "
             f"call (deny list; --no-deny keeps them): {groups}")
    return [f for f in funcs if f.name not in out]


WANTED_HEADER = "trace_wanted.h"


def _wanted_flags(out: Path, wanted: list[str]) -> list[str]:
    """clang's flags for `wanted`: a header of BTFGEN_WANT_ defines included first (a filter on
    a glob may want tens of thousands, past what a command line holds), or, with none wanted,
    the generic decoder alone."""
    path = out / WANTED_HEADER
    if not wanted:
        path.unlink(missing_ok=True)
        return ["-DBTFGEN_GENERIC_ONLY"]
    path.write_text("/* Generated by btfgen trace: the functions --filter decodes. */\n"
                    "#define BTFGEN_ONLY_WANTED\n"
                    + "".join(f"#define BTFGEN_WANT_{c}\n" for c in wanted))
    return ["-include", str(path)]


def _loaded_here(req: Request, conv, arch: str) -> list[str] | None:
    """The objects the run that follows this build on this machine loads (Request.run_here),
    by the run side's own decision (attach.objects_loaded, on the manifest-to-be's object
    names and bpf() number); None: every object (--build; a kernel trace; a run that will
    refuse its --attach here, and say so, as it did before)."""
    if req.run_here is None or req.kernel:
        return None
    from btfgen.probe import attach
    from btfgen.probe.errors import BpfLoadError, InputError, RunError

    asked, sleepable = req.run_here
    try:
        return attach.objects_loaded(asked, user_objects(arch, conv), sleepable)
    except (InputError, RunError, BpfLoadError, OSError):
        return None


def user_objects(arch: str, conv) -> trace_manifest.Manifest:
    """A user trace directory's object names and run-side facts for `arch`, the rest empty:
    what attach.objects_loaded reads, before the directory's own manifest is made."""
    return trace_manifest.Manifest(
        kind="user", arch=arch, **run_side_facts(conv), module="", object=OBJECT,
        session_objects=SESSION_OBJECTS, sleepable_objects=SLEEPABLE_OBJECTS, functions=[],
        btf_ids=[], specs=SPECS, btf="", filters=[])


def _compile(out: Path, target_arch: str, byte_order: str, user: bool,
             wanted: list[str], wide: bool = True, extra: list[str] = (),
             variants: dict[str, list[str]] | None = None, headers: Path | None = None,
             only: list[str] | None = None) -> list[str]:
    """The pair-of-links object and the two session objects, and for a user trace their
    sleepable twins (or `variants`: object name -> its flags; of either, those `only` names
    where given), compiled side by side, with the generated header of `headers` (default:
    `out`); -> the objects' names.
    Of the header's per-function decoders only those of `wanted` (the filtered functions', by C
    name) are compiled: for a whole kernel the others are a million lines and 35 s of
    compile. `wide`: a 64-bit target, whose JITs all make BPF's atomic add (trace.bpf.c's
    note_loss)."""
    clang = shutil.which("clang-19") or shutil.which("clang")
    if clang is None:
        raise BuildError("clang is needed to compile the BPF program", status=1)
    headers = headers or out
    base = [clang, "-O2", "-g", "-target", "bpfel" if byte_order == "little" else "bpfeb",
            f"-D__TARGET_ARCH_{target_arch}", *(["-DBTFGEN_USER"] if user else []),
            *(["-DBTFGEN_WIDE"] if wide else []),
            *_wanted_flags(headers, wanted), *extra,
            f"-I{headers}", "-c", str(HERE / "trace.bpf.c")]
    if variants is None:
        variants = {OBJECT: [],
                    SESSION_OBJECTS["no_ctx"]: ["-DBTFGEN_SESSION"],
                    SESSION_OBJECTS["ctx"]: ["-DBTFGEN_SESSION", "-DBTFGEN_SESSION_KFUNC_CTX"]}
        if user:
            variants |= {SLEEPABLE_OBJECTS[k]: [*variants[o], "-DBTFGEN_SLEEPABLE"]
                         for k, o in (("pair", OBJECT), ("no_ctx", SESSION_OBJECTS["no_ctx"]),
                                      ("ctx", SESSION_OBJECTS["ctx"]))}
    if only is not None:
        variants = {name: flags for name, flags in variants.items() if name in only}
    procs = [subprocess.Popen([*base, *flags, "-o", str(out / name)], stderr=subprocess.PIPE,
                              text=True) for name, flags in variants.items()]
    errors = [proc.communicate()[1] for proc in procs]
    for proc, err in zip(procs, errors):
        if proc.returncode:
            raise BuildError(f"compiling trace.bpf.c failed: {err.strip()}", status=1)
    return list(variants)


# ---- --count / --latency (summary.py) --------------------------------------------------------

def _summary_bys(req: Request, funcs: list) -> list:
    """The --by keys parsed, and the captures the paths among them need added to the
    request's (a bad one: a BuildError naming its column)."""
    from btfgen.trace import summary as trace_summary

    if not (req.count or req.latency):
        if req.by:
            raise BuildError("--by keys a summary: give --count or --latency")
        return [], {}
    try:
        bys = trace_summary.parse(req.by)
        return bys, trace_summary.captures(bys, funcs)
    except trace_summary.KeyError_ as e:
        raise BuildError(str(e)) from None


def _exit_keyed(bys: list, layout) -> frozenset[int]:
    """The functions whose --by key is made at their exit ($retval): counted there too."""
    from btfgen.trace import summary as trace_summary

    return trace_summary.exit_keyed(bys, [f.name for f in layout.functions])


def _summary(req: Request, bys: list, out: Path, names: list[str], layout,
             at_exit: frozenset[int]) -> dict:
    """The manifest's summary entry (with the compile flags, popped by the caller), and the
    keys' sum_keyspec table written; {} without --count or --latency. `at_exit`: the functions
    whose filter decides at exit (on $retval), or whose key is made there: counted there."""
    from btfgen.trace import summary as trace_summary

    if not (req.count or req.latency):
        return {}
    decoders = trace_manifest.load_decoders(out, outputs.file_name("python", layout.arch))
    descs = [decoders._descriptor(n)[0] for n in names]
    try:
        keys, blob, size = trace_summary.keys(bys, names, descs, decoders.POINTER_SIZE,
                                              decoders.BYTE_ORDER, at_exit)
    except trace_summary.KeyError_ as e:
        raise BuildError(str(e)) from None
    (out / SUMMARY_KEYS).write_bytes(blob)
    # "exit": whether a call's exit has work (summary.needs_exit): the run side attaches the
    # entry alone where it has none.
    return {"count": req.count, "latency": req.latency, "by": req.by, "keys": keys,
            "at_exit": sorted(at_exit) if req.count else [],
            "exit": bool(req.latency or (req.count and at_exit)),
            "key_size": size, "keyspecs": SUMMARY_KEYS,
            "flags": ["-DBTFGEN_SUMMARY", f"-DBTFGEN_SUMMARY_KEY={size}"]}


SUMMARY_KEYS = "sum_keys.bin"
