"""Print BTF exactly as `bpftool btf dump file BTF [base BASE] format raw` does.

BTF is a raw BTF file (default: the running kernel's) or any ELF file with a .BTF section; a
kernel module's split BTF needs its base (`--base vmlinux`).
"""

from __future__ import annotations

import argparse
import sys

from btfgen.btf.dump import dump_raw
from btfgen.btf.reader import DEFAULT_PATH, open_btf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("btf", nargs="?", default=DEFAULT_PATH, metavar="BTF",
                        help=f"raw BTF or an ELF file with .BTF (default: {DEFAULT_PATH})")
    parser.add_argument("--base", metavar="BASE",
                        help="the base BTF of a split BTF (vmlinux for a module)")


def run(args: argparse.Namespace) -> int:
    btf = open_btf(args.btf, base=args.base)
    text = dump_raw(btf)  # all of it before the first byte goes out: no partial dump on error
    out = sys.stdout.buffer
    out.write(text.encode("utf-8", "surrogateescape"))
    out.flush()
    return 0
