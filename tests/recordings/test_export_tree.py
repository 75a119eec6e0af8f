"""`btfgen decode --tree`: the calls as an indented tree per thread, with durations; a call
without its exit says so and why, never a duration."""

from __future__ import annotations

import json
import re

import nested
import synth
from test_export_chrome import DESCS, MODULE, ORDER, _event, decode

LINE = re.compile(r"^ *(?P<took>[0-9.]+ us|no exit|no entry|) {2}\[ *(?P<tid>\d+)\] \| "
                  r"(?P<indent>(?:  )*)(?P<call>.*)$")


def tree(path) -> list[tuple]:
    """(duration, tid, depth, the line's call less its arguments and return) of each line."""
    out = []
    for line in decode(path, "--tree").stdout.splitlines()[1:]:
        if line.startswith("# thread "):
            continue
        m = LINE.match(line)
        assert m, line
        call = m["call"]
        call = re.sub(r"\(.*\)(?= ->| \{| \[)", "(...)", call, count=1)
        call = re.sub(r" -> .*?(?= \[|$)", " -> ...", call, count=1)
        out.append((m["took"], int(m["tid"]), len(m["indent"]) // 2, call))
    return out


def test_a_tree_per_thread_as_the_jsonl_pairs_its_calls(tmp_path):
    path = tmp_path / "nested.btfrec"
    descs = [DESCS["scalars"], DESCS["with_enum"], DESCS["tiny"]]
    synth.write(path, MODULE, nested.calls(descs, 400, 11, ORDER), batch=61)
    # The tree each thread's jsonl lines make: a call with callees opens a block.
    want: dict[int, list] = {}
    events: dict[int, list] = {}
    for x in map(json.loads, decode(path, "--format", "jsonl").stdout.splitlines()):
        events.setdefault(x["tid"], []).append(x)
    for tid, evs in events.items():
        lines, stack = want.setdefault(tid, []), []
        for i, x in enumerate(evs):
            if x["kind"] == "entry":
                if evs[i + 1]["kind"] == "entry":  # has callees
                    lines.append(("", tid, len(stack), x["function"] + "(...) {"))
                stack.append((x, evs[i + 1]["kind"] == "exit"))
                continue
            entry, leaf = stack.pop()
            took = f"{(x['timestamp'] - entry['timestamp']) / 1000:.3f} us"
            lines.append((took, tid, len(stack), (x["function"] + "(...) -> ..." if leaf else
                                                   "} " + x["function"] + " -> ...")))
    got: dict[int, list] = {}
    for line in tree(path):
        got.setdefault(line[1], []).append(line)
    assert got == want


def test_calls_without_their_exit_say_why(tmp_path):
    path = tmp_path / "odd.btfrec"
    synth.write(path, MODULE, [
        _event("scalars", 0, 1000),        # running at the end
        _event("tiny", 0, 2000),
        _event("with_enum", 0, 2500),      # left by tiny's exit
        _event("tiny", 1, 3000),
        _event("tiny", 1, 3500),           # no entry
    ])
    left = "[no exit: left: a caller returned first (longjmp?)]"
    assert tree(path) == [
        ("", 100, 0, "scalars(...) {"),
        ("", 100, 1, "tiny(...) {"),
        ("no exit", 100, 2, f"with_enum(...) {left}"),
        ("1.000 us", 100, 1, "} tiny -> ..."),
        ("no entry", 100, 1, "tiny -> ... [exit without its entry]"),
        ("no exit", 100, 0, "} scalars [no exit: running at the end]"),
    ]


def test_every_format_version_and_span_size_walks_alike(tmp_path):
    """The walk reads each record where the reader says it lies (places()): a version 1
    batch's events joined, a small span's records found record by record, a large one's by
    numpy. The same calls written every way give the same tree, timeline and folded stacks."""
    import io

    from btfgen.recordings import callwalk
    from btfgen.recordings.chrome import Chrome
    from btfgen.recordings.folded import Folded
    from btfgen.recordings.tree import Tree

    descs = [DESCS["scalars"], DESCS["with_enum"], DESCS["tiny"]]
    evs = nested.calls(descs, 600, 5, ORDER)
    outputs = {}
    for version in (1, 2, 3, 4):
        for batch in (13, 400):  # spans under grouping.SMALL_SPAN records, and over it
            path = tmp_path / f"v{version}-{batch}.btfrec"
            synth.write(path, MODULE, evs, batch=batch, version=version)
            got = []
            for export in (Tree, Chrome, Folded):
                out = io.StringIO()
                callwalk.walk(str(path), export(out))
                got.append(out.getvalue())
            outputs[version, batch] = got
    first = outputs[4, 400]
    assert first[0].count("\n") > 300 and '"ph": "X"' in first[1]
    assert all(got == first for got in outputs.values()), \
        [key for key, got in outputs.items() if got != first]
