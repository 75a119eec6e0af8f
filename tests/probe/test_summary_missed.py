"""A summary's prints say the calls the kernel skipped since the last print (they are in no
count or histogram): text as a line under the tables, JSON as `missed_by_kernel`."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from manifests import manifest

from btfgen.probe import summary


def _summary(as_json: bool, missed: list[int]) -> tuple[summary.Summary, io.StringIO]:
    made = manifest(summary={"count": True, "latency": False, "key_size": 8, "keys": []},
                    functions=["f"])
    out = io.StringIO()
    s = summary.Summary(made, SimpleNamespace(BYTE_ORDER="little"), out, as_json=as_json)
    s.read = lambda: ({}, {}, [0, 0, 0, 0])  # the maps: nothing counted
    s.attached(None, lambda: missed[0])
    return s, out


def test_json_says_the_kernels_skips_since_the_last_print():
    missed = [7]
    s, out = _summary(True, missed)
    s.print()
    missed[0] = 10
    s.print()
    s.print()
    assert [json.loads(line)["missed_by_kernel"] for line in out.getvalue().splitlines()] == \
        [7, 3, 0]


def test_text_says_them_under_the_tables_only_when_there_are_some():
    missed = [0]
    s, out = _summary(False, missed)
    s.print()
    assert "missed by the kernel" not in out.getvalue()
    missed[0] = 5
    s.print()
    assert out.getvalue().splitlines()[-1].startswith(
        "5 calls missed by the kernel (its programs did not run for them): not counted")
