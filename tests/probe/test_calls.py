"""Entries paired with exits (probe/calls.py), the one rule `btfgen trace` and `btfgen decode`
follow: per thread, an exit closes the innermost open call of its function."""

from __future__ import annotations

from btfgen.probe.calls import OpenCalls

F, G = object(), object()


def test_nested_calls_close_innermost_first():
    c = OpenCalls()
    c.enter(1, F, "outer")
    c.enter(1, F, "inner")
    assert [c.exit(1, F), c.exit(1, F), c.exit(1, F)] == ["inner", "outer", None]
    assert c.threads == {}  # a thread with nothing open is forgotten


def test_threads_are_apart():
    c = OpenCalls()
    c.enter(1, F, "a")
    c.enter(2, F, "b")
    assert (c.exit(1, F), c.exit(2, F)) == ("a", "b")


def test_a_lost_exit_drops_the_calls_opened_after_it():
    c = OpenCalls()
    c.enter(7, F, "f")
    c.enter(7, G, "g")  # g's exit is lost
    assert c.exit(7, F) == "f"
    assert c.exit(7, G) is None  # a later g exit: its entry is gone with f's call


def test_a_lost_entry_pairs_nothing():
    c = OpenCalls()
    c.enter(7, F, "f")
    assert c.exit(7, G) is None
    assert c.exit(7, F) == "f"


def test_depth_is_bounded():
    c = OpenCalls(max_depth=3)
    for i in range(5):
        c.enter(1, F, i)
    assert [c.exit(1, F) for _ in range(4)] == [4, 3, 2, None]  # 0 and 1 were dropped
    unbounded = OpenCalls(max_depth=None)
    for i in range(1000):
        unbounded.enter(1, F, i)
    assert len(unbounded.threads[1]) == 1000
