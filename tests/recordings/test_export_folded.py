"""`btfgen decode --format folded`: the calls' stacks per thread weighted by the time spent in
each call itself; calls without their exit named in lines of weight 0, never given time."""

from __future__ import annotations

import json

import nested
import pytest
import synth
from test_export_chrome import DESCS, MODULE, ORDER, _event, decode

from btfgen.recordings import folded


def lines(path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in decode(path, "--format", "folded").stdout.splitlines():
        stack, ns = line.rsplit(" ", 1)
        out[stack] = out.get(stack, 0) + int(ns)
    return out


@pytest.fixture
def calls(tmp_path):
    path = tmp_path / "nested.btfrec"
    descs = [DESCS["scalars"], DESCS["with_enum"], DESCS["tiny"]]
    synth.write(path, MODULE, nested.calls(descs, 600, 7, ORDER), batch=97)
    return path


def test_each_stack_weighs_the_time_of_its_call_less_its_callees(calls):
    """Recomputed from the jsonl lines: per thread, a stack of the open calls; each exit adds its
    duration less its callees' to its stack."""
    want: dict[str, int] = {}
    stacks: dict[int, list] = {}
    for x in map(json.loads, decode(calls, "--format", "jsonl").stdout.splitlines()):
        stack = stacks.setdefault(x["tid"], [])
        if x["kind"] == "entry":
            stack.append([x["function"], x["timestamp"], 0])
            continue
        name, start, inner = stack.pop()
        assert name == x["function"]
        took = x["timestamp"] - start
        if stack:
            stack[-1][2] += took
        key = ";".join([f"synth [{x['tid']}]"] + [s[0] for s in stack] + [name])
        want[key] = want.get(key, 0) + took - inner
    assert lines(calls) == want


def test_calls_without_their_exit_weigh_nothing(tmp_path):
    path = tmp_path / "odd.btfrec"
    synth.write(path, MODULE, [
        _event("scalars", 0, 1000),       # running at the end
        _event("tiny", 0, 2000),
        _event("with_enum", 0, 2500),     # left by tiny's exit
        _event("tiny", 1, 3000),
        _event("tiny", 1, 3500),          # no entry: not in the stacks
    ])
    assert lines(path) == {
        "synth [100];scalars;tiny": 1000,
        "synth [100];scalars;tiny;with_enum [no exit: left: a caller returned first (longjmp?)]":
            0,
        "synth [100];scalars [no exit: running at the end]": 0,
    }


def test_a_frame_cannot_break_the_format():
    assert folded.frame("a;b\nc") == "a:b c"
