"""`btfgen decode`'s reading side: a recording (btfgen.probe.recording) back into the lines
`btfgen trace` prints, with the decoders the file carries (no BPF, no BTF, no generated module)."""

from __future__ import annotations

import sys

from btfgen.btf.walk import MAX_DEPTH  # describe() nests no deeper
from btfgen.decoder.runtime import DecodeError, Function, FunctionDesc, Limit
from btfgen.probe import event, output, recording, spec_format

# No value the generic record holds is larger (BTFGEN_DATA_SIZE is 8192).
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


def records(payload, dtype):
    """A section's payload as a numpy array of `dtype` (its itemsize the stride): version 1's
    and the standard library's are bytes, numpy's grouping gives an array of the stride's
    void items (a view of the span where its records lie evenly spaced in it)."""
    import numpy as np

    if isinstance(payload, np.ndarray):
        return payload.view(dtype)
    return np.frombuffer(payload, dtype=dtype)


def record_bytes(payload, i: int, stride: int):
    """The i-th event of a section's payload, as the bytes of its stride."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return payload[i * stride:(i + 1) * stride]
    return payload[i].tobytes()


# Runs shorter than this go the gather way (their records' places in one array), longer
# ones are read through strided views of the span, a phase of a run at a time.
SHORT_RUN = 16
# A long run mixing up to this many functions and kinds (records of one length: today's fixed
# size) is split by a mask each, more by one sort.
MASKS = 16


def group():
    """recording.group, by numpy when it is there: a span's records found from its runs (no
    Python call a record), checked against their headers, and gathered per function and kind.
    A function and kind whose records lie evenly spaced in the span (one run's phase: a loop
    calling it) is a view of the span, copied nowhere."""
    try:
        import numpy as np
    except ImportError:
        return recording.group
    from btfgen.probe import ringspan

    def lookup(reader):
        """BTF id -> function, as an array indexed by id (-1: none), once a reader."""
        got = getattr(reader, "_by_id", None)
        if got is None:
            top = max(reader.index, default=0)
            if top >= 1 << 24:  # a crafted header: the dict is the only way
                raise recording.RecordError(f"{reader.path}: corrupt header (a BTF id of "
                                            f"{top})")
            got = reader._by_id = np.full(top + 1, -1, dtype=np.int64)
            got[list(reader.index)] = list(reader.index.values())
        return got

    def by_numpy(batch, reader):
        bo = "<" if reader.order == "little" else ">"
        u4 = np.dtype(bo + "u4")
        u8 = np.dtype(bo + "u8")
        data = np.frombuffer(batch.data, dtype=np.uint8)
        by_id = lookup(reader)
        strides = reader.strides
        head_min = event.DATA

        def corrupt(what):
            return recording.RecordError(f"{reader.path}: corrupt span ({what})")

        def strided(first, step, count, dtype=u4):
            return np.ndarray((count,), dtype, data, first, (step,))

        def keys_of(btf_id, kind):
            """function * 2 + kind of each record, by its BTF id and kind (int64 arrays)."""
            fn = by_id[btf_id.clip(0, len(by_id) - 1)]
            if not ((fn >= 0) & (btf_id < len(by_id)) & (kind <= 1)).all():
                raise corrupt("an event of no recorded function")
            return fn * 2 + kind

        def present(key):
            """The distinct keys, ascending."""
            if len(key) and key.max() < 1 << 20:
                return np.flatnonzero(np.bincount(key)).tolist()
            return np.unique(key).tolist()

        def rows(firsts, width):
            """Each record's first `width` bytes (all in the span), a row each: a view of
            the span with a row starting every 8 bytes, gathered."""
            view = np.lib.stride_tricks.as_strided(data, shape=(len(data) // 8, width),
                                                   strides=(8, 1), writeable=False)
            return view[firsts // 8]

        # parts: key -> [(arrivals or (first, step, count), items of the span or the byte of
        # each record's bytes, records' lengths or their one length)]
        parts: dict[int, list] = {}

        def add(k, arrivals, payload, lengths=None):
            parts.setdefault(k, []).append((arrivals, payload, lengths))

        g_at, g_word, g_arrival = [], [], []  # short runs' records, one by one
        arrival = at = 0
        for count, pattern in batch.runs:
            sizes = [ringspan.record_size(w) for w in pattern]
            period = sum(sizes)
            if count < SHORT_RUN:
                for i in range(count):
                    for j, (w, size) in enumerate(zip(pattern, sizes)):
                        g_at.append(at)
                        g_word.append(w)
                        g_arrival.append(arrival + i * len(pattern) + j)
                        at += size
                arrival += count * len(pattern)
                continue
            phase = at
            for j, (w, size) in enumerate(zip(pattern, sizes)):
                if not (strided(phase, period, count) == w).all():
                    raise corrupt("a record header is not the one its runs say")
                if not w & ringspan.DISCARD:
                    length = w & ringspan.LENGTH
                    if length < head_min:
                        raise corrupt(f"an event of {length} bytes")
                    first = phase + ringspan.HEADER
                    rec = first + event.EVENT_HEADER
                    # BTF id and kind read as one word: one pass over the span, not two.
                    both = strided(rec, period, count, u8)
                    if (both == both[0]).all():
                        # One function's calls (a loop): its items are a view of the span;
                        # arrivals and lengths made only if they are merged with others.
                        one = np.frombuffer(both[:1].tobytes(), u4).astype(np.int64)
                        k = int(keys_of(one[:1], one[1:])[0])
                        void = np.dtype((np.void, min(strides[k // 2], length)))
                        add(k, (arrival + j, len(pattern), count),
                            strided(first, period, count, void), length)
                    else:
                        key = keys_of(strided(rec, period, count).astype(np.int64),
                                      strided(rec + 4, period, count).astype(np.int64))
                        arrivals = arrival + j + len(pattern) * np.arange(count, dtype=np.int64)
                        keys = present(key)
                        if len(keys) <= MASKS:  # a mask a function: each a pass
                            groups = ((k, key == k) for k in keys)
                        else:  # many: one stable sort, then each its slice
                            order = np.argsort(key, kind="stable")
                            bounds = np.searchsorted(key[order], keys + [keys[-1] + 1])
                            groups = ((k, order[lo:hi]) for k, lo, hi
                                      in zip(keys, bounds[:-1], bounds[1:]))
                        for k, mine in groups:
                            void = np.dtype((np.void, min(strides[k // 2], length)))
                            add(k, arrivals[mine], strided(first, period, count, void)[mine],
                                length)
                phase += size
            at += count * period
            arrival += count * len(pattern)
        if g_at:
            starts = np.array(g_at, dtype=np.int64)
            words = np.array(g_word, dtype=np.uint32)
            arrivals = np.array(g_arrival, dtype=np.int64)
            heads = data[:len(data) - len(data) % 4].view(u4)
            if not (heads[starts // 4] == words).all():
                raise corrupt("a record header is not the one its runs say")
            keep = (words & ringspan.DISCARD) == 0
            starts, arrivals = starts[keep], arrivals[keep]
            lengths = (words[keep] & ringspan.LENGTH).astype(np.int64)
            if len(starts):
                if lengths.min() < head_min:
                    raise corrupt(f"an event of {int(lengths.min())} bytes")
                rec = (starts + ringspan.HEADER + event.EVENT_HEADER) // 4
                key = keys_of(heads[rec].astype(np.int64), heads[rec + 1].astype(np.int64))
                order = np.argsort(key, kind="stable")
                keys, firsts = np.unique(key[order], return_index=True)
                bounds = firsts[1:].tolist() + [len(order)]
                for k, lo, hi in zip(keys.tolist(), firsts.tolist(), bounds):
                    mine = order[lo:hi]
                    add(k, arrivals[mine], starts[mine] + ringspan.HEADER, lengths[mine])
        def arrivals_of(piece):
            got = piece[0]
            if isinstance(got, tuple):  # (first, step, count): a run's phase
                start, step, count = got
                return start + step * np.arange(count, dtype=np.int64)
            return got

        def first_arrival(piece):
            got = piece[0]
            return got[0] if isinstance(got, tuple) else int(got[0])

        out = []
        for k, pieces in parts.items():
            fn, kind = divmod(k, 2)
            stride = strides[fn]
            void = np.dtype((np.void, stride))
            first = min(first_arrival(p) for p in pieces)
            if len(pieces) == 1 and pieces[0][1].dtype == void:
                # A view of the span (a loop's calls) or one copy of its items: each item its
                # record's first `stride` bytes.
                items = pieces[0][1]
                out.append((first, fn, kind, len(items), items))
                continue
            arrivals = np.concatenate([arrivals_of(p) for p in pieces])
            payload = np.zeros((len(arrivals), stride), dtype=np.uint8)
            done = 0
            for piece in pieces:
                got, lengths = piece[1], piece[2]
                n = len(got)
                if got.dtype == np.int64:  # the records' first bytes: gathered from the span
                    width = np.minimum(lengths, stride)
                    for w in np.unique(width).tolist():
                        sel = np.flatnonzero(width == w)
                        payload[done + sel, :w] = rows(got[sel], w)
                else:  # items of the record's length or the stride, the shorter
                    w = got.dtype.itemsize
                    payload[done:done + n, :w] = np.ascontiguousarray(got).view(
                        np.uint8).reshape(n, w)
                done += n
            if len(pieces) > 1 and (np.diff(arrivals) < 0).any():
                rank = np.argsort(arrivals, kind="stable")  # arrival order, across runs
                payload = payload[rank]
            out.append((first, fn, kind, len(arrivals), payload.view(void).reshape(-1)))
        # In the order the sections first appear (as the writer of version 1 had them).
        out.sort(key=lambda s: s[0])
        return [s[1:] for s in out]

    return by_numpy


def verify(path: str) -> int:
    """Every check of the file, before a line is printed: a bad file prints nothing. Returns
    how far its spans were checked (recording.Reader's `trust` for the pass that prints)."""
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
        return r.checked


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
            rest = stride - event.EVENT_HEADER - event.RECORD_HEADER
            return all((i, k) == (btf_id, kind) for i, k, _failed in struct.iter_unpack(
                f"{bo}{event.EVENT_HEADER}x{fmt}{rest}x", payload))

        return only

    def only(payload, stride: int, btf_id: int, kind: int) -> bool:
        offsets = [event.EVENT_HEADER + spec_format.offset_of(head, name)
                   for name in ("btf_id", "kind")]
        a = records(payload, np.dtype({"names": ["btf_id", "kind"],
                                       "formats": [bo + "u4", bo + "u4"],
                                       "offsets": offsets, "itemsize": stride}))
        return bool((a["btf_id"] == btf_id).all() and (a["kind"] == kind).all())

    return only


def _ids(value) -> frozenset:
    """A header's list of BTF ids (anything else, from a damaged or foreign header: none)."""
    if not isinstance(value, list):
        return frozenset()
    return frozenset(v for v in value if type(v) is int)


def print_recording(path: str, out=sys.stdout, *, as_json: bool = False,
                    errors: bool = False, errors_are=None, bytes_as: str = "auto") -> int:
    """Print every event as `btfgen trace` would have; the number of records the ring buffer
    lost goes to stderr, as the tracer says it."""
    checked = verify(path)
    with recording.Reader(path, word_sum(), group=group(), trust=checked) as r:
        printer = output.Printer(functions(r), r.order, out, who=bool(r.header.get("who")),
                                 errors=errors, kernel=r.header.get("kind") == "kernel",
                                 errors_are=errors_are,
                                 decided=_ids(r.header.get("retval_filtered")),
                                 as_json=as_json, flush=False, batch=True,
                                 bytes_as=bytes_as)
        try:
            for batch in r.batches():
                try:
                    printer.events(batch.events(r.strides))
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
