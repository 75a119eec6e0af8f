"""`btfgen.open`: one input, on one arch, for one trace ctx — the object every command and the
library start from.

    import btfgen
    t = btfgen.open("vmlinux")                     # arch from the ELF, else the host
    t.arch, t.dwarf                                # "arm64", "vmlinux" (its own DWARF, if any)
    t.function("vfs_read").entry(ctx, stack)       # typed values
    sel = t.select(["vfs_*", "do_sys_open"])       # names and globs; sel.missing
    layout = t.place(sel.functions)                # placed, corrected by DWARF where it differs
    plan = t.plan(sel.functions, captures=["vfs_read: file->f_flags"])   # what to generate
    files = plan.files()                           # as `btfgen -o DIR` writes them

A `Target` owns the decisions that used to be made in several places: where the types come
from (BTF, an ELF's .BTF, a -g ELF's DWARF through pahole, or C headers), which calling
convention applies (the one arch rule), which functions a list of names, globs and files means
(the one selector), when the compiler's DWARF overrides the description (the one DWARF
policy), and what is generated for a request (the one plan: `btfgen -o DIR` and `btfgen
trace`'s build both render it). Every command opens its input through `open_options`, the
library through `open` (`btfgen.open`, `btfgen.decode.load`).
"""

from __future__ import annotations

import fnmatch
import platform
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from btfgen.abi.arches import arch_for_elf_machine, load_arch
from btfgen.abi.convention import Convention
from btfgen.btf import types as T
from btfgen.btf.reader import DEFAULT_PATH
from btfgen.errors import ArchError, BtfgenError, BtfgenWarning, DwarfError, HeaderError
from btfgen.layout import CTX_NAMES, ArchLayout, FunctionLayout

if TYPE_CHECKING:  # the plan renders through codegen/, imported when something is generated
    from btfgen.plan import Plan


class _Auto:
    def __repr__(self) -> str:
        return "AUTO"


AUTO = _Auto()  # dwarf=AUTO: the input's own DWARF when it has some


class Selection(NamedTuple):
    functions: list[T.Func]  # in BTF id order, each once
    missing: list[str]  # the names and globs that matched nothing, in request order

    def missing_line(self, path: str) -> str:
        """What every command says of the names that matched nothing."""
        return f"{path}: no function named {', '.join(self.missing)}"


@dataclass(frozen=True, slots=True)
class Placement:
    layout: ArchLayout
    dwarf: str | None  # the file whose DWARF was consulted
    corrections: tuple  # btfgen.dwarf.correct.Correction: functions placed from DWARF
    warning: str | None = None  # why DWARF consulted unasked was not after all
    unchecked: str | None = None  # DWARF was consulted, but could not be tied to most functions

    def notes(self) -> list[str]:
        """What a command says about this placement, one line each."""
        lines = [] if self.warning is None else [f"warning: DWARF not consulted: {self.warning}"]
        if self.unchecked:
            lines.append(f"warning: {self.unchecked}")
        if self.corrections:
            names = ", ".join(c.name for c in self.corrections[:8])
            more = (f" and {len(self.corrections) - 8} more"
                    if len(self.corrections) > 8 else "")
            lines.append(f"{len(self.corrections)} functions compiled with another convention "
                         f"than their prototype, placed from DWARF ({self.dwarf}): {names}{more}")
        return lines


def open(input: str | None = None, *, base: str | None = None, headers: Sequence[str] = (),
         include_dirs: Iterable[str] = (), defines: Iterable[str] = (), arch: str | None = None,
         ctx: str = "pt_regs", dwarf: str | None | _Auto = AUTO) -> Target:
    """Open `input` for `arch`.

    `input`: raw BTF, an ELF file with .BTF, or an ELF built with -g (its BTF made by pahole);
    default the running kernel's BTF. With `headers`, the C headers are the types (parsed by
    libclang for the arch) and `input`, if given, is the program they describe.
    `base`: the base BTF of a split BTF (vmlinux, for a module's).
    `arch`: any name btfgen knows; else the ELF machine of the input (or of `dwarf`), else the
    machine btfgen runs on.
    `dwarf`: a file with DWARF of the same build, consulted so that a function compiled with
    another convention than its prototype is placed where the compiler put its arguments;
    AUTO (the default): the input itself when it is an ELF with DWARF; None: never.
    """
    if ctx not in CTX_NAMES:
        raise BtfgenError(f"unknown trace ctx {ctx!r}; valid: {', '.join(CTX_NAMES)}")
    dwarf_path, dwarf_asked = _dwarf_file(dwarf, input, headers)
    if headers:
        conv = _convention(arch, None, input, dwarf_path)
        from btfgen.cheader import load_headers

        types = load_headers(list(headers), arch=conv.name, include_dirs=include_dirs,
                             defines=defines)
    else:
        from btfgen.dwarf.pahole import open_input

        input = input or DEFAULT_PATH
        types = open_input(input, base=base)
        conv = _convention(arch, types, input, dwarf_path)
    return Target(types, conv, ctx, input, dwarf_path, dwarf_asked)


def open_options(options, input: str | None = None, *,
                 dwarf_default: str | None = None) -> Target:
    """`open` with what a command's options say: the one way every command (and `btfgen
    trace`'s build) opens its input. `options` has any of the attributes `btf` (the input,
    unless `input` is given; dropped with headers, where it is only the default BTF), `base`,
    `header` / `include_dirs` / `defines` (C headers instead of BTF), `arch`, `ctx`, `dwarf`
    (a file) / `no_dwarf`. `dwarf_default`: the file whose DWARF is consulted when `dwarf`
    names none (default: the input's own)."""
    headers = getattr(options, "header", None) or []
    include_dirs = getattr(options, "include_dirs", None) or ()
    defines = getattr(options, "defines", None) or ()
    if not headers and (include_dirs or defines):
        raise HeaderError("-I/-D: only meaningful with --header")
    if getattr(options, "dwarf", None):
        dwarf = options.dwarf
    elif getattr(options, "no_dwarf", False):
        dwarf = None
    else:
        dwarf = dwarf_default or AUTO
    if input is None and not headers:
        input = getattr(options, "btf", None)
    return open(input, base=getattr(options, "base", None), headers=headers,
                include_dirs=include_dirs, defines=defines, arch=getattr(options, "arch", None),
                ctx=getattr(options, "ctx", None) or "pt_regs", dwarf=dwarf)


def _dwarf_file(dwarf, input: str | None, headers: Sequence[str]) -> tuple[str | None, bool]:
    """(the file whose DWARF to consult, whether it was asked for by name)."""
    if dwarf is None or dwarf is False:
        return None, False
    if dwarf is AUTO:
        if headers or not input or not _is_elf(input):
            return None, False
        from btfgen.dwarf.reader import has_dwarf

        return (input if has_dwarf(input) else None), False
    if not Path(dwarf).is_file():
        raise DwarfError(f"{dwarf}: no such file")
    return str(dwarf), True


def _parsed_filters(filters: Iterable) -> list:
    """Filters as texts ('FUNC: EXPR') or parsed, parsed."""
    filters = list(filters)
    if all(not isinstance(f, str) for f in filters):
        return filters
    from btfgen.typed import filter as typed_filter

    return [typed_filter.parse_options([f])[0] if isinstance(f, str) else f for f in filters]


def _is_elf(path: str) -> bool:
    from btfgen.btf.elf import MAGIC

    try:
        with Path(path).open("rb") as f:  # (this module's `open` is the front door)
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _convention(arch: str | None, types: T.TypeSource | None, input: str | None,
                dwarf: str | None) -> Convention:
    """The one arch rule: the name given (a family name resolved by the pointer size); else the
    ELF machine the types came with, else the input's or the DWARF file's ELF machine (raw BTF
    beside a vmlinux, headers beside a program); else the host. An ELF of a machine no
    description answers to is an error, never the host's convention in disguise."""
    declared = types.declared_pointer_size if types is not None else None
    if arch:
        return load_arch(arch, declared)
    machine, where = (types.elf_machine, types.path) if types is not None else (None, None)
    for path in (input, dwarf):
        if machine or not path:
            continue
        machine, elf_size = _elf_machine(path)
        where, declared = path, declared or elf_size
    if machine:
        conv = arch_for_elf_machine(machine, declared)
        if conv is None:
            raise ArchError(f"{where}: no ABI description for {machine}; pass --arch")
        return conv
    return load_arch(platform.machine(), declared)


def _elf_machine(path: str) -> tuple[str | None, int | None]:
    if not _is_elf(path):
        return None, None  # raw BTF, the common input: pyelftools is not imported for it
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with Path(path).open("rb") as f:
            elf = ELFFile(f)
            return str(elf["e_machine"]), elf.elfclass // 8
    except (OSError, ELFError):
        return None, None


_GLOB = re.compile(r"[*?\[]")


def is_glob(word: str) -> bool:
    """Whether a function name as asked is a glob (select's rule, and the trace build's: its
    deny list leaves out only what globs matched, never a function named as it is)."""
    return _GLOB.search(word) is not None


class Target:
    """Types, a calling convention and a trace ctx: everything placed, decoded, generated or
    checked for one input answers from here. Functions are placed on first use and kept."""

    def __init__(self, types: T.TypeSource, convention: Convention, ctx: str = "pt_regs",
                 input: str | None = None, dwarf: str | None = None, dwarf_asked: bool = False):
        self.types = types
        self.convention = convention
        self.ctx = ctx
        self.input = input
        self.dwarf = dwarf
        self._dwarf_asked = dwarf_asked
        self._by_name: dict[str, tuple[ArchLayout, tuple]] = {}
        self._every: list[T.Func] | None = None

    def every_function(self) -> list[T.Func]:
        """Every FUNC, in BTF id order (listed once: a kernel has tens of thousands)."""
        if self._every is None:
            self._every = list(self.types.funcs())
        return list(self._every)

    @property
    def arch(self) -> str:
        return self.convention.name

    @property
    def path(self) -> str:
        return self.types.path

    def __repr__(self) -> str:
        dwarf = f", dwarf={self.dwarf!r}" if self.dwarf else ""
        return (f"<btfgen.Target {self.path!r} arch={self.arch} ctx={self.ctx}{dwarf}: "
                f"{len(self.types)} types>")

    # -- choosing functions ------------------------------------------------------------------

    def select(self, patterns: Iterable[str] = (), files: Iterable[str] = ()) -> Selection:
        """The functions that `patterns` (names and globs) and the names in `files` (one a
        line, `#` comments) mean; all of them when none are given. A name means every FUNC of
        that name (static functions in several files share one)."""
        wanted = list(patterns)
        for f in files:
            wanted += read_names(f)
        types = self.types
        if not wanted:
            return Selection(self.every_function(), [])
        chosen: dict[int, T.Func] = {}
        missing = []
        globs = [w for w in wanted if is_glob(w)]
        for name in wanted:
            if name in globs:
                continue
            found = types.find_funcs(name)
            if not found:
                missing.append(name)
            for f in found:
                chosen[f.id] = f
        if globs:
            patterns_rx = [(g, re.compile(fnmatch.translate(g))) for g in globs]
            hits = dict.fromkeys(globs, 0)
            for f in types.funcs():
                for g, rx in patterns_rx:
                    if rx.match(f.name):
                        chosen[f.id] = f
                        hits[g] += 1
            missing += [g for g in globs if not hits[g]]
        order = {w: i for i, w in reversed(list(enumerate(wanted)))}
        missing = sorted(dict.fromkeys(missing), key=order.__getitem__)
        return Selection([chosen[i] for i in sorted(chosen)], missing)

    # -- placing -----------------------------------------------------------------------------

    def placement(self, functions: Iterable[T.Func] | None = None) -> Placement:
        """`functions` (default: every one) placed, then corrected by DWARF where there is
        DWARF to consult. A DWARF file named by the caller that cannot be read is an error; the
        input's own, consulted unasked, is a `Placement.warning` and the description's
        placement stands."""
        from btfgen.place import place_functions

        whole = functions is None
        funcs = self.every_function() if whole else list(functions)
        layout = place_functions(self.types, self.convention, funcs, ctx=self.ctx)
        # A trampoline's slots are the kernel's model of the BTF prototype (save_args follows
        # btf_distill_func_proto's sizes), not where the compiler put the values: no DWARF.
        if self.dwarf is None or not funcs or layout.ctx.slots:
            return Placement(layout, None, ())
        from btfgen.dwarf.correct import correct

        try:
            corrected = correct(layout, self.dwarf, self.convention, selected=not whole)
        except DwarfError as e:
            if self._dwarf_asked:
                raise
            return Placement(layout, None, (), warning=str(e))
        return Placement(corrected.layout, self.dwarf, tuple(corrected.corrections),
                         unchecked=corrected.warning(self.dwarf))

    def place(self, functions: Iterable[T.Func] | None = None) -> ArchLayout:
        """`placement(functions).layout`; what was not done is a `BtfgenWarning`."""
        p = self.placement(functions)
        for line in p.notes():
            if line.startswith("warning: "):
                warnings.warn(line[len("warning: "):], BtfgenWarning, stacklevel=2)
        return p.layout

    def refusals(self, functions: Iterable[T.Func] | None = None) -> dict[int, str]:
        """The functions (default: every one) this Target's ctx cannot take at all, by BTF id,
        each with its reason: with ctx="trampoline", those the kernel would build no BPF
        trampoline for (a struct over 16 bytes, too many slots, a struct return, ...), which a
        tracer takes through a kprobe instead. Empty for a ctx that refuses nothing."""
        from btfgen.place import place_functions

        funcs = self.every_function() if functions is None else list(functions)
        layout = place_functions(self.types, self.convention, funcs, ctx=self.ctx)
        return {f.btf_id: f.refused for f in layout.functions if f.refused is not None}

    def check(self, functions: Iterable[T.Func] | None = None, on_unit=None) -> list:
        """Each function (default: every one) as placed by the description, against where
        its DWARF says its parameters are at entry: `btfgen.dwarf.compare.FunctionVerdict`s,
        one per name (static functions of one name are compared together), sorted by name.
        `on_unit(done, size)`: how far into the DWARF (bytes of .debug_info), as it reads."""
        if self.dwarf is None:
            raise DwarfError(f"{self.input or self.path}: no DWARF to check against (an ELF "
                             f"built with -g, or a kernel's -dbg vmlinux)")
        from btfgen.dwarf.compare import compare_function
        from btfgen.dwarf.correct import read_dwarf
        from btfgen.place import place_functions

        whole = functions is None
        funcs = self.every_function() if whole else list(functions)
        layout = place_functions(self.types, self.convention, funcs, ctx=self.ctx)
        found = read_dwarf(self.dwarf, self.convention,
                           None if whole else {f.name for f in layout.functions}, on_unit)
        verdicts = {}
        for f in layout.functions:
            if f.name not in verdicts:
                verdicts[f.name] = compare_function(f, found.get(f.name, []), self.convention)
        return [verdicts[k] for k in sorted(verdicts)]

    def _named(self, name: str) -> tuple[ArchLayout, tuple]:
        hit = self._by_name.get(name)
        if hit is None:
            funcs = self.types.find_funcs(name)
            if not funcs:
                raise KeyError(f"{self.path}: no function {name!r}")
            arch = self.place(funcs)
            hit = self._by_name[name] = (arch, tuple(function_decoder(f, arch)
                                                     for f in arch.functions))
        return hit

    def layouts(self, name: str) -> tuple[FunctionLayout, ...]:
        """Every function of that name, placed (static functions in several files share one)."""
        return self._named(name)[0].functions

    def layout(self, name: str) -> FunctionLayout:
        return self.layouts(name)[0]

    def arch_layout(self, name: str) -> ArchLayout:
        return self._named(name)[0]

    # -- generating --------------------------------------------------------------------------

    def plan(self, functions=None, *, captures: Iterable[str] = (), strings: bool = False,
             string_size: int | None = None, filters: Iterable = (), kernel: bool = True,
             self_contained: bool | None = None, capture_budget: int | None = None) -> Plan:
        """What to generate for `functions`, worked out once (`btfgen.plan.Plan`): placed
        (unless already), each function's captures resolved, the filters checked against the
        placement. `Plan.files` renders it as `btfgen -o DIR`, `Plan.trace_files` as a trace
        directory.

        `functions`: None (every one), names and globs, FUNCs, or an `ArchLayout` placed by
        this target (used as is). `captures`: `'FUNC: PATH, PATH'` texts (`btfgen --capture`);
        `strings`: a string capture of every `char *` argument too, of at most `string_size`
        characters (of a buffer, `PATH[LEN]`, bytes); `capture_budget`: the record data bytes
        a call's captures may take (default 1024). `filters`: `'FUNC: EXPR'` texts (or parsed
        filters). `kernel`: what is generated may run in a kernel probe (`btfgen -o`'s header
        serves both kinds); False: in uprobes only, which read user memory alone.
        `self_contained`: the BPF header defines its types (default: only for 32-bit targets,
        which have no vmlinux.h of their own).

        A capture or filter that does not fit raises `CaptureOptionError` /
        `FilterOptionError` (one line naming the option and the column); a name that matches
        nothing, `KeyError`."""
        from btfgen.plan import Plan

        # The capture and filter languages are imported only when there are some.
        parsed = _parsed_filters(filters)
        placed = functions if isinstance(functions, ArchLayout) else None
        if placed is not None:
            funcs = [self.types[f.btf_id] for f in placed.functions]
        else:
            funcs = None if functions is None else self._chosen(functions)
        found, notes, left = {}, [], []
        captures = list(captures)
        if captures or strings:
            from btfgen.typed import capture

            funcs_caught = self.every_function() if funcs is None else funcs
            # Where kernel and user addresses overlap, every load's memory must be known for
            # a kernel probe (an untagged pointer is refused, or named with :user).
            separate = (self.arch if kernel and self.convention.address_spaces == "separate"
                        else None)
            if separate and strings:
                left = capture.unguessable_strings(funcs_caught)
            found, notes = capture.for_options(
                funcs_caught, captures, capture.STRING_SIZE if string_size is None else
                string_size, strings, separate,
                capture.CALL_BUDGET if capture_budget is None else capture_budget)
        placement = Placement(placed, None, ()) if placed is not None else self.placement(funcs)
        layout = placement.layout
        bound = []
        if parsed:
            from btfgen.typed import filter as typed_filter

            bound = typed_filter.bind(parsed, layout, self.types, kernel=kernel)
        return Plan(layout, self.types, found, tuple(bound),
                    layout.pointer_size != 8 if self_contained is None else self_contained,
                    tuple(placement.notes()), tuple(notes), tuple(left))

    def generate(self, functions=None, langs: Sequence[str] | None = None, *,
                 captures: Iterable[str] = (), strings: bool = False,
                 string_size: int | None = None, filters: Iterable = (),
                 self_contained: bool | None = None, specs: bool = True,
                 jobs: int = 1, capture_budget: int | None = None) -> dict[str, str]:
        """The generated files, file name -> text, as `btfgen -o DIR` writes them: `plan`'s
        (same arguments, for kernel probes and uprobes alike) rendered for `langs`: "bpf",
        "python", "json" (default: these three), "kernel" (kernel C, for the ftrace_regs or
        pt_regs ctx); filters write btfgen_filter.h beside the BPF header;
        `specs`: with the generic decoder's C table. What was not done (DWARF not consulted,
        captures left out) is a `BtfgenWarning`."""
        from btfgen.codegen.outputs import DEFAULT_LANGS

        langs = tuple(langs or DEFAULT_LANGS)
        parsed = _parsed_filters(filters)
        if parsed and "bpf" not in langs:
            raise BtfgenError("filters are BPF C: generate them with the \"bpf\" language")
        plan = self.plan(functions, captures=captures, strings=strings,
                         string_size=string_size, filters=parsed, self_contained=self_contained,
                         capture_budget=capture_budget)
        said = [line[len("warning: "):] for line in plan.placement_notes
                if line.startswith("warning: ")]
        for line in said + [f"capture {line}" for line in plan.capture_notes]:
            warnings.warn(line, BtfgenWarning, stacklevel=2)
        return plan.files(langs, specs_table=specs, jobs=jobs)

    def _chosen(self, functions) -> list[T.Func]:
        """FUNCs as given; names and globs selected (one matching nothing: KeyError)."""
        given = list(functions)
        names = [f for f in given if isinstance(f, str)]
        if not names:
            return given
        selection = self.select(names)
        if selection.missing:
            raise KeyError(selection.missing_line(self.path))
        return selection.functions + [f for f in given if not isinstance(f, str)]

    # -- decoding ----------------------------------------------------------------------------

    def functions(self, name: str) -> tuple:
        """The decoders (`btfgen.decoder.runtime.Function`) of every function of that name."""
        return self._named(name)[1]

    def function(self, name: str):
        """The decoder of the first function of that name: `.entry(ctx, stack, read_memory)`,
        `.decode_exit(ctx)`, `.decode_record(record)`."""
        return self.functions(name)[0]


def function_decoder(f: FunctionLayout, arch: ArchLayout):
    """The decoders (`btfgen.decoder.runtime.Function`) of one placed function of `arch`."""
    from btfgen.decoder.describe import function_desc
    from btfgen.decoder.runtime import Function

    return Function(function_desc(f, arch.byte_order, arch.pointer_size))


def read_names(path: str) -> list[str]:
    """Function names or globs from a file: one a line, `#` starts a comment."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise BtfgenError(f"{path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise BtfgenError(f"{path}: not a text file of function names") from None
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out
