"""Run in a guest from a `btfgen trace --build` directory: trace its program once, as
`btfgen_trace.py --run DIR --attach MODE` does, and print one line saying whether every record
the ring gave was exactly spec_format.event_size bytes of its function's descriptor (the run
side's own copy, as the trace directory has it). test_trace_user_sizes.py reads the line."""

import io
import sys
from pathlib import Path

directory = Path(sys.argv[1])
sys.path.insert(0, str(directory))
from btfgen_probe import manifest, run, spec_format  # noqa: E402

decoders = manifest.load_decoders(directory, manifest.load_manifest(directory))
order = decoders.BYTE_ORDER
descs = {d.btf_id: d for d in (decoders._descriptor(n)[0] for n in decoders.names())}
at = spec_format.size_of(spec_format.EVENT_HEAD)  # the record's btf_id, then its kind
seen = []


real_reader = run.reader


def measured_reader(fd, sink, committed_fd=None):
    """run.reader, with each span's records measured before the sink takes the span."""
    def measured(span):
        for raw in span:
            btf_id, kind = (int.from_bytes(raw[i:i + 4], order) for i in (at, at + 4))
            desc = descs[btf_id]
            seen.append((desc.name, kind, len(raw), spec_format.event_size(desc, kind)))
        sink(span)

    return real_reader(fd, measured, committed_fd)


run.reader = measured_reader
status = run.run(directory, run.Options([], attach=sys.argv[2]), out=io.StringIO())
wrong = sorted({s for s in seen if s[2] != s[3]})
print(f"sizes: status {status}, {len(seen)} records, "
      + (f"sent/said differ: {wrong}" if wrong else f"all as said: {sorted(set(seen))}"))
