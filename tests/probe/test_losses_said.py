"""The run side says while running what it loses: the ring buffer's drops, the kernel's missed
calls, and how far behind the calls the reader is."""

from __future__ import annotations

import time

from btfgen.probe import losses
from btfgen.probe.event import HEADS


def _said(capsys, now: losses.Losses, said: losses.Losses) -> tuple[losses.Losses, str]:
    back = losses.say_losses(now, said)
    return back, capsys.readouterr().err


def test_missed_calls_are_said_while_running_not_only_lost_records(capsys):
    quiet = losses.Losses(0, 0, 0.0)
    back, err = _said(capsys, losses.Losses(0, 7, 0.0), quiet)
    assert "0 records lost so far, 7 calls missed by the kernel" in err
    assert "ring buffer full" not in err  # nothing lost: the reader is not said to be behind
    assert back.missed == 7
    # Said again only when it grows.
    back, err = _said(capsys, losses.Losses(0, 7, 0.0), back)
    assert err == ""
    back, err = _said(capsys, losses.Losses(3, 7, 0.0), back)
    assert "3 records lost so far (ring buffer full: the reader is behind" in err
    assert "7 calls missed" in err


def test_a_reader_behind_the_calls_says_how_far(capsys):
    _, err = _said(capsys, losses.Losses(0, 0, 2.5), losses.Losses(0, 0, 0.0))
    assert "the reader is 2.5s behind the calls" in err
    _, err = _said(capsys, losses.Losses(0, 0, 0.2), losses.Losses(0, 0, 0.0))
    assert err == ""


def test_behind_is_the_age_of_the_oldest_event_handed_on():
    got = []
    behind = losses.Behind(got.append, "little")
    head = HEADS["little"]
    old = time.monotonic_ns() - 3_000_000_000
    event = head.pack(1, 2, b"comm", old, 0, 0) + bytes(8)
    behind.record(event)
    behind.record(head.pack(1, 2, b"comm", time.monotonic_ns(), 0, 0))
    behind.record(b"short")  # handed on for the sink to say what is wrong with it
    assert got == [event, got[1], b"short"]
    assert 3.0 <= behind.take() < 60
    assert behind.take() == 0
