"""`btfgen decode`'s printing side: a recording (read by reader.py) back into the lines
`btfgen trace` prints, with the decoders the file carries (no BPF, no BTF, no generated module)."""

from __future__ import annotations

import struct
import sys

from btfgen.btf.walk import MAX_DEPTH  # describe() nests no deeper
from btfgen.decoder.runtime import DecodeError, Function, FunctionDesc, Limit
from btfgen.probe import event, output, recording, spec_format
from btfgen.recordings import grouping, reader
from btfgen.recordings.reader import Reader
from btfgen.recordings.recorded_stacks import RecordedStacks

# No value the generic record holds is larger (BTFGEN_DATA_SIZE is 8192).
LIMIT = Limit(size=1 << 16, depth=MAX_DEPTH)


def functions(reader: Reader) -> list[Function]:
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
    """reader.word_sum (version 1's check), by numpy when it is there (a batch in a
    millisecond)."""
    try:
        import numpy as np
    except ImportError:
        return reader.word_sum
    return lambda data: int(np.frombuffer(data, dtype="<u8").sum(dtype=np.uint64))


def verify(path: str) -> int:
    """Every check of the file, before a line is printed: a bad file prints nothing. Returns
    how far its spans were checked (reader.Reader's `trust` for the pass that prints)."""
    with Reader(path, word_sum(), grouping=grouping.fastest()) as r:
        ids = [f.btf_id for f in functions(r)]
        only = _only(r.order)
        for batch in r.batches():
            for fn, kind, count, payload in batch.sections:
                if not only(payload, r.strides[fn], ids[fn], kind, count):
                    # Each event names its function: one a section does not hold would be
                    # decoded by another function's decoder (columns) or not at all (text).
                    raise recording.RecordError(f"{path}: corrupt batch (a section of function "
                                                f"{fn} holds other events)")
        return r.checked


def _only(order: str):
    """A test of (payload, stride, btf_id, kind, count): every event of the payload has that
    BTF id and kind in its record header (by numpy when it is there and the section is not
    small: the columnar path reads tens of millions of events a second; a span of a few
    records, as a reader that keeps up writes, is checked record by record)."""
    bo = "<" if order == "little" else ">"
    head = spec_format.RECORD_HEAD
    at_id, at_kind = (event.EVENT_HEADER + spec_format.offset_of(head, name)
                      for name in ("btf_id", "kind"))
    word = struct.Struct(bo + "I").unpack_from

    def few(payload, stride: int, btf_id: int, kind: int, count: int) -> bool:
        data = payload if isinstance(payload, (bytes, bytearray, memoryview)) else \
            payload.tobytes()  # numpy's items (a copy of a few)
        return all(word(data, at + at_id)[0] == btf_id and word(data, at + at_kind)[0] == kind
                   for at in range(0, stride * count, stride))

    try:
        import numpy as np
    except ImportError:
        return few
    dtypes: dict[int, object] = {}

    def only(payload, stride: int, btf_id: int, kind: int, count: int) -> bool:
        if count < grouping.SMALL_SPAN:
            return few(payload, stride, btf_id, kind, count)
        dtype = dtypes.get(stride)
        if dtype is None:
            dtype = dtypes[stride] = np.dtype({"names": ["btf_id", "kind"],
                                               "formats": [bo + "u4", bo + "u4"],
                                               "offsets": [at_id, at_kind], "itemsize": stride})
        a = grouping.records(payload, dtype)
        return bool((a["btf_id"] == btf_id).all() and (a["kind"] == kind).all())

    return only


def _ids(value) -> frozenset:
    """A header's list of BTF ids (anything else, from a damaged or foreign header: none)."""
    if not isinstance(value, list):
        return frozenset()
    return frozenset(v for v in value if type(v) is int)


def stacks_of(r: Reader, kallsyms: str | None) -> RecordedStacks | None:
    """What names the recording's stacks, where it was made with --stack."""
    if not r.header.get("stack"):
        return None
    return RecordedStacks(str(r.header.get("arch")), r.order, kallsyms)


def print_recording(path: str, out=sys.stdout, *, as_json: bool = False,
                    errors: bool = False, errors_are=None, bytes_as: str = "auto",
                    kallsyms: str | None = None) -> int:
    """Print every event as `btfgen trace` would have (with --stack, each entry's stack under
    it, named from what the recording kept; `kallsyms`: a file naming the kernel addresses it
    kept no symbol for); the number of records the ring buffer lost goes to stderr, as the
    tracer says it."""
    checked = verify(path)
    with Reader(path, word_sum(), grouping=grouping.fastest(), trust=checked) as r:
        stacks = stacks_of(r, kallsyms)
        printer = output.Printer(functions(r), r.order, out, who=bool(r.header.get("who")),
                                 errors=errors, kernel=r.header.get("kind") == "kernel",
                                 errors_are=errors_are,
                                 decided=_ids(r.header.get("retval_filtered")),
                                 as_json=as_json, flush=False, batch=True,
                                 bytes_as=bytes_as, stacks=stacks)
        try:
            for batch in r.batches():
                if stacks is not None:
                    stacks.take(getattr(batch, "notes", ()))
                try:
                    printer.events(batch.places(r.strides))
                except (output.BadEvent, DecodeError) as e:  # what a damaged file causes
                    raise recording.RecordError(f"{path}: corrupt event ({e})") from None
                if printer.gone:
                    break
        finally:
            printer.flush_lines()
        if printer.gone:
            raise BrokenPipeError  # `| head` went away: the command's caller knows the rest
        if r.cut:
            # The tracer never ended the file (killed, or its machine went down): what it
            # wrote before decodes; how many records the ring buffer lost, it never said.
            print(f"btfgen decode: {path}: cut at byte {r.cut[0]} after {r.cut[1]} events "
                  f"(the recording has no end: its tracer was killed?); records lost unknown",
                  file=sys.stderr)
            return 0
        print(f"btfgen decode: {r.events} events recorded on {r.header.get('arch')} "
              f"{r.header.get('kernel_release')}; {r.lost} records lost (ring buffer full)",
              file=sys.stderr)
    return 0
