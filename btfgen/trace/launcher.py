#!/usr/bin/env python3
"""A trace directory's btfgen_trace.py: runs the copy of the run side beside it (btfgen_probe/,
btfgen/probe in the source) with Python's standard library and libbpf alone, as

    sudo python3 DIR/btfgen_trace.py --run DIR [-- COMMAND...]

`btfgen trace --build` copies this file into the directory."""

import os
import sys

if __name__ == "__main__":
    # This directory, even where the interpreter leaves the script's directory off sys.path
    # (python -I, -P): the package beside it is the run side, whatever else is installed.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from btfgen_probe import tool

    sys.exit(tool.main())  # it says its lines as btfgen_trace (btfgen_probe's prog.NAME)
