"""grouping.py's public surface: a grouping made from what it reads of a recording (a
Recording: no Reader needed) and asked for a span's sections; numpy's and the standard
library's agree on them, in the order each function and kind first appears; fastest() picks
numpy's only where numpy is there. (test_recording_spans.py checks both against each other
over random spans, through the reader.)"""

from __future__ import annotations

import random
import sys
from types import SimpleNamespace

import pytest
import synth

from btfgen.probe import event, recording, ringspan
from btfgen.recordings import grouping
from btfgen.recordings.reader import Reader

np = pytest.importorskip("numpy")

MODULE = synth.module("s390x")  # big-endian: the groupings read the recording's byte order
DESCS = synth.descriptors(MODULE)

pytestmark = pytest.mark.usefixtures("numpy_s_own_way")  # conftest.py


class Span:
    """A span as grouping.Span says: the ring's bytes, their runs, the records."""

    def __init__(self, raws: list[bytes]) -> None:
        span = ringspan.Span.of(raws, MODULE.BYTE_ORDER)
        self.data, self.runs, self._raws = span.data, span.runs, raws
        self.count, self.trusted = len(raws), False

    def events(self):
        return iter(map(memoryview, self._raws))


def recorded(index=None) -> SimpleNamespace:
    return SimpleNamespace(path="r.btfrec", order=MODULE.BYTE_ORDER,
                           index=index or {d.btf_id: i for i, d in enumerate(DESCS)},
                           strides=[recording.stride(d) for d in DESCS])


def as_bytes(sections, strides) -> list:
    return [(fn, kind, count, [bytes(grouping.record_bytes(p, i, strides[fn]))
                               for i in range(count)])
            for fn, kind, count, p in sections]


def test_both_groupings_give_one_span_s_sections_in_first_appearance_order():
    rng = random.Random(5)
    loop = [synth.event(DESCS[2], k, rng, 10 + k, order=MODULE.BYTE_ORDER) for k in (0, 1)]
    # Mixed calls (gathered), then a loop (a long run: numpy's views of the span), then more.
    raws = synth.events(DESCS, 9, 1, MODULE.BYTE_ORDER) + loop * (grouping.SHORT_RUN + 4) \
        + synth.events(DESCS[:2], 5, 2, MODULE.BYTE_ORDER)
    rec, span = recorded(), Span(raws)
    plain = grouping.Grouping(rec).sections(span)
    fast = grouping.NumpyGrouping(rec).sections(span)
    assert as_bytes(fast, rec.strides) == as_bytes(plain, rec.strides)
    head = synth.RECORD_HEADS[MODULE.BYTE_ORDER]
    keys = [head.unpack_from(r, event.EVENT_HEADER)[:2] for r in raws]
    first = list(dict.fromkeys((rec.index[i], k) for i, k in keys))
    assert [(fn, kind) for fn, kind, _n, _p in plain] == first
    assert sum(n for _fn, _kind, n, _p in plain) == len(raws)
    for fn, _kind, n, payload in fast:
        # records() reads either grouping's payload as an array of the stride's items.
        a = grouping.records(payload, np.dtype((np.void, rec.strides[fn])))
        assert len(a) == n and bytes(a[0]) == bytes(grouping.record_bytes(payload, 0,
                                                                          rec.strides[fn]))


def test_a_small_span_goes_the_standard_librarys_way_with_the_same_sections(monkeypatch):
    """Below SMALL_SPAN records numpy's grouping hands a span to the standard library's (its
    arrays cost tens of microseconds a span, a reader that keeps up writes spans of a few
    records): the same sections and records as numpy's own way, and a bad header still
    refused."""
    raws = synth.events(DESCS, 9, 1, MODULE.BYTE_ORDER)
    rec, span = recorded(), Span(raws)
    own = grouping.NumpyGrouping(rec)
    own_sections, own_records = own.sections(span), [bytes(r) for r in own.records(span)]
    monkeypatch.setattr(grouping, "SMALL_SPAN", len(raws) + 1)
    small = grouping.NumpyGrouping(rec)
    got = small.sections(span)
    assert all(isinstance(p, memoryview) for *_, p in got)  # the standard library's payloads
    assert as_bytes(got, rec.strides) == as_bytes(own_sections, rec.strides)
    assert [bytes(r) for r in small.records(span)] == own_records == raws
    bad = Span(raws)
    bad.data = memoryview(bytearray(span.data))
    bad.data[0] ^= 0x10  # the first record's header is not the one its runs say
    with pytest.raises(recording.RecordError, match="corrupt span"):
        list(small.records(bad))
    unknown = recorded({d.btf_id: i for i, d in enumerate(DESCS) if i})
    with pytest.raises(recording.RecordError, match="an event of no recorded function"):
        grouping.NumpyGrouping(unknown).sections(Span([synth.event(
            DESCS[0], 0, random.Random(1), 1, order=MODULE.BYTE_ORDER)]))


def test_a_crafted_btf_id_is_refused_at_the_first_span_not_before():
    rec = recorded({grouping.MAX_BTF_ID: 0, **{d.btf_id: i for i, d in enumerate(DESCS)}})
    numpy_s = grouping.NumpyGrouping(rec)  # its header alone: nothing refused yet
    with pytest.raises(recording.RecordError, match="corrupt header .a BTF id of 16777216"):
        numpy_s.sections(Span(synth.events(DESCS, 3, 1, MODULE.BYTE_ORDER)))


def test_an_event_of_no_recorded_function_is_a_corrupt_span():
    rec = recorded({d.btf_id: i for i, d in enumerate(DESCS) if i})  # the first one unknown
    span = Span([synth.event(DESCS[0], 0, random.Random(1), 1, order=MODULE.BYTE_ORDER)])
    for by in (grouping.Grouping, grouping.NumpyGrouping):
        with pytest.raises(recording.RecordError, match="corrupt span .an event of no recorded"):
            by(rec).sections(span)


def test_fastest_is_numpy_s_only_where_numpy_is_installed(monkeypatch):
    assert grouping.fastest() is grouping.NumpyGrouping
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy then fails
    assert grouping.fastest() is grouping.Grouping


def test_the_reader_groups_each_span_once_with_the_class_it_is_given(tmp_path):
    path = tmp_path / "r.btfrec"
    synth.write(path, MODULE, synth.events(DESCS, 40, 3, MODULE.BYTE_ORDER), batch=16)
    with Reader(str(path), grouping=grouping.NumpyGrouping) as r:
        assert type(r.grouping) is grouping.NumpyGrouping
        for batch in r.batches():
            assert batch.sections is batch.sections
    with Reader(str(path)) as r:  # the standard library's unless told
        assert type(r.grouping) is grouping.Grouping
