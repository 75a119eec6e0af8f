"""`btfgen decode --format chrome`: the Trace Event Format of a recording's calls, nested per
thread, with the jsonl's arguments and return values; calls without their exit never given a
duration; a damaged recording converted up to the damage, one line, exit 2."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import nested
import pytest
import synth

from btfgen.probe import spec_format

MODULE = synth.module("x86_64")
DESCS = {d.name: d for d in synth.descriptors(MODULE)}
ORDER = MODULE.BYTE_ORDER


def decode(path, *options, check=True):
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", *options, str(path)],
                          capture_output=True, text=True, cwd=synth.ROOT)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def chrome(path, *options):
    return json.loads(decode(path, "--format", "chrome", *options).stdout)["traceEvents"]


@pytest.fixture
def calls(tmp_path):
    path = tmp_path / "nested.btfrec"
    descs = [DESCS["scalars"], DESCS["with_enum"], DESCS["tiny"]]
    synth.write(path, MODULE, nested.calls(descs, 600, 5, ORDER), batch=97)
    return path


def test_every_call_is_one_complete_event_nested_per_thread(calls):
    events = chrome(calls)
    lines = [json.loads(x) for x in decode(calls, "--format", "jsonl").stdout.splitlines()]
    entries = [x for x in lines if x["kind"] == "entry"]
    exits = {(x["tid"], x["timestamp"]): x for x in lines if x["kind"] == "exit"}
    done = [e for e in events if e["ph"] == "X"]
    assert len(done) == len(entries) == len(exits)
    assert {e["ph"] for e in events} == {"X", "M"}
    by_start = {(e["tid"], round(float(e["ts"]) * 1000)): e for e in done}
    for entry in entries:
        e = by_start[(entry["tid"], entry["timestamp"])]
        assert e["name"] == entry["function"] and e["pid"] == entry["pid"]
        assert e["args"]["args"] == entry["args"]
        end = round((float(e["ts"]) + float(e["dur"])) * 1000)
        ret = exits[(entry["tid"], end)]
        assert ret["function"] == entry["function"]
        assert e["args"]["exit"] == {"return": ret["return"]}
    # Per thread, two calls are nested or apart, never overlapping.
    for tid in {e["tid"] for e in done}:
        spans = sorted((round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000))
                       for e in done if e["tid"] == tid)
        open_ends = []
        for start, dur in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or start + dur <= open_ends[-1]
            open_ends.append(start + dur)
    names = {(e["name"], e["tid"]) for e in events if e["ph"] == "M"}
    assert names == {("process_name", 42)} | {("thread_name", t) for t in (100, 101, 102)}


def test_without_args_events_carry_none_and_output_is_deterministic(calls):
    first = decode(calls, "--format", "chrome", "--no-args").stdout
    assert first == decode(calls, "--format", "chrome", "--no-args").stdout
    events = json.loads(first)["traceEvents"]
    assert [e for e in events if e["ph"] == "X" and "args" in e] == []
    assert len([e for e in events if e["ph"] == "X"]) == len(chrome(calls)) - 4


def _event(name, kind, ns, tid=100, flags=0):
    """An event of `name` at `ns`, its values random (seeded by its time: the same each run)."""
    return synth.event(DESCS[name], kind, random.Random(ns), ns, tid, 0, 0, ORDER, flags)


def test_calls_without_their_exit_have_no_duration(tmp_path):
    path = tmp_path / "odd.btfrec"
    evs = [
        _event("scalars", 0, 1000),            # outer, returns at 9000
        _event("tiny", 0, 2000),               # left: outer returns first (a longjmp)
        _event("with_enum", 0, 3000),          # left too
        _event("scalars", 1, 9000),
        _event("tiny", 1, 9500),               # an exit without its entry
        _event("tiny", 0, 10000, tid=101),     # lost: its thread lost records after it
        _event("scalars", 0, 11000, tid=101, flags=spec_format.EVENT_THREAD_LOST),
        _event("scalars", 1, 12000, tid=101),
        _event("with_enum", 0, 13000),         # still running at the end
    ]
    synth.write(path, MODULE, evs)
    proc = decode(path, "--format", "chrome")
    events = [e for e in json.loads(proc.stdout)["traceEvents"] if e["ph"] != "M"]
    got = sorted((e["ph"], e["name"], e["ts"], e.get("dur")) for e in events)
    assert got == sorted([
        ("X", "scalars", 1.0, 8.0),
        ("i", "tiny [no exit: left: a caller returned first (longjmp?)]", 2.0, None),
        ("i", "with_enum [no exit: left: a caller returned first (longjmp?)]", 3.0, None),
        ("i", "tiny [exit without its entry]", 9.5, None),
        ("i", "tiny [no exit: records lost]", 10.0, None),
        ("X", "scalars", 11.0, 1.0),
        ("B", "with_enum [no exit: running at the end]", 13.0, None),
    ])
    assert "calls without their exit: 2 left: a caller returned first (longjmp?), 1 records " \
        "lost, 1 running at the end; exits without their entry: 1" in proc.stderr


def test_a_damaged_recording_converts_what_precedes_the_damage(calls, tmp_path):
    whole = chrome(calls)
    data = bytearray(calls.read_bytes())
    spans = [i for i in range(len(data)) if data[i:i + 4] == b"SPAN"]
    data[spans[3] + 64] ^= 0xFF  # in the fourth span's records: its checksum fails
    bad = tmp_path / "bad.btfrec"
    bad.write_bytes(bytes(data))
    proc = decode(bad, "--format", "chrome", check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "what precedes it is converted" in proc.stderr
    assert "Traceback" not in proc.stderr
    events = json.loads(proc.stdout)["traceEvents"]  # closed: valid JSON
    done = [e for e in events if e["ph"] == "X"]
    assert 0 < len(done) < len([e for e in whole if e["ph"] == "X"])
    assert all(e in whole for e in done)


def test_a_file_that_is_not_a_recording_begins_nothing(tmp_path):
    path = tmp_path / "not.btfrec"
    path.write_bytes(b"not a recording at all\n")
    for options in (["--format", "chrome"], ["--format", "folded"], ["--tree"]):
        proc = decode(path, *options, check=False)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == f"btfgen: error: {path}: not a btfgen recording\n"


def test_cut_or_damaged_anywhere_the_output_is_whole_json_or_nothing(calls, tmp_path):
    """Each of 60 cuts and 60 damaged bytes through the file: the walk either refuses the file
    before the output begins, or what it writes parses (closed after damage), its complete
    events among the whole file's."""
    import io

    from btfgen.probe import recording
    from btfgen.recordings import callwalk
    from btfgen.recordings.chrome import Chrome

    def convert(path):
        out = io.StringIO()
        try:
            callwalk.walk(str(path), Chrome(out))
        except callwalk.Damaged:
            pass
        except recording.RecordError:
            assert out.getvalue() == ""
            return None
        return json.loads(out.getvalue())["traceEvents"]

    whole = convert(calls)
    data = calls.read_bytes()
    rng = random.Random(48)
    bad = tmp_path / "bad.btfrec"
    for at in sorted(rng.sample(range(len(data)), 60)):
        for damaged in (data[:at], data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]):
            bad.write_bytes(damaged)
            got = convert(bad)
            if got is not None:
                assert all(e in whole for e in got if e["ph"] in ("X", "M"))
