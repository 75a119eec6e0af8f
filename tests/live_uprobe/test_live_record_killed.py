"""`btfgen trace --record FILE` killed with SIGKILL (an OOM kill, a crash, a lost session) at
random points of a live uprobe trace of a loop: `btfgen decode FILE` prints every event of
every span written whole before the kill, in the order the calls were made, and says in one
line that the file was cut, where, and after how many events."""

from __future__ import annotations

import os
import random
import re
import signal
import struct
import subprocess
import sys
import time

import live_harness as harness
from test_live_trace_modes import DECODE, LOOP, TOOL, _exe

CALLS = 50_000_000  # more than a trace makes in the seconds before its kill


def _whole_spans(data: bytes) -> tuple[int, int]:
    """(byte after the last span written whole, events in the spans up to it), read here
    from the format's description (recording.py's docstring), apart from its reader."""
    version, size = struct.unpack_from("<II", data, 8)
    at, events = 24 + size, 0
    while data[at:at + 4] == b"SPAN" and at + 24 <= len(data):
        n, runs, nbytes = struct.unpack_from("<III", data, at + 4)
        end = at + 24 + 24 * runs + nbytes
        if version >= 3:  # the bytes' checks after them: a u32 a MiB, padded to 8
            chunks = -(-nbytes // (1 << 20))
            end += 4 * (chunks + chunks % 2)
        if end > len(data):
            break
        at, events = end, events + n
    return at, events


def _wait(proc, rec, spans: bool) -> None:
    """Until `rec` exists (with `spans`: holds more than its head), or the tracer ended."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if rec.exists():
            data = rec.read_bytes()[:24]
            if not spans or (len(data) == 24 and rec.stat().st_size > 24 + struct.unpack_from(
                    "<I", data, 12)[0]):
                return
        time.sleep(0.01)
    raise AssertionError(f"the tracer wrote no {'span' if spans else 'file'}: "
                         f"{proc.stderr.read1().decode() if proc.poll() is not None else ''}")


def test_a_recording_killed_anywhere_decodes_up_to_the_kill(tmp_path):
    harness.require_live()
    exe = _exe(tmp_path, "loop", LOOP % (CALLS, CALLS))
    trace = tmp_path / "trace"
    subprocess.run([*TOOL, "--build", str(trace), str(exe), "tick"], check=True,
                   capture_output=True, timeout=300)
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    for round_ in range(4):
        rec = tmp_path / f"r{round_}.btfrec"
        # Its own process group: the kill takes the traced loop (its child) too.
        proc = subprocess.Popen([sys.executable, str(trace / "btfgen_trace.py"), "--run",
                                 str(trace), "--record", str(rec)], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if round_ == 0:  # anywhere: before the file, or as it is opened, as well
                time.sleep(rng.uniform(0, 0.3))
            else:  # from when the file is there (1), or holds a span (2, 3): written as it goes
                _wait(proc, rec, spans=round_ > 1)
                time.sleep(rng.uniform(0, 0.5 if round_ == 1 else 1.5))
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        if not rec.exists():
            continue
        data = rec.read_bytes()
        at, events = _whole_spans(data) if len(data) >= 24 else (0, 0)
        out = subprocess.run([*DECODE, str(rec)], capture_output=True, text=True, timeout=300)
        if len(data) < 24 or at > len(data):  # killed before its head was written whole
            assert out.returncode == 2 and out.stdout == ""
            assert out.stderr.count("\n") == 1, out.stderr
            continue
        assert out.returncode == 0, out.stderr
        assert out.stderr == (f"btfgen decode: {rec}: cut at byte {at} after {events} events "
                              f"(the recording has no end: its tracer was killed?); records "
                              f"lost unknown\n")
        lines = out.stdout.splitlines()
        assert len(lines) == events
        # The calls in the order they were made: tick(i) then its return, i + 1.
        entries = [int(m.group(1)) for m in map(re.compile(r"tick\(i=(\d+)\)$").match, lines)
                   if m]
        exits = [int(m.group(1)) for m in map(re.compile(r"tick -> (\d+)").match, lines) if m]
        assert len(entries) + len(exits) == events
        assert entries == sorted(entries) and exits == sorted(exits)
        assert events or round_ < 2, "a span was written before the kill, none decoded"
