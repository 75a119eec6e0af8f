"""`btfgen trace`'s ways of showing calls, live with uprobes: entry and exit paired per thread
with the time between them, --errors, --json, the count of records the ring buffer lost, and
--record FILE read back by `btfgen decode`."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys

import live_harness as harness
import pytest
from test_live_trace_tool import EXPECTED, FUNCS, untimed

TOOL = [sys.executable, "-m", "btfgen", "trace"]
DECODE = [sys.executable, "-m", "btfgen", "decode"]
# This checkout's btfgen, from any directory.
ELSEWHERE = {"cwd": "/", "env": dict(os.environ, PYTHONPATH=str(harness.HERE.parent.parent))}

ERRORS = r"""
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
struct thing { int a; };
static struct thing one = { 5 };
int __attribute__((noipa)) op(int x, long y) { return x < 0 ? -ENOENT : x + (int)y; }
struct thing *__attribute__((noipa)) find(int k) { return k ? &one : NULL; }
unsigned __attribute__((noipa)) big(unsigned v) { return v; }
void *__attribute__((noipa)) err_ptr(long e) { return (void *)e; }
volatile long sink;  /* the calls' results are used: none is left out */
static void *worker(void *arg) { return (void *)(long)op(-(int)(long)arg, 9); }
int main(void)
{
	pthread_t t;

	sink = op(1, 2);
	sink = op(-3, 4);
	sink = (long)find(1);
	sink = (long)find(0);
	sink = big(-2u);            /* unsigned: not an error */
	sink = (long)err_ptr(-12);  /* ERR_PTR(-ENOMEM) */
	sink = (long)err_ptr(-5000); /* past MAX_ERRNO: an address */
	pthread_create(&t, NULL, worker, (void *)7L);
	pthread_join(t, NULL);
	return 0;
}
"""

LOOP = r"""
int __attribute__((noipa)) tick(int i) { return i + 1; }
int main(void)
{
	int s = 0;
	for (int i = 0; i < %d; i++)
		s = tick(s);
	return s == %d ? 0 : 1;
}
"""


def _exe(tmp_path, name: str, source: str):
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    exe = tmp_path / name
    harness.run(["gcc", "-O2", "-g", "-pthread", str(src), "-o", str(exe)], f"compiling {name}")
    return exe


def _run(args, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_errors_only_with_entry_arguments(tmp_path):
    harness.require_live()
    exe = _exe(tmp_path, "errors", ERRORS)
    out = _run([*TOOL, "--errors=negative,null", str(exe), "op", "find", "big",
                "err_ptr"]).stdout
    assert untimed(out).splitlines() == [
        "op(x=-3, y=4) -> -2",  # a user function's return: never named as an errno by guess
        "find(k=0) -> 0x0",
        # err_ptr's ERR_PTR(-ENOMEM) is the kernel's convention: not a user function's error
        "op(x=-7, y=9) -> -2",  # the other thread's call, paired on that thread
    ]


def test_every_call_paired_with_its_duration(tmp_path):
    harness.require_live()
    exe = _exe(tmp_path, "errors", ERRORS)
    out = _run([*TOOL, str(exe), "op", "find"]).stdout
    lines = untimed(out).splitlines()
    assert lines == ["op(x=1, y=2)", "op -> 3", "op(x=-3, y=4)", "op -> -2", "find(k=1)",
                     f"find -> {lines[5].split(' -> ')[1]}", "find(k=0)", "find -> 0x0",
                     "op(x=-7, y=9)", "op -> -2"]
    assert re.fullmatch(r"find -> 0x[0-9a-f]+", lines[5]) and lines[5] != "find -> 0x0"


def test_json_lines(tmp_path):
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)
    out = _run([*TOOL, "--json", str(exe), *FUNCS]).stdout
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["kind"] for e in events] == ["entry", "exit"] * len(FUNCS)
    assert [e["function"] for e in events[::2]] == FUNCS
    first, last = events[0], events[-1]
    assert first["args"] == {"a": -1, "b": -2, "c": -3, "d": -4, "e": 4000000000,
                             "f": 20015998343868, "g": -77}
    assert events[1]["return"] == 20019998343781
    big = events[4]["args"]
    assert big == {"k": -9, "b": {"x": 11, "y": -22, "z": 33}, "c": {"value": 7, "name": "BLUE"}}
    assert events[9]["return"] == {"x": 1000, "y": 1001, "z": -1000}
    assert last["return"] == 1986216788
    pids = {e["pid"] for e in events}
    assert len(pids) == 1 and pids.pop() > 0
    assert {e["comm"] for e in events} == {exe.name[:15]}
    stamps = [e["timestamp"] for e in events]
    assert stamps == sorted(stamps)
    for entry, exit_ in zip(events[::2], events[1::2]):
        assert exit_["duration_ns"] == exit_["timestamp"] - entry["timestamp"] > 0
        assert isinstance(entry["cpu"], int) and entry["tid"] == entry["pid"]


def test_lost_records_are_counted(tmp_path):
    """Many more calls than the ring buffer holds while the printer is slow: every call is
    either printed or counted as lost, never silently missing."""
    harness.require_live()
    n = 200000
    exe = _exe(tmp_path, "loop", LOOP % (n, n))
    proc = _run([*TOOL, str(exe), "tick"])
    m = re.search(r"btfgen trace: (\d+) records lost \(ring buffer full\)\n\Z", proc.stderr)
    assert m, proc.stderr
    lost = int(m.group(1))
    printed = proc.stdout.count("\n")
    assert printed + lost == 2 * n, (printed, lost)


def test_record_then_decode(tmp_path):
    """--record writes the file; `btfgen decode` prints from it, elsewhere (cwd /, no trace
    directory), the same lines the live tracer prints, as text and as JSON lines."""
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)
    rec = tmp_path / "calls.btfrec"
    proc = _run([*TOOL, "--record", str(rec), str(exe), *FUNCS])
    assert proc.stdout == ""
    assert f"recorded {2 * len(FUNCS)} events in {rec}" in proc.stderr
    text = _run([*DECODE, str(rec)], **ELSEWHERE)
    assert untimed(text.stdout) == EXPECTED
    assert text.stderr.endswith("; 0 records lost (ring buffer full)\n")
    lines = _run([*DECODE, "--format", "jsonl", str(rec)], **ELSEWHERE).stdout.splitlines()
    live = _run([*TOOL, "--json", str(exe), *FUNCS]).stdout.splitlines()
    varying = ("timestamp", "cpu", "pid", "tid", "duration_ns")

    def same(line):
        return {k: v for k, v in json.loads(line).items() if k not in varying}
    assert [same(x) for x in lines] == [same(x) for x in live]
    errors = _run([*DECODE, "--errors", str(rec)]).stdout
    assert errors == ""  # target.c returns no errors


# LOOP forever, saying in a file how many calls it has made every 4,096 of them: the stalled
# reader below waits on calls made, not on time, so the ring is overrun whatever the load.
FOREVER = r"""
#include <stdio.h>
int __attribute__((noipa)) tick(int i) { return i + 1; }
int main(void)
{
	int s = 0;
	for (;;) {
		s = tick(s);
		if ((s & 4095) == 0) {
			FILE *f = fopen("%s", "w");
			if (f) { fprintf(f, "%%d\n", s); fclose(f); }
		}
	}
}
"""


def _calls_made(progress) -> int:
    try:
        return int(progress.read_text() or 0)
    except (FileNotFoundError, ValueError):  # not yet written, or caught mid-write
        return 0


@pytest.mark.parametrize("stalled", [False, True], ids=["file", "stalled-reader"])
def test_sigterm_ends_tracing_as_the_command_ending_would(tmp_path, stalled):
    """timeout(1) or a service manager stops the tracer with SIGTERM: the ring buffer is drained,
    every line decoded so far printed (lines are written in batches), the losses said, and the
    exit status says the signal (143), as a shell's would. `stalled`: the lines go to a pipe
    nobody reads until the traced command has made far more calls than the smallest ring
    holds, so records are lost for sure: the pairing and the count of losses must hold across
    them."""
    import signal
    import threading
    import time
    from pathlib import Path

    harness.require_live()
    progress = tmp_path / "progress"
    exe = _exe(tmp_path, "forever", FOREVER % progress)
    # 1 MiB of ring holds fewer than 30,000 of tick's records (each over 32 bytes): 200,000
    # calls make 400,000 records, overrunning it whatever the machine's load.
    overrun = 200_000
    read: list[bytes] = []
    with open(tmp_path / "out", "w") as out_file, open(tmp_path / "err", "w") as err_file:
        # A file, or a pipe read only once the tracer has been blocked writing it long enough
        # to overrun the ring. The traced command inherits either: a pipe is read to its end
        # only once the command is gone too.
        ring = ["--ring-size", "1"] if stalled else []
        proc = subprocess.Popen([*TOOL, *ring, str(exe), "tick"], stderr=err_file,
                                stdout=subprocess.PIPE if stalled else out_file)

        def read_once_overrun():
            began = time.monotonic()
            while _calls_made(progress) < overrun and time.monotonic() - began < 240:
                time.sleep(0.05)
            read.append(proc.stdout.read())

        reader = threading.Thread(target=read_once_overrun)
        started = time.monotonic()
        while "attaching" not in (tmp_path / "err").read_text():  # then the command starts
            assert time.monotonic() - started < 120 and proc.poll() is None
            time.sleep(0.1)
        if stalled:
            reader.start()
        # Calls made, whatever the load: the command runs, so the tracer can be stopped (its
        # handler is in place before the command starts), and has lines to print.
        began = time.monotonic()
        while _calls_made(progress) < (overrun if stalled else 20_000):
            assert time.monotonic() - began < 240, "the traced loop made too few calls"
            time.sleep(0.05)
        time.sleep(0.5)  # and some lines printed after the stall
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            for pid in children:  # the traced command goes on by itself: not the test's to leave
                os.kill(int(pid), signal.SIGKILL)
            if stalled:
                reader.join(60)
    out = read[0].decode() if stalled else (tmp_path / "out").read_text()
    err = (tmp_path / "err").read_text()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert_calls_accounted_for(out.splitlines(), err)
    if stalled:
        assert not re.search(r"\b0 records lost \(ring buffer full\)", err), err


def assert_calls_accounted_for(lines: list[str], err: str) -> None:
    """What the tracer promises of LOOP's calls of tick (tick(i=k) returns k + 1, k = 0, 1, ...)
    whatever the machine's load, which decides how many records the ring buffer loses: lines in
    call order, an exit shows its duration exactly when its entry was printed, and every record
    up to the last printed one is either printed or counted in the losses said at the end."""
    assert len(lines) > 100, lines
    made, entry_shown, printed = 0, None, 0
    for line in lines:
        entry = re.fullmatch(r"tick\(i=(\d+)\)", line)
        exit_ = re.fullmatch(r"tick -> (\d+)(?: \((\S+) us\))?", line)
        assert entry or exit_, line
        # The records of call k are numbers 2k (entry) and 2k + 1 (exit), in the order made.
        at = 2 * int(entry[1]) if entry else 2 * (int(exit_[1]) - 1) + 1
        assert at >= made, f"out of order: {line} after record {made - 1}"
        if exit_:
            assert (exit_[2] is not None) == (entry_shown == at - 1), line
        entry_shown = at if entry else None
        made, printed = at + 1, printed + 1
    said = re.search(r"(\d+) records lost \(ring buffer full\)", err)
    assert said, err
    assert printed + int(said[1]) >= made, (printed, said[0], made)


def test_a_reader_that_goes_away_ends_tracing_quietly(tmp_path):
    """`btfgen trace ... | head -2`: once the pipe is closed tracing ends as SIGPIPE would end
    it (status 141), with no line per record and no traceback on stderr."""
    harness.require_live()
    exe = _exe(tmp_path, "loop", LOOP % (20000, 20000))
    proc = subprocess.run(f"{' '.join(TOOL)} {exe} tick 2>{tmp_path / 'err'} | head -2; "
                          "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, timeout=300)
    err = (tmp_path / "err").read_text()
    assert proc.returncode == 141, err
    assert proc.stdout.splitlines()[0] == "tick(i=0)"
    assert "Traceback" not in err and "could not be decoded" not in err, err
    assert re.search(r"\d+ records lost \(ring buffer full\)", err), err


def test_record_hands_over_spans_on_the_bpf_sides_count(tmp_path):
    """On a 64-bit machine the BPF side counts what it commits, and --record writes what the
    count says committed as raw spans, unwalked (their runs left to the reader of the file):
    the file holds such spans, and `btfgen decode` reads every event back, in call order."""
    harness.require_live()
    calls = 20_000
    exe = _exe(tmp_path, "loop", LOOP % (calls, calls))
    rec = tmp_path / "loop.btfrec"
    proc = _run([*TOOL, "--timings", "--record", str(rec), "--ring-size", "64", str(exe),
                 "tick"])
    said = re.search(r"reader cpu: .*; (\d+) spans, (\d+) of them unwalked", proc.stderr)
    assert said, proc.stderr
    # The reader takes what is there every few ms while one thread makes calls: a take finds
    # a record still being written (then walks) only in the few µs between its reservation
    # and its count. And once the loop has ended nothing is being written.
    assert int(said[2]) >= 1, proc.stderr
    raw = 0
    data = rec.read_bytes()
    at = 24 + struct.unpack_from("<I", data, 12)[0]
    while data[at:at + 4] == b"SPAN":
        n, runs, nbytes = struct.unpack_from("<III", data, at + 4)
        raw += not runs
        chunks = -(-nbytes // (1 << 20))
        at += 24 + 24 * runs + nbytes + 4 * (chunks + chunks % 2)
    assert raw == int(said[2])
    kept = int(re.search(r"recorded (\d+) events", proc.stderr)[1])
    assert kept == 2 * calls  # a 64 MiB ring holds every one of them
    out = _run([*DECODE, "--format", "jsonl", str(rec)]).stdout.splitlines()
    assert len(out) == kept
    args = [json.loads(line) for line in out]
    ticks = [a["args"]["i"] for a in args if a["kind"] == "entry"]
    assert ticks == list(range(calls))
