"""A recording's stacks (--stack) as Parquet columns (the dataset's rows, and the entry files of
columnar.write_parquet): per entry, its frames as `btfgen decode` prints them (`stack`, a list
of strings: the kernel's frames, then the user's), their addresses (`stack_ip`, a list of
uint64, one per frame), and why the user stack is likely cut (`stack_cut`, null where it is
whole); null on exits and on entries recorded without a stack.

The stacks are named in arrival order, every function's together (a process's maps as noted
for that point of the recording, a uretprobe's taken-over return addresses given back from the
calls then open: recorded_stacks.py), a span at a time, and handed to the rows of each
function's entries: a section keeps its events in arrival order."""

from __future__ import annotations

import struct

import pyarrow as pa

from btfgen.probe import recording, spec_format, stack_wire
from btfgen.probe.event import HEAD_FORMAT
from btfgen.recordings.recorded_stacks import RecordedStacks

TYPES = {"stack": pa.list_(pa.string()), "stack_ip": pa.list_(pa.uint64()),
         "stack_cut": pa.string()}


class StackColumns:
    """Each span's entries' stacks, per function index, in arrival order."""

    def __init__(self, header: dict, order: str, fns, kallsyms: str | None = None) -> None:
        self.stacks = RecordedStacks(str(header.get("arch")), order, kallsyms)
        self.where = {fn.btf_id: (fi, spec_format.event_size(fn.desc, 0))
                      for fi, fn in enumerate(fns)}
        self.names = [fn.name for fn in fns]
        self.heads = struct.Struct(("<" if order == "little" else ">") + HEAD_FORMAT)

    def span(self, batch, strides) -> dict[int, list]:
        """{function index: [(frames' text, their addresses, why cut) or None per entry]}."""
        self.stacks.take(getattr(batch, "notes", ()))
        out: dict[int, list] = {}
        for raw in batch.events(strides):
            tgid, tid, _c, _ns, _cpu, flags, btf_id, kind, _f = self.heads.unpack_from(raw)
            found = self.where.get(btf_id)
            if kind != 0 or found is None:
                continue
            fi, at = found
            row = None
            if flags & stack_wire.EVENT_STACK:
                try:
                    d = self.stacks.describe(raw, at, tgid, tid)
                except stack_wire.BadStack as e:
                    raise recording.RecordError(f"corrupt event ({self.names[fi]}: {e})") \
                        from None
                frames = [*d.get("kernel", ()), *d.get("user", ())]
                row = ([f.text for f in frames], [f.ip for f in frames], d.get("user_cut"))
            out.setdefault(fi, []).append(row)
        return out


def columns(rows, n: int) -> dict:
    """The three columns of `n` rows: `rows` as span() gives a function's (None: all null)."""
    if rows is None:
        return {name: pa.nulls(n, t) for name, t in TYPES.items()}
    if len(rows) != n:
        raise recording.RecordError(f"corrupt span ({len(rows)} entries with stacks read, "
                                    f"{n} grouped)")
    return {"stack": pa.array([r and r[0] for r in rows], TYPES["stack"]),
            "stack_ip": pa.array([r and r[1] for r in rows], TYPES["stack_ip"]),
            "stack_cut": pa.array([r and r[2] for r in rows], TYPES["stack_cut"])}
