"""`btfgen decode`'s reading side: a recording (recording.py) back into the lines `btfgen trace`
prints, with the decoders the file carries (no BPF, no BTF, no generated module)."""

from __future__ import annotations

import sys

from btfgen.btf.walk import MAX_DEPTH  # describe() nests no deeper
from btfgen.decoder.runtime import DecodeError, Function, FunctionDesc, Limit
from btfgen.trace import output, recording

# No value the generic record holds is larger (BTFGEN_DATA_SIZE is 1024).
LIMIT = Limit(size=1 << 16, depth=MAX_DEPTH)


def functions(reader: recording.Reader) -> list[Function]:
    """The recording's decoders, each descriptor checked (FunctionDesc.check: a crafted file
    with a valid checksum must not make the decoder misread or build a list of a billion
    elements) and agreeing with the file's byte order and strides."""
    out = []
    for i, (obj, stride) in enumerate(zip(reader.descriptors, reader.strides)):
        try:
            desc = FunctionDesc.check(obj, LIMIT)
        except DecodeError as e:
            raise recording.RecordError(f"{reader.path}: corrupt header (function {i}: "
                                        f"{e})") from None
        if desc.byte_order != reader.order:
            raise recording.RecordError(f"{reader.path}: corrupt header (function {i} is "
                                        f"{desc.byte_order}-endian in a {reader.order}-endian "
                                        f"recording)")
        if stride != recording.stride(desc):
            raise recording.RecordError(f"{reader.path}: corrupt header (function {i}: a "
                                        f"stride of {stride} bytes, its decoder reads "
                                        f"{recording.stride(desc)})")
        out.append(Function(desc))
    if len({f.btf_id for f in out}) != len(out):
        # Events name their function by BTF id: two with one id would decode as either.
        raise recording.RecordError(f"{reader.path}: corrupt header (two functions with one "
                                    f"BTF id)")
    return out


def word_sum():
    """recording.word_sum, by numpy when it is there (a batch in a millisecond)."""
    try:
        import numpy as np
    except ImportError:
        return recording.word_sum
    return lambda data: int(np.frombuffer(data, dtype="<u8").sum(dtype=np.uint64))


def verify(path: str) -> None:
    """Every check of the file, before a line is printed: a bad file prints nothing."""
    with recording.Reader(path, word_sum()) as r:
        functions(r)
        for _ in r.batches():
            pass


def print_recording(path: str, out=sys.stdout, *, as_json: bool = False,
                    errors: bool = False) -> int:
    """Print every event as `btfgen trace` would have; the number of records the ring buffer
    lost goes to stderr, as the tracer says it."""
    verify(path)
    with recording.Reader(path, word_sum()) as r:
        printer = output.Printer(functions(r), r.order, out, who=bool(r.header.get("who")),
                                 errors=errors, as_json=as_json, flush=False)
        for batch in r.batches():
            for raw in batch.events(r.strides):
                try:
                    printer.event(raw)
                except (output.BadEvent, DecodeError) as e:  # what a damaged file can cause
                    raise recording.RecordError(f"{path}: corrupt event ({e})") from None
        print(f"btfgen decode: {r.events} events recorded on {r.header.get('arch')} "
              f"{r.header.get('kernel_release')}; {r.lost} records lost (ring buffer full)",
              file=sys.stderr)
    return 0
