"""Print a recording made by `btfgen trace --record FILE`, on any machine (no BPF, no BTF).

Text is what `btfgen trace` prints; jsonl what `btfgen trace --json` prints; parquet writes one
Parquet file per function and kind (entry, exit) into the --output directory (needs the
`btfgen[arrow]` extra: numpy and pyarrow).
"""

from __future__ import annotations

import argparse
import sys

from btfgen.errors import BtfgenError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a recording (btfgen trace --record)")
    parser.add_argument("--format", choices=("text", "jsonl", "parquet"), default="text")
    parser.add_argument("--errors", action="store_true",
                        help="only the calls that returned an error, with their arguments "
                             "(text and jsonl)")
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="where --format parquet writes FUNCTION.entry.parquet and "
                             "FUNCTION.exit.parquet")


def run(args: argparse.Namespace) -> int:
    from btfgen.trace import replay, recording

    if args.format == "parquet":
        if not args.output:
            raise BtfgenError("--format parquet writes files: give the directory with -o DIR")
        if args.errors:
            raise BtfgenError("--errors is for text and jsonl")
    elif args.output:
        raise BtfgenError("-o is for --format parquet; text and jsonl go to stdout")
    try:
        if args.format == "parquet":
            from btfgen.trace import columnar

            return columnar.write_parquet(args.file, args.output)
        return replay.print_recording(args.file, sys.stdout, as_json=args.format == "jsonl",
                                      errors=args.errors)
    except recording.RecordError as e:
        raise BtfgenError(str(e)) from None
