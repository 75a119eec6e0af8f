"""--record's reader runs at run.READER_NICE while tracing, says so, and is set back after; where
the system refuses, that is said and the reader stays as it was."""

from __future__ import annotations

import os

import pytest

from btfgen.probe import prog, run


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def test_recording_raises_the_readers_priority_and_sets_it_back(capsys):
    was = _nice()
    if os.geteuid() != 0 or was <= run.READER_NICE:
        pytest.skip("needs root, at a nice above READER_NICE")
    with run._reader_first(True):
        assert _nice() == run.READER_NICE
    assert _nice() == was
    assert capsys.readouterr().err == (
        f"{prog.NAME}: the reader runs at nice {run.READER_NICE} (the traced processes at "
        f"theirs): records wait less, the traced work runs slower\n")


def test_printing_leaves_the_priority_alone(capsys):
    was = _nice()
    with run._reader_first(False):
        assert _nice() == was
    assert capsys.readouterr().err == ""


def test_a_refusal_is_said_and_the_reader_runs_as_it_was(monkeypatch, capsys):
    was = _nice()
    if was <= run.READER_NICE:
        pytest.skip("already at READER_NICE or below")

    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    with run._reader_first(True):
        assert _nice() == was
    err = capsys.readouterr().err
    assert err == (f"{prog.NAME}: the reader stays at nice {was} (nice {run.READER_NICE} refused: "
                   "Operation not permitted): with what it traces on its CPU, it may fall "
                   "behind\n")
