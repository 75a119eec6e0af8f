"""`btfgen decode` on recordings whose checksums are valid but whose contents are not what the
tracer writes: one line, never a traceback; and a bug is a bug, not a "corrupt event"."""

from __future__ import annotations

import io

import pytest
import synth

from btfgen.probe import output, recording
from btfgen.recordings import replay
from btfgen.recordings.reader import Reader

MODULE = synth.module("x86_64")


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "r.btfrec"
    synth.write(p, MODULE, synth.events(synth.descriptors(MODULE), 30, 3, MODULE.BYTE_ORDER))
    return p


def test_a_bad_struct_format_is_one_line(path):
    def damage(head):
        head["functions"][0]["descriptor"][6] = ["<Z", None]  # the fast path's format

    synth.reseal(path, header=damage)
    with pytest.raises(recording.RecordError, match="corrupt header .*format '<Z'"):
        replay.print_recording(str(path), io.StringIO())


def test_a_bug_while_printing_is_not_called_a_corrupt_event(path, monkeypatch):
    def bug(self, raw):
        raise KeyError("a bug of ours")

    # Both ways a line is made: one event at a time, and a batch's compiled handlers.
    monkeypatch.setattr(output.Printer, "event", bug)
    monkeypatch.setattr(output.Printer, "_handler", bug)
    with pytest.raises(KeyError, match="a bug of ours"):
        replay.print_recording(str(path), io.StringIO())


def test_an_event_that_is_not_its_functions_is_a_corrupt_event(tmp_path):
    """A section whose function index names another function of the same stride (version 1):
    its events name their own function, which the columns would decode with the other's
    decoder and the text would print after the lines before it; both refuse the file, printing
    nothing."""
    path = tmp_path / "r1.btfrec"
    synth.write(path, MODULE, synth.events(synth.descriptors(MODULE), 30, 3, MODULE.BYTE_ORDER),
                version=1)
    with Reader(str(path)) as r:
        fns = replay.functions(r)
        same = [(i, j) for i in range(len(fns)) for j in range(len(fns))
                if i != j and r.strides[i] == r.strides[j]]
    if not same:
        pytest.skip("no two functions of one stride")
    i, j = same[0]

    def damage(table):
        for s in table:
            if s[0] == i:
                s[0] = j

    synth.reseal(path, sections=damage)
    out = io.StringIO()
    with pytest.raises(recording.RecordError, match="holds other events"):
        replay.print_recording(str(path), out)
    assert out.getvalue() == ""
    columnar = pytest.importorskip("btfgen.recordings.columnar")
    name = fns[j].name
    with pytest.raises(recording.RecordError, match="holds other events"):
        for kind in ("entry", "exit"):
            list(columnar.record_batches(str(path), name, kind))


@pytest.mark.parametrize("how", ["word", "repeats", "length"])
def test_runs_that_are_not_the_headers_are_refused(tmp_path, how):
    """Version 2: a span's runs say where its records are; runs that are not what the
    headers in its bytes say (with every checksum right) are refused by the text and the
    columns alike, nothing printed: else the two could read different records."""
    path = tmp_path / "r.btfrec"
    evs = synth.events(synth.descriptors(MODULE), 30, 3, MODULE.BYTE_ORDER)
    synth.write(path, MODULE, evs)

    def damage(table, body):
        if how == "word":  # one record's header says another length than its run
            body[0] += 8
        elif how == "repeats":  # runs covering the bytes, but the records split otherwise
            first = table[0]
            table[0:1] = [[1, 1, first[2] + 8, 0, 0, 0], [1, 1, first[2] - 8, 0, 0, 0]]
        else:
            table.append([1, 1, 8, 0, 0, 0])

    synth.reseal(path, runs=damage)
    out = io.StringIO()
    with pytest.raises(recording.RecordError, match="corrupt span"):
        replay.print_recording(str(path), out)
    assert out.getvalue() == ""
    columnar = pytest.importorskip("btfgen.recordings.columnar")
    with pytest.raises(recording.RecordError, match="corrupt span"):
        list(columnar.record_batches(str(path), synth.descriptors(MODULE)[0].name, "entry"))
    with Reader(str(path)) as r:  # the standard library's grouping too
        with pytest.raises(recording.RecordError, match="corrupt span"):
            for b in r.batches():
                assert b.sections
