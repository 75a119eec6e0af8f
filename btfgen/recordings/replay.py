"""`btfgen decode`'s reading side: a recording (btfgen.probe.recording) back into the lines
`btfgen trace` prints, with the decoders the file carries (no BPF, no BTF, no generated module)."""

from __future__ import annotations

import sys

from btfgen.btf.walk import MAX_DEPTH  # describe() nests no deeper
from btfgen.decoder.runtime import DecodeError, Function, FunctionDesc, Limit
from btfgen.probe import output, recording, spec_format

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


def group():
    """recording.group, by numpy when it is there: a span's records found from its runs (no
    Python call a record), checked against their headers, and gathered per function and kind
    into arrays of the function's stride."""
    try:
        import numpy as np
    except ImportError:
        return recording.group
    from btfgen.probe import ringspan

    def _ids(reader):
        """The recording's BTF ids sorted, and the function of each (once a reader)."""
        got = getattr(reader, "_sorted_ids", None)
        if got is None:
            ids = np.array(sorted(reader.index), dtype=np.int64)
            got = reader._sorted_ids = (
                ids, np.array([reader.index[i] for i in ids.tolist()], dtype=np.int64))
        return got

    def by_numpy(batch, reader):
        bo = "<" if reader.order == "little" else ">"
        data = np.frombuffer(batch.data, dtype=np.uint8)
        starts, words = [], []
        at = 0
        singles_at, singles = [], []  # runs of one record, gathered into one array
        for count, pattern in batch.runs:
            if count == 1 and len(pattern) == 1:
                singles_at.append(at)
                singles.append(pattern[0])
                at += ringspan.record_size(pattern[0])
                continue
            if singles:
                starts.append(np.array(singles_at, dtype=np.int64))
                words.append(np.array(singles, dtype=np.uint32))
                singles_at, singles = [], []
            sizes = [ringspan.record_size(w) for w in pattern]
            phase = np.cumsum([0] + sizes[:-1])
            period = sum(sizes)
            starts.append((at + period * np.arange(count, dtype=np.int64)[:, None]
                           + phase[None, :]).ravel())
            words.append(np.tile(np.array(pattern, dtype=np.uint32), count))
            at += count * period
        if singles:
            starts.append(np.array(singles_at, dtype=np.int64))
            words.append(np.array(singles, dtype=np.uint32))
        starts = np.concatenate(starts)
        words = np.concatenate(words)
        # Each record's header is the one its run says (else a crafted file could make the
        # text and the columns disagree).
        heads = data[:len(batch.data) - len(batch.data) % 4].view(bo + "u4")
        if not (heads[starts // 4] == words).all():
            raise recording.RecordError(f"{reader.path}: corrupt span (a record header is not "
                                        f"the one its runs say)")
        keep = (words & ringspan.DISCARD) == 0
        starts, lengths = starts[keep], (words[keep] & ringspan.LENGTH).astype(np.int64)
        if not len(starts):
            return []
        if (lengths < recording.EVENT_HEADER + recording.RECORD_HEADER).any():
            raise recording.RecordError(f"{reader.path}: corrupt span (an event of "
                                        f"{int(lengths.min())} bytes)")
        at = starts + ringspan.HEADER + recording.EVENT_HEADER
        btf_id = heads[at // 4].astype(np.int64)
        kind = heads[at // 4 + 1].astype(np.int64)
        ids, fns = _ids(reader)
        where = np.searchsorted(ids, btf_id).clip(0, max(len(ids) - 1, 0))
        if not len(ids) or not ((ids[where] == btf_id) & (kind <= 1)).all():
            raise recording.RecordError(f"{reader.path}: corrupt span (an event of no recorded "
                                        f"function)")
        key = fns[where] * 2 + kind
        out = []
        order = np.argsort(key, kind="stable")  # each section keeps the arrival order
        keys, firsts = np.unique(key[order], return_index=True)
        bounds = list(firsts[1:]) + [len(order)]
        for k, lo, hi in zip(keys.tolist(), firsts.tolist(), bounds):
            fn, kd = divmod(k, 2)
            stride = reader.strides[fn]
            rows = order[lo:hi]
            first = starts[rows] + ringspan.HEADER
            width = np.minimum(lengths[rows], stride)
            payload = (np.empty if width.min() == stride else np.zeros)((len(rows), stride),
                                                                         dtype=np.uint8)
            # Each record's bytes up to its stride (zeros past a shorter record's end): rows
            # of a view of the span starting every 8 bytes, copied by numpy, a width at a time.
            # Only rows whose bytes lie in the span are taken.
            for w in np.unique(width).tolist():
                sel = np.flatnonzero(width == w)
                view = np.lib.stride_tricks.as_strided(data, shape=(len(data) // 8, w),
                                                       strides=(8, 1), writeable=False)
                payload[sel, :w] = view[first[sel] // 8]
            out.append((order[lo], fn, kd, len(rows), memoryview(payload.reshape(-1))))
        # In the order the sections first appear (as the writer of version 1 had them).
        out.sort(key=lambda s: s[0])
        return [s[1:] for s in out]

    return by_numpy


def verify(path: str) -> None:
    """Every check of the file, before a line is printed: a bad file prints nothing."""
    with recording.Reader(path, word_sum(), group=group()) as r:
        ids = [f.btf_id for f in functions(r)]
        only = _only(r.order)
        for batch in r.batches():
            for fn, kind, _count, payload in batch.sections:
                if not only(payload, r.strides[fn], ids[fn], kind):
                    # Each event names its function: one a section does not hold would be
                    # decoded by another function's decoder (columns) or not at all (text).
                    raise recording.RecordError(f"{path}: corrupt batch (a section of function "
                                                f"{fn} holds other events)")


def _only(order: str):
    """A test of (payload, stride, btf_id, kind): every event of the payload has that BTF id
    and kind in its record header (by numpy when it is there: the columnar path reads tens of
    millions of events a second)."""
    bo = "<" if order == "little" else ">"
    head = spec_format.RECORD_HEAD
    try:
        import numpy as np
    except ImportError:
        import struct

        fmt = spec_format.struct_format(head)

        def only(payload, stride: int, btf_id: int, kind: int) -> bool:
            rest = stride - recording.EVENT_HEADER - recording.RECORD_HEADER
            return all((i, k) == (btf_id, kind) for i, k, _failed in struct.iter_unpack(
                f"{bo}{recording.EVENT_HEADER}x{fmt}{rest}x", payload))

        return only

    def only(payload, stride: int, btf_id: int, kind: int) -> bool:
        offsets = [recording.EVENT_HEADER + spec_format.offset_of(head, name)
                   for name in ("btf_id", "kind")]
        a = np.frombuffer(payload, dtype=np.dtype({"names": ["btf_id", "kind"],
                                                   "formats": [bo + "u4", bo + "u4"],
                                                   "offsets": offsets, "itemsize": stride}))
        return bool((a["btf_id"] == btf_id).all() and (a["kind"] == kind).all())

    return only


def print_recording(path: str, out=sys.stdout, *, as_json: bool = False,
                    errors: bool = False) -> int:
    """Print every event as `btfgen trace` would have; the number of records the ring buffer
    lost goes to stderr, as the tracer says it."""
    verify(path)
    with recording.Reader(path, word_sum(), group=group()) as r:
        printer = output.Printer(functions(r), r.order, out, who=bool(r.header.get("who")),
                                 errors=errors, as_json=as_json, flush=False, batch=True)
        try:
            for batch in r.batches():
                for raw in batch.events(r.strides):
                    try:
                        printer.event(raw)
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
