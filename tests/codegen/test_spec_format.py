"""The generic decoder's wire structs have one definition (btfgen.decoder.spec_format): the
runtime, which is copied into generated modules after spec_format's own text, reads the record
header's format from it."""

from __future__ import annotations

import struct

from btfgen.decoder import runtime, spec_format


def test_runtime_record_header_is_the_definition():
    fmt = spec_format.struct_format(spec_format.RECORD_HEAD)
    assert runtime.RECORD_HEADERS["little"].format == "<" + fmt
    assert runtime.RECORD_HEADERS["big"].format == ">" + fmt
    assert runtime.RECORD_HEADER_SIZE == struct.calcsize("<" + fmt)


def test_formats_have_no_padding_to_hide():
    # The C structs are packed by construction (each field at its natural alignment): the
    # struct module's standard sizes without padding then give the same offsets.
    for fields in (spec_format.OP, spec_format.SPEC_HEAD, spec_format.RECORD_HEAD,
                   spec_format.EVENT_HEAD):
        off = 0
        for f in fields:
            size = struct.calcsize("<" + f.code)
            assert off % (1 if f.count else size) == 0, f.name
            off += size
