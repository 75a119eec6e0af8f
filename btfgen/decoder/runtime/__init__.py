"""Turn trace-ctx bytes, stack bytes or a generic BPF record into typed Python values.

Standard library only: a generated module embeds the text of this package's modules (and of
spec_format, whose record header it reads) so that it imports without btfgen installed
(btfgen/codegen/embed.py). The modules, each importing only the ones it names:

- records.py: the record and capture heads as the target wrote them; DecodeError
- descriptors.py: what the runtime knows of a function, as tuples, each with its check
- values.py: Enumerator, Unavailable, Unread, CapturedString
- readers.py: a type descriptor turned once into a function of (bytes, offset)
- captures.py: a capture's value from its status head and bytes
- function.py: Function, one function's decoders

This module only names what the package offers: embedded, what it leaves is the generated
module's `__all__`.
"""

from __future__ import annotations

from .descriptors import (
    SCALAR_TAGS,
    TRUSTED,
    TYPES,
    ArrayType,
    BoolType,
    BytesType,
    CaptureDesc,
    CharsType,
    CompositeType,
    EnumType,
    FastPath,
    FloatType,
    FunctionDesc,
    IntType,
    Limit,
    Member,
    Piece,
    Plan,
    PtrType,
    RecordPlans,
    RetDesc,
    ValueDesc,
    check_type,
    type_size,
)
from .function import Function
from .readers import TEXT_READERS, convert, reader, text_of
from .records import (
    CAPTURE_FAULT,
    CAPTURE_HEAD_SIZE,
    CAPTURE_HEADS,
    CAPTURE_NULL,
    CAPTURE_OK,
    CARRY_MISSING,
    RECORD_HEADER_SIZE,
    RECORD_HEADERS,
    SPACES,
    DecodeError,
)
from .values import CapturedBytes, CapturedString, Enumerator, Unavailable, Unread

__all__ = ["Enumerator", "Unavailable", "Unread", "DecodeError", "Function", "RECORD_HEADERS",
           "RECORD_HEADER_SIZE", "FunctionDesc", "ValueDesc", "RetDesc", "Piece", "Plan",
           "RecordPlans", "FastPath", "Member", "TYPES", "SCALAR_TAGS", "CaptureDesc",
           "CapturedString", "CapturedBytes",
           "ArrayType", "BoolType", "BytesType", "CharsType", "CompositeType", "EnumType",
           "FloatType", "IntType", "PtrType", "Limit", "TRUSTED", "check_type", "type_size",
           "reader", "convert", "text_of", "TEXT_READERS", "CAPTURE_HEADS", "CAPTURE_HEAD_SIZE",
           "CAPTURE_OK", "CAPTURE_NULL", "CAPTURE_FAULT", "CARRY_MISSING", "SPACES"]
