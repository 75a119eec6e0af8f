#!/usr/bin/env python3
"""Read the btfgen_fprobe module's records into a btfgen recording, which `btfgen decode` prints.

    python3 btfgen_fprobe_record.py GEN_DIR OUT.btfrec [--seconds N] [--module NAME]

GEN_DIR holds what `btfgen --lang kernel,python` wrote for the module: its btfgen_<arch>.py
describes each function's record, the same table the module's btfgen.kernel.h was made with.
Reads /proc/btfgen_fprobe until interrupted (or N seconds), then once more, and says what the
module sent, lost (ring full) and what its probes missed. The kprobe example's module
(examples/kprobe: /proc/btfgen_kprobe) writes the same records: `--module btfgen_kprobe`, or
without --module the one of the two that is loaded. Needs btfgen's run side (btfgen.probe,
standard library only) on the path: an installed btfgen, or a trace directory's copy
(btfgen_probe/, as `btfgen trace --build` writes it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import struct
import sys
import time
from pathlib import Path

MODULES = ("btfgen_fprobe", "btfgen_kprobe")  # examples/fprobe, examples/kprobe
READ = 256 << 10


def stats(module: str) -> dict[str, int]:
    with open(f"/proc/{module}_stats") as f:
        return {k: int(v) for k, v in (line.split() for line in f if line.strip())}


def loaded_module() -> str:
    found = [m for m in MODULES if os.path.exists(f"/proc/{m}")]
    if len(found) != 1:
        said = " and ".join(found) if found else "neither of " + " and ".join(MODULES)
        raise SystemExit(f"btfgen_fprobe_record: {said} loaded: say which with --module")
    return found[0]


def load_module(gen: Path):
    found = sorted(gen.glob("btfgen_*.py"))
    if len(found) != 1:
        raise SystemExit(f"btfgen_fprobe_record: {gen}: expected one btfgen_<arch>.py "
                         f"(btfgen --lang kernel,python), found {len(found)}")
    spec = importlib.util.spec_from_file_location("btfgen_generated", found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def payloads(data: bytes, order: str):
    """The records of a read: each an 8-byte header (its length first) and padding to 8."""
    length = struct.Struct(("<" if order == "little" else ">") + "I")
    at = 0
    while at + 8 <= len(data):
        n = length.unpack_from(data, at)[0]
        if at + 8 + n > len(data):
            raise SystemExit(f"btfgen_fprobe_record: a record of {n} bytes past the read's end")
        yield data[at + 8:at + 8 + n]
        at += 8 + (n + 7) // 8 * 8


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="btfgen_fprobe_record", description=__doc__.split("\n")[0])
    ap.add_argument("gen", type=Path)
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--module", choices=MODULES, default=None,
                    help="the module whose records to read (default: the one loaded)")
    args = ap.parse_args(argv)
    try:
        from btfgen.probe import manifest, recording
    except ImportError:  # a trace directory's copy of the run side
        from btfgen_probe import manifest, recording
    DecoderView = manifest.DecoderView

    mod = load_module(args.gen)
    module = args.module or loaded_module()
    records = f"/proc/{module}"
    try:
        fd = os.open(records, os.O_RDONLY)
    except OSError as e:
        raise SystemExit(f"btfgen_fprobe_record: {records}: {e.strerror} (is {module} "
                         f"loaded?)") from None
    names = mod.names()
    header = {"format": "btfgen trace recording", "arch": mod.ARCH, "who": True,
              "byte_order": mod.BYTE_ORDER, "pointer_size": mod.POINTER_SIZE,
              "kernel_release": os.uname().release, "kind": "kernel",
              "host": os.uname().nodename,
              "clock_offset_ns": time.time_ns() - time.monotonic_ns(),
              "program": module, "btf": None, "btf_sha256": None}
    writer = recording.Writer(args.out, header, DecoderView(mod).descriptors(names),
                              mod.BYTE_ORDER)
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    end = None if args.seconds is None else time.monotonic() + args.seconds
    try:
        while True:
            last = bool(stop) or (end is not None and time.monotonic() >= end)
            data = os.read(fd, READ)
            if data:
                writer.records(payloads(data, mod.BYTE_ORDER))
            short = len(data) < READ // 2  # the ring was nearly empty
            if last and short:
                # Told to stop: what the ring held has been read, however far behind the
                # reader was (its own reads are not recorded, so this ends).
                break
            if short:
                time.sleep(0.02)
    finally:
        os.close(fd)
    s = stats(module)
    writer.close(s["lost"])
    print(f"btfgen_fprobe_record: recorded {writer.events} events in {args.out}; {module} "
          f"sent {s['events']}, lost {s['lost']} (ring full); its probes missed {s['missed']}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
