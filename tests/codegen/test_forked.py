"""The forked runner behind parallel generation: results merge in order, and a failure in a
child is the same exception in the parent (a one-line BtfgenError stays one)."""

from __future__ import annotations

import pytest

from btfgen.codegen import forked
from btfgen.errors import BtfgenError


def test_results_merge_in_order():
    works = [lambda i=i: {f"f{i}": str(i) * 3, "shared": str(i)} for i in range(3)]
    assert forked.run(works) == {"f0": "000", "f1": "111", "f2": "222", "shared": "2"}


def _boom():
    raise BtfgenError("vmlinux: .BTF+0x10: bad type")


def test_a_child_exception_is_raised_in_the_parent():
    with pytest.raises(BtfgenError, match=r"^vmlinux: \.BTF\+0x10: bad type$"):
        forked.run([lambda: {"a": "x"}, _boom])


def test_a_child_that_dies_is_reported():
    import os

    with pytest.raises(forked.ChildFailed, match="without a result"):
        forked.run([lambda: {"a": "x"}, lambda: os._exit(3)])


def test_the_parents_own_exception_wins_and_children_are_reaped():
    def big():
        return {"big": "x" * (1 << 22)}  # more than a pipe holds: the child blocks writing

    before = _children()
    with pytest.raises(BtfgenError, match="bad type"):
        forked.run([_boom, big])
    assert _children() == before  # none left behind, not even a zombie


def _children() -> set[int]:
    import os
    from pathlib import Path

    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            out.add(int(stat.parent.name))
    return out
