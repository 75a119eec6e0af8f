"""The heads a generic BPF record and a capture start with, as the target wrote them, and the
error every decoding step raises."""

from __future__ import annotations

from ...probe.spec_format import CAPTURE_HEAD, RECORD_HEAD, size_of, structs

# struct btfgen_record's header as the target wrote it: in the target's byte order, whatever
# the machine decoding it.
RECORD_HEADERS = structs(RECORD_HEAD)
RECORD_HEADER_SIZE = size_of(RECORD_HEAD)
# The failed-mask bit of an exit whose carried return pointer was not kept (generic.py's
# CARRY_MISSING_BIT; this module is copied into generated code, so it imports nothing of btfgen).
CARRY_MISSING = 1 << 63
CAPTURE_HEADS = structs(CAPTURE_HEAD)
CAPTURE_HEAD_SIZE = size_of(CAPTURE_HEAD)
CAPTURE_OK, CAPTURE_NULL, CAPTURE_FAULT, CAPTURE_EMPTY = 1, 2, 3, 4  # EMPTY: generic.py's
SPACES = ("kernel", "user")


class DecodeError(ValueError):
    pass
