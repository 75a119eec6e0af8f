"""--count / --latency --by ustack, live with uprobes (issue 48, item 1): one function called
from two callers (and from one of them on another thread) a known number of times each is
counted and timed exactly per stack, the stacks whole through code without frame pointers,
their frames naming the callers at the instruction after each call (objdump); on every user
attach mode; counted at exit under a filter on $retval; in JSON; a directory built with it
refusing what it cannot do at --run, in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import live_needs
import pytest
from test_stack_live import FRAME, TOOL, _calls_before, _run

# leaf: 3 calls from caller_a on the main thread, 5 from caller_b, 2 from caller_a on a worker
# thread; leaf(i) returns 3 * i, so `$retval >= 3` keeps 2, 5 and 1 of them.
TARGET = r"""
#include <pthread.h>
#include <unistd.h>
volatile long sink;
long __attribute__((noipa)) leaf(long i) { return i * 3; }
long __attribute__((noipa)) caller_a(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += leaf(i);
	return s;
}
long __attribute__((noipa)) caller_b(long n)
{
	long s = 1;
	for (long i = 0; i < n; i++)
		s += leaf(i + 10);
	return s;
}
static void *worker(void *arg) { sink = caller_a((long)arg); return 0; }
int main(void)
{
	pthread_t t;

	sink = caller_a(3);
	sink = caller_b(5);
	pthread_create(&t, 0, worker, (void *)2L);
	pthread_join(t, 0);
	/* the reader reads this process's maps at its first stack, before it is gone: 0.3 s was
	 * once too short on a loaded machine (unnamed frames); docs/trace.md, "maps" */
	sleep(2);
	return 0;
}
"""
# the callers of each stack, its frames after leaf's own up to the thread's start
MAIN_A = ("caller_a", "main", "__libc_start_call_main")
MAIN_B = ("caller_b", "main", "__libc_start_call_main")
WORKER_A = ("caller_a", "worker", "start_thread")

_WHY_NOT = live_needs.why_not(tools=("gcc", "objdump"), machine="x86_64")
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return live_needs.built(tmp_path_factory, "stackkeys", TARGET)


def _counted(out: str) -> dict[tuple, int]:
    """The text table: (function, frames) -> count, each row's frames the indented lines
    under it."""
    lines = out.splitlines()
    assert lines[0] == "FUNC  COUNT  (ustack under each)", out
    rows: list = []
    for line in lines[1:]:
        if line.startswith("    "):
            rows[-1][2].append(line.strip())
        else:
            func, count = line.split()
            rows.append((func, int(count), []))
    table = {(func, tuple(frames)): n for func, n, frames in rows}
    assert len(table) == len(rows), out  # never two rows of one stack
    return table


def _callers(frames) -> tuple:
    return tuple(FRAME.fullmatch(f).group(1) for f in frames[1:4])


def _check_frames(frames, target: Path, calls: dict) -> None:
    """leaf's own frame first, whole to the thread's start, each caller's offset just after
    its call to the frame below (objdump's)."""
    named = [FRAME.fullmatch(f).groups() for f in frames]
    assert named[0] == ("leaf", "0", target.name), frames
    assert named[-1][0] in ("_start", "clone3"), frames
    assert not any(f.startswith("...") for f in frames), frames
    for (callee, _, _), (caller, off, obj) in zip(named[:2], named[1:3]):
        if obj == target.name:
            assert calls[(caller, int(off, 16))] == callee, frames


@pytest.mark.parametrize("attach", ["session", "multi", "single"])
def test_counts_exact_per_stack(target, attach):
    out = _run([*TOOL, "--count", "--by", "ustack", "--attach", attach, str(target), "leaf",
                "--", str(target)]).stdout
    table = _counted(out)
    calls = _calls_before(target)
    by_callers = {_callers(frames): n for (_, frames), n in table.items()}
    assert by_callers == {MAIN_A: 3, MAIN_B: 5, WORKER_A: 2}, out
    for _, frames in table:
        _check_frames(frames, target, calls)
    # sorted by count, the largest last, as the summaries are
    assert list(table.values()) == [2, 3, 5], out


def test_counted_at_exit_under_a_retval_filter(target):
    out = _run([*TOOL, "--count", "--by", "ustack", "--filter", "leaf: $retval >= 3",
                str(target), "leaf", "--", str(target)]).stdout
    by_callers = {_callers(frames): n for (_, frames), n in _counted(out).items()}
    assert by_callers == {MAIN_A: 2, MAIN_B: 5, WORKER_A: 1}, out


def test_json_counts_and_latencies_per_stack(target):
    out = _run([*TOOL, "--count", "--latency", "--json", "--by", "ustack", "--attach", "multi",
                str(target), "leaf", "--", str(target)]).stdout
    [doc] = [json.loads(line) for line in out.splitlines()]
    assert doc["missed_by_kernel"] == 0 and doc["lost_records"] == 0 and doc["no_entry"] == 0

    def callers(key):
        assert key["ustack_cut"] is None
        assert key["ustack"][0] == {"symbol": "leaf", "offset": 0, "object": str(target)}
        return tuple(f["symbol"] for f in key["ustack"][1:4])
    counts = {callers(c["key"]): c["count"] for c in doc["counts"]}
    assert counts == {MAIN_A: 3, MAIN_B: 5, WORKER_A: 2}
    assert [c["count"] for c in doc["counts"]] == [2, 3, 5]
    timed = {callers(h["key"]): h for h in doc["latencies"]}
    assert {k: h["count"] for k, h in timed.items()} == counts
    for h in timed.values():
        assert sum(b["count"] for b in h["buckets"]) == h["count"]
        assert all(b["low"] <= h["total_ns"] for b in h["buckets"])


def test_latency_text_per_stack(target):
    out = _run([*TOOL, "--latency", "--by", "ustack", str(target), "leaf", "--",
                str(target)]).stdout
    heads = [m.start() for m in re.finditer(r"^Function = leaf, ustack:$", out, re.M)]
    assert len(heads) == 3, out
    seen = {}
    for at, end in zip(heads, heads[1:] + [len(out)]):
        block = out[at:end].splitlines()
        frames = [line.strip() for line in block[1:] if line.startswith("    ")]
        count = int(re.search(r"count: (\d+)$", out[at:end], re.M).group(1))
        seen[_callers(frames)] = count
    assert seen == {MAIN_A: 3, MAIN_B: 5, WORKER_A: 2}, out


def test_a_directory_built_with_a_stack_key_refuses_at_run(target, tmp_path):
    d = tmp_path / "d"
    _run([*TOOL, "--count", "--by", "ustack", "--build", str(d), str(target), "leaf"])
    refused = (
        (["--map-size", "9"], "its calls are counted by the tracer, in no map of --map-size"),
        (["--record", str(tmp_path / "r")], "was built with --by ustack: its calls are counted "
                                            "by the tracer from their events; recording them"))
    for args, said in refused:
        proc = _run([*TOOL, "--run", str(d), *args, "--", str(target)], status=2)
        assert len(proc.stderr.splitlines()) == 1 and said in proc.stderr, proc.stderr
