"""The generic decoder's wire structs have one definition (btfgen.probe.spec_format): the
runtime, which is copied into generated modules after spec_format's own text, reads the record
header's format from it."""

from __future__ import annotations

import struct

import pytest

from btfgen.decoder import runtime
from btfgen.probe import spec_format


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


def test_an_attach_cookie_names_the_image_only_where_the_call_needs_no_spec():
    head = {"btf_id": 77, "carry": 0, "entry_plan": spec_format.IMAGE_PLAN, "exit_plan": 5}
    c = spec_format.Cookie.of(9, head)
    assert c.image == (True, False) and c.value == 9 | 77 << 32 | 1 << 63
    assert c.value & 0xFFFFFFFF == 9  # the key, as the cookie's low 32 bits
    both = spec_format.Cookie.of(9, {**head, "exit_plan": spec_format.IMAGE_PLAN})
    assert both.value >> 62 == 3
    # the exit needs its entry's carried pointer; an id past the field; no image at all
    for other in ({"carry": 1}, {"btf_id": 1 << 30}, {"entry_plan": 0}):
        assert spec_format.Cookie.of(9, {**head, **other}).value == 9
    with pytest.raises(ValueError):
        spec_format.Cookie.of(1 << 32, head)
    spec = spec_format.structs(spec_format.SPEC_HEAD)["big"].pack(77, 1, 1, 8, 0, 1, 1, 8, 8,
                                                                  0, 0, 0)
    assert spec_format.cookie(3, spec, "big") == 3 | 77 << 32 | 3 << 62


def test_an_attach_cookie_reads_back_from_its_64_bits():
    head = {"btf_id": (1 << 30) - 1, "carry": 0, "entry_plan": spec_format.IMAGE_PLAN,
            "exit_plan": spec_format.IMAGE_PLAN}
    for key in (0, 9, (1 << 32) - 1):
        for entry_plan, exit_plan in ((1, 1), (1, 4), (4, 1), (4, 4)):
            c = spec_format.Cookie.of(key, {**head, "entry_plan": entry_plan,
                                            "exit_plan": exit_plan})
            assert spec_format.Cookie.from_value(c.value) == c
    assert spec_format.Cookie.from_value(1 << 62 | 5 << 32 | 7) == (7, 5, (False, True))
    for bad in (-1, 1 << 64):
        with pytest.raises(ValueError):
            spec_format.Cookie.from_value(bad)


def test_the_record_starts_with_the_word_the_cookie_route_stores():
    # btfgen_generic_decode_cookie writes btf_id and kind as one 8-byte store
    assert [(f.name, f.ctype) for f in spec_format.RECORD_HEAD[:2]] == [("btf_id", "__u32"),
                                                                         ("kind", "__u32")]


def test_the_cookies_of_a_spec_table_are_each_spec_s_cookie():
    pack = spec_format.structs(spec_format.SPEC_HEAD)
    plan = spec_format.IMAGE_PLAN
    span = (0, 0, 0)  # carry_span and the padding after it
    heads = [(77, 1, 1, 8, 0, plan, plan, 8, 8) + span, (78, 1, 1, 8, 2, plan, plan, 8, 8) + span,
             (1 << 30, 1, 1, 8, 0, plan, 0, 8, 8) + span, (79, 1, 1, 8, 0, 0, plan, 8, 8) + span,
             (80, 1, 1, 8, 0, 0, 0, 8, 8) + span, (81, 1, 1, 8, 0, plan, 3, 8, 8) + span]
    for order in ("little", "big"):
        # each spec padded past its head, as specs.bin's are (ops after it)
        specs = [pack[order].pack(*h) + bytes(range(40)) for h in heads]
        table = b"".join(specs)
        assert spec_format.cookies(table, len(specs), order) == \
            [spec_format.cookie(i, s, order) for i, s in enumerate(specs)]
    assert spec_format.cookies(b"", 0, "little") == []
