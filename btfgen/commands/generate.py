"""Generate BPF C and Python decoders of function arguments (the default command).

`btfgen` alone generates for the running kernel (/sys/kernel/btf/vmlinux, the host's arch);
`btfgen vmlinux --arch riscv` is the build-step form. Functions are chosen by name, glob or a
file of names (default: all). Files are written atomically and only when their content changed.
Exit status: 0 ok, 1 some requested functions are missing (named on stderr), 2 bad usage/input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from btfgen.codegen.outputs import DEFAULT_LANGS, LANGS
from btfgen.commands.options import (
    add_btf_arguments,
    add_ctx_argument,
    add_header_arguments,
    jobs_count,
)
from btfgen.errors import BtfgenError
from btfgen.probe.options import CALL_BUDGET, STRING_SIZE
from btfgen.target import BtfgenWarning


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_btf_arguments(parser, dwarf_input=True)
    parser.add_argument("--arch",
                        help="target arch (default: the BTF's ELF machine, else the host)")
    parser.add_argument("--func", action="append", default=[], metavar="NAME",
                        help="a function name or glob (repeatable; default: every function)")
    parser.add_argument("--funcs-file", metavar="F",
                        help="a file of function names or globs, one per line, # comments")
    add_ctx_argument(parser, default=None)
    parser.add_argument("--lang", default=",".join(DEFAULT_LANGS),
                        help=f"comma-separated outputs among {', '.join(LANGS)} (default: "
                             f"{','.join(DEFAULT_LANGS)}; kernel: a header for kernel code's "
                             f"fprobe/kprobe callbacks, whose --ctx is ftrace_regs unless given)")
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="output directory (default: generated/<arch>/)")
    parser.add_argument("--self-contained", action="store_true",
                        help="the BPF header defines the types it needs (no vmlinux.h); "
                             "always on for 32-bit targets")
    parser.add_argument("--no-specs", action="store_true",
                        help="do not write the generic decoder's C table (btfgen_specs.h)")
    parser.add_argument("-j", "--jobs", type=jobs_count, default=None, metavar="N",
                        help="1: render the outputs in this process; more: in two at once "
                             "(default: two where there are several CPUs and 2000+ functions)")
    parser.add_argument("--filter", action="append", default=[], metavar="'FUNC: EXPR'",
                        help="write btfgen_filter.h: btfgen_filter_FUNC(args) and "
                             "btfgen_filter_exit_FUNC(ret), EXPR checked against BTF (e.g. "
                             "'vfs_read: count > 4096 && file->f_flags & 0x800'; repeatable, "
                             "one per function; FUNC may be a glob)")
    parser.add_argument("--capture", action="append", default=[], metavar="'FUNC: PATH, ...'",
                        help="capture what these paths point to: struct "
                             "btfgen_captures_FUNC and btfgen_capture_FUNC() in the BPF "
                             "header, and in the generic decoder's specs and the Python module "
                             "(as `btfgen trace --capture`; repeatable)")
    parser.add_argument("--capture-strings", action="store_true",
                        help="and the string behind every char * argument (opt-in here: the "
                             "generated record layouts do not change unasked)")
    parser.add_argument("--value-size", "--string-size", dest="string_size", type=int,
                        default=STRING_SIZE, metavar="BYTES",
                        help=f"bytes of a captured string or buffer kept (default {STRING_SIZE}, "
                             "at most "
                             "4093; --string-size: its old name)")
    parser.add_argument("--capture-budget", type=int, default=CALL_BUDGET, metavar="BYTES",
                        help=f"record bytes a call's captures may take (default {CALL_BUDGET}, "
                             "at most 8192; "
                             "the named captures first, the default strings in what is left)")
    add_header_arguments(parser)
    from btfgen.commands.options import add_dwarf_arguments

    add_dwarf_arguments(parser)
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    noise.add_argument("-v", "--verbose", action="store_true",
                       help="list partly decodable functions and files written")


# Below this many functions a forked process costs more than it saves.
PARALLEL_FROM = 2000


def _jobs_for(asked: int | None, nfuncs: int) -> int:
    if asked is not None:
        return asked
    if nfuncs < PARALLEL_FROM:
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_langs(text: str) -> tuple[str, ...]:
    langs = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in langs if x not in LANGS]
    if bad or not langs:
        raise BtfgenError(f"--lang: {', '.join(bad) or 'nothing'}: choose among {', '.join(LANGS)}")
    return langs


def run(args: argparse.Namespace) -> int:
    # One pause for the whole run: re-enabled between placing and rendering, the collector
    # would make one full pass over everything placed (a quarter second on a kernel) for nothing.
    from btfgen.gcpause import collector_paused
    from btfgen.progress import Progress

    with collector_paused(), Progress(not args.quiet) as progress:
        status = _run(args, progress)
        if getattr(args, "_ends_process", False):
            # What the run leaves is garbage in cycles (the BTF's types point at their table):
            # a collection once the collector is back on, then another at exit, walked it all
            # to free what the exit frees anyway (0.3 s of a whole kernel's run). Frozen, it is
            # skipped. Not for a caller in-process: it would never be collected.
            import gc

            gc.freeze()
        return status


class _Stages:
    """The bar counts the run's stages: each is one call (placing, rendering in forked
    processes), with nothing to count inside it."""

    def __init__(self, progress, n: int):
        self.progress, self.n, self.at = progress, n, 0

    def __call__(self, what: str) -> None:
        self.progress(what)
        self.progress.reached(self.at, self.n, "stages")
        self.at += 1


def _run(args: argparse.Namespace, progress) -> int:
    langs = parse_langs(args.lang)
    from btfgen.commands.options import print_notes
    from btfgen.target import open_options

    filters = []
    if args.filter:  # (the filter language is imported only for filters)
        from btfgen.typed import filter as typed_filter

        filters = typed_filter.parse_options(args.filter)  # a syntax error before reading BTF
    if filters and "bpf" not in langs:
        raise BtfgenError("--filter writes BPF C: give it with --lang bpf")
    if args.ctx is None:
        # Kernel C's callbacks are fprobe's: struct ftrace_regs (every output of the run is
        # placed for that one ctx, so that the Python module reads what the header records).
        args.ctx = "ftrace_regs" if "kernel" in langs else "pt_regs"
    stage = _Stages(progress, 4)
    stage("reading BTF")
    target = open_options(args)
    selection = target.select(args.func, files=[args.funcs_file] if args.funcs_file else [])
    funcs, missing = selection
    stage(f"placing {len(funcs)} functions")
    whole = not args.func and not args.funcs_file
    placement = target.placement(None if whole else funcs)
    arch = placement.layout
    if "kernel" in langs:
        from btfgen.codegen.kernel import check_ctx

        check_ctx(arch)  # before anything is written
    print_notes(placement, quiet=args.quiet)
    stage("generating " + ", ".join(langs))
    import warnings

    from btfgen.commands.summary import summarize
    from btfgen.commands.write import write_if_changed

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", BtfgenWarning)
        files = target.generate(arch, langs, captures=args.capture,
                                strings=args.capture_strings, string_size=args.string_size,
                                capture_budget=args.capture_budget,
                                filters=filters, self_contained=args.self_contained or None,
                                specs=not args.no_specs, jobs=_jobs_for(args.jobs, len(funcs)))
    for w in said:
        print(f"btfgen: warning: {w.message}", file=sys.stderr)
    outdir = Path(args.output) if args.output else Path("generated") / arch.arch
    stage(f"writing {outdir}")
    written = [name for name, text in sorted(files.items())
               if write_if_changed(outdir / name, text)]
    progress.done()
    if not args.quiet:
        print(summarize(arch, outdir, len(files), len(written)), file=sys.stderr)
    if args.verbose:
        for name in written:
            print(f"btfgen: wrote {outdir / name}", file=sys.stderr)
        for line in summarize_partial(arch):
            print(line, file=sys.stderr)
    if missing:
        print(f"btfgen: {selection.missing_line(target.path)}", file=sys.stderr)
        return 1
    return 0


def summarize_partial(arch) -> list[str]:
    from btfgen.commands.summary import partial_reasons

    return [f"btfgen: partly decodable: {f.name}: {'; '.join(reasons)}"
            for f, reasons in partial_reasons(arch)]
