"""A `btfgen trace` event as the run side reads it, derived once from spec_format's tables:
struct trace_event's head, then struct btfgen_record's head, then the record's data (each
capture's bytes after a CAPTURE_HEAD). The printer (output.py), its fast path (lines.py), the
recording (recording.py) and the summaries (summary.py) take their offsets and structs from
here, never from the tables themselves.

Apart from spec_format because a generated module embeds spec_format's text whole: what only
the run side needs lives here, so the generated modules (and their goldens) do not carry it.
"""

from __future__ import annotations

from . import spec_format

# struct trace_event before its btfgen_record, and the record's own head.
EVENT_HEADER = spec_format.size_of(spec_format.EVENT_HEAD)
RECORD_HEADER = spec_format.size_of(spec_format.RECORD_HEAD)
DATA = EVENT_HEADER + RECORD_HEADER  # where the record's data starts in an event
CAPTURE_HEADER = spec_format.size_of(spec_format.CAPTURE_HEAD)  # before each capture's bytes
HEADS = spec_format.structs(spec_format.EVENT_HEAD)  # by byte order
RECORD_HEADS = spec_format.structs(spec_format.RECORD_HEAD)
# Both heads as one `struct` format, without a byte-order prefix: EVENT_HEAD's items, then
# RECORD_HEAD's, in field order (HEAD_ITEMS).
HEAD_FORMAT = spec_format.struct_format(spec_format.EVENT_HEAD + spec_format.RECORD_HEAD)
HEAD_ITEMS = [f.name for f in spec_format.EVENT_HEAD + spec_format.RECORD_HEAD]


def head_format(items) -> str:
    """HEAD_FORMAT reading only `items` (in field order), the other fields skipped as pad bytes:
    a reader of both heads that needs a few of them makes no object for the rest."""
    return "".join(f.code if f.name in items else f"{spec_format.size_of((f,))}x"
                   for f in spec_format.EVENT_HEAD + spec_format.RECORD_HEAD)


FLAGS_AT = spec_format.offset_of(spec_format.EVENT_HEAD, "flags")
TID_AT = spec_format.offset_of(spec_format.EVENT_HEAD, "pid")
CAPTURE_STATUS = spec_format.offset_of(spec_format.CAPTURE_HEAD, "status")
CAPTURE_LEN = spec_format.offset_of(spec_format.CAPTURE_HEAD, "len")
# The kernel's: a return of -4095..-1 is an errno, and so is a pointer in that range (ERR_PTR).
MAX_ERRNO = 4095
