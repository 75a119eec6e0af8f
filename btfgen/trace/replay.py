"""`btfgen decode`'s reading side: a recording (recording.py) back into the lines `btfgen trace`
prints, with the decoders the file carries (no BPF, no BTF, no generated module)."""

from __future__ import annotations

import sys

from btfgen.btf.walk import MAX_DEPTH  # describe() nests no deeper
from btfgen.decoder.runtime import Function
from btfgen.trace import output, recording

MAX_SIZE = 1 << 16  # no value the generic record holds is larger (BTFGEN_DATA_SIZE is 1024)
SCALARS = {"int", "bool", "enum", "ptr", "float", "chars", "bytes"}


def _check_type(t, depth: int = 0) -> None:
    """A type descriptor as btfgen makes them, bounded: a crafted file with a valid checksum
    must not make the decoder build a list of a billion elements or recurse without end."""
    ok = isinstance(t, tuple) and t and isinstance(t[0], str) and depth < MAX_DEPTH
    if ok and t[0] in SCALARS:
        ok = isinstance(t[1], int) and 0 < t[1] <= MAX_SIZE
        if ok and t[0] == "enum":
            ok = len(t) == 4 and isinstance(t[3], dict)
    elif ok and t[0] == "array":
        ok = (len(t) == 4 and all(isinstance(x, int) for x in t[1:3]) and 0 <= t[1]
              and 0 < t[2] and t[1] * t[2] <= MAX_SIZE)
        if ok:
            _check_type(t[3], depth + 1)
    elif ok and t[0] in ("struct", "union"):
        ok = len(t) == 3 and isinstance(t[1], int) and 0 <= t[1] <= MAX_SIZE \
            and isinstance(t[2], tuple) and len(t[2]) <= MAX_SIZE
        for m in t[2] if ok else ():
            if not (isinstance(m, tuple) and len(m) == 4 and isinstance(m[0], str)
                    and isinstance(m[1], int) and isinstance(m[2], int)
                    and 0 <= m[1] < 8 * t[1] + 1 and 0 <= m[2] <= 64):
                raise recording.RecordError("a decoder descriptor is malformed")
            _check_type(m[3], depth + 1)
    else:
        ok = False
    if not ok:
        raise recording.RecordError("a decoder descriptor is malformed")


def functions(reader: recording.Reader) -> list[Function]:
    out = []
    for desc in reader.descriptors:
        try:
            name, btf_id, order, psize, args, ret, _fast, plans = desc
            values = list(args) + ([ret[0]] if ret else [])
            ok = (isinstance(name, str) and isinstance(btf_id, int) and order == reader.order
                  and psize in (4, 8) and len(plans) == 2)
            for v in values:
                _check_type(v[1])
                ok = ok and isinstance(v[0], str) and 0 <= v[2] <= MAX_SIZE
            out.append(Function(desc))
        except recording.RecordError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, AttributeError):
            ok = False
        if not ok:
            raise recording.RecordError(f"{reader.path}: corrupt header (a decoder descriptor)")
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
                except recording.RecordError:
                    raise
                except Exception as e:
                    raise recording.RecordError(f"{path}: corrupt event ({e})") from None
        print(f"btfgen decode: {r.events} events recorded on {r.header.get('arch')} "
              f"{r.header.get('kernel_release')}; {r.lost} records lost (ring buffer full)",
              file=sys.stderr)
    return 0
