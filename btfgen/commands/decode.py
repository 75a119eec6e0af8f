"""Print a recording made by `btfgen trace --record FILE`, on any machine (no BPF, no BTF), or
gather many recordings into one Parquet dataset.

Text is what `btfgen trace` prints; jsonl what `btfgen trace --json` prints (one FILE, to
stdout). chrome writes the Trace Event Format (Perfetto UI, chrome://tracing, speedscope),
folded the calls' folded stacks (flamegraph.pl, speedscope), --tree an indented call tree per
thread (one FILE each, to stdout; btfgen/recordings/callwalk.py). parquet adds every recording
named (FILE, or every file of a DIR) to the Hive-partitioned dataset at -o DIR
(host=/kernel=/function=; see btfgen/recordings/dataset.py), in parallel over the CPUs; a
recording already there is not added again (needs the `btfgen[arrow]` extra: numpy and
pyarrow).

Exit status: 0 every recording decoded or added (or already there); 1 some recordings were
refused (each named on one line of stderr; the others landed, nothing of the refused ones was
written); 2 bad usage or, for text and jsonl, a bad recording.
"""

from __future__ import annotations

import argparse
import os
import sys

from btfgen.commands.options import jobs_count
from btfgen.errors import BtfgenError


def rewrite_argv(argv: list) -> list:
    """`--errors=WHAT` as argparse takes it (output.errors_value)."""
    from btfgen.probe.output import errors_value

    return errors_value(argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="FILE|DIR",
                        help="a recording (btfgen trace --record); for --format parquet, "
                             "several, or directories of them")
    parser.add_argument("--format", choices=("text", "jsonl", "chrome", "folded", "parquet"),
                        default="text",
                        help="chrome: the Trace Event Format (Perfetto UI, chrome://tracing, "
                             "speedscope); folded: folded stacks weighted by time (flamegraph.pl, "
                             "speedscope)")
    parser.add_argument("--no-args", dest="no_args", action="store_true",
                        help="--format chrome without each call's arguments and return value "
                             "(speedscope makes a frame of each distinct name and args: without "
                             "them its calls of one function aggregate)")
    parser.add_argument("--tree", action="store_true",
                        help="the calls as an indented tree per thread, with their durations")
    parser.add_argument("--bytes", dest="bytes_as", choices=("auto", "text", "hex"),
                        default="auto",
                        help="a captured buffer in text as text (escaped) or hex; auto (the "
                             "default): text where every byte is printable, else hex (jsonl "
                             "gives its bytes in hex)")
    parser.add_argument("--errors", action="store_true",
                        help="--errors[=WHAT]: only the calls that returned an error, with "
                             "their arguments (text and jsonl): as btfgen trace --errors "
                             "chooses them (a user function's WHAT: -1, negative, null; "
                             "default -1,null)")
    parser.add_argument("--errors-are", dest="errors_are", help=argparse.SUPPRESS)
    parser.add_argument("--kallsyms", metavar="FILE",
                        help="a recording made with --stack: the kernel's symbols (kallsyms or "
                             "System.map) naming kernel frames the recording kept no symbol for")
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="the dataset --format parquet adds the recordings to (created if "
                             "missing)")
    parser.add_argument("-j", "--jobs", type=jobs_count, default=None, metavar="N",
                        help="recordings decoded at once (default: one per CPU)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bar and no summary line")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run(args: argparse.Namespace) -> int:
    if args.format == "parquet":
        if not args.output:
            raise BtfgenError("--format parquet writes a dataset: give its directory with -o DIR")
        if args.errors:
            raise BtfgenError("--errors is for text and jsonl")
        return _dataset(args)
    if args.output:
        raise BtfgenError("-o is for --format parquet; the other formats go to stdout")
    if args.tree and args.format not in ("text",):
        raise BtfgenError(f"--tree prints text: it takes no --format {args.format}")
    if args.no_args and args.format != "chrome":
        raise BtfgenError("--no-args is for --format chrome")
    if args.errors and (args.tree or args.format in ("chrome", "folded")):
        raise BtfgenError("--errors is for text and jsonl")
    if len(args.inputs) != 1:
        raise BtfgenError(f"--format {args.format} prints one recording (several go into a "
                          f"dataset: --format parquet -o DIR)")
    from btfgen.probe import output, recording
    from btfgen.progress import Progress
    from btfgen.recordings import replay

    errors_are = None
    if args.errors_are is not None:
        try:
            errors_are = output.errors_are(args.errors_are)
        except ValueError as e:
            raise BtfgenError(str(e)) from None

    path = args.inputs[0]
    if args.tree or args.format in ("chrome", "folded"):
        return _export(args, path)
    # The bar shares the terminal with what is printed only when that goes elsewhere.
    with Progress(not args.quiet and not sys.stdout.isatty(), "btfgen decode") as progress:
        progress(f"decoding {path}")
        progress.watch(path)
        try:
            return replay.print_recording(path, sys.stdout, as_json=args.format == "jsonl",
                                          errors=args.errors, errors_are=errors_are,
                                          bytes_as=args.bytes_as, kallsyms=args.kallsyms)
        except recording.RecordError as e:
            raise BtfgenError(str(e)) from None


def _export(args: argparse.Namespace, path: str) -> int:
    from btfgen.probe import recording
    from btfgen.progress import Progress
    from btfgen.recordings import callwalk

    if args.tree:
        from btfgen.recordings.tree import Tree
        export = Tree(sys.stdout, bytes_as=args.bytes_as)
    elif args.format == "chrome":
        from btfgen.recordings.chrome import Chrome
        export = Chrome(sys.stdout, args=not args.no_args)
    else:
        from btfgen.recordings.folded import Folded
        export = Folded(sys.stdout)
    with Progress(not args.quiet and not sys.stdout.isatty(), "btfgen decode") as progress:
        progress(f"converting {path}")
        progress.watch(path)
        try:
            walk, cut, events, lost = callwalk.walk(path, export)
        except callwalk.Damaged as e:  # what precedes the damage is written, and closed
            sys.stdout.flush()
            raise BtfgenError(f"{e} (what precedes it is converted)") from None
        except recording.RecordError as e:
            raise BtfgenError(str(e)) from None
    unended = walk.said()
    unended = f"; calls without their exit: {unended}" if unended else ""
    if walk.orphans:
        unended += f"; exits without their entry: {walk.orphans}"
    if cut:
        print(f"btfgen decode: {path}: cut at byte {cut[0]} after {cut[1]} events (the "
              f"recording has no end: its tracer was killed?); records lost unknown{unended}",
              file=sys.stderr)
    else:
        print(f"btfgen decode: {events} events recorded; {lost} records lost (ring buffer "
              f"full){unended}", file=sys.stderr)
    return 0


def _dataset(args: argparse.Namespace) -> int:
    from btfgen.progress import Progress
    from btfgen.recordings import dataset

    paths = dataset.inputs(args.inputs)
    if not paths:
        raise BtfgenError(f"no recordings in {', '.join(args.inputs)}")
    jobs = args.jobs or min(_cpus(), len(paths))
    with Progress(not args.quiet, "btfgen decode") as progress:
        progress(f"{len(paths)} recording{'s' * (len(paths) != 1)} -> {args.output}")
        results = dataset.add_all(paths, args.output, jobs, progress)
    refused = [a for a in results if a.error]
    for a in refused:
        print(f"btfgen decode: {a.error}", file=sys.stderr)
    for a in results:
        if a.cut:
            print(f"btfgen decode: {a.cut}", file=sys.stderr)
    if not args.quiet:
        added = [a for a in results if a.new]
        there = len(results) - len(added) - len(refused)
        print(f"btfgen decode: {args.output}: {len(added)} recordings added "
              f"({sum(a.rows for a in added)} rows), {there} already there, "
              f"{len(refused)} refused", file=sys.stderr)
    return 1 if refused else 0
