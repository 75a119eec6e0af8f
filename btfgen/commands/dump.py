"""Print BTF exactly as `bpftool btf dump file BTF [base BASE] format raw` does.

BTF is a raw BTF file (default: the running kernel's) or any ELF file with a .BTF section; a
kernel module's split BTF needs its base (`--base vmlinux`).
"""

from __future__ import annotations

import argparse
import sys

from btfgen.btf.dump import dump_raw
from btfgen.btf.reader import open_btf
from btfgen.commands.options import add_btf_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_btf_arguments(parser)


def run(args: argparse.Namespace) -> int:
    # The BTF as it is in the file, nothing placed: the one command that needs no arch, so it
    # opens with open_btf rather than btfgen.target.open_options (commands/options.py).
    btf = open_btf(args.btf, base=args.base)
    text = dump_raw(btf)  # all of it before the first byte goes out: no partial dump on error
    out = sys.stdout.buffer
    out.write(text.encode("utf-8", "surrogateescape"))
    out.flush()
    return 0
