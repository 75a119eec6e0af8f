"""benchmarks/bench_tracers.py: a short run (--quick) prints every row, and btfgen's counts of
the events it delivered are the calls the program made; its verdicts follow the figures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_tracers.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_tracers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()


def test_quick_run_has_every_row_and_btfgen_delivers_every_event(tmp_path):
    reason = bench.checks()
    if reason:
        pytest.skip(f"live uprobes unavailable: {reason}")
    figures = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(figures)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    made = 2 * bench.QUICK_CALLS  # an entry and an exit a call
    labels = [t.label for t in bench.tracers(Path("tracee"))]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0][2:] for line in table[1:]] == labels
    rows = json.loads(figures.read_text())["rows"]
    # Fewer events than btfgen's ring buffer holds: none may be lost, each must be counted.
    for key in ("btfgen-text", "btfgen-record", "btfgen-stack"):
        row = rows[key]
        assert (row["delivered"], row["lost"], row["most_lost"], row["most_unsaid"]) == \
            (made, 0, 0, 0), key
        assert row["added_ns"] > 0 and row["startup_cpu_s"] > 0, key
    ustack = rows["bpftrace-ustack"]
    if ustack["unavailable"] and ustack["unavailable"] != "bpftrace is not installed":
        # bpftrace 0.17 aborts naming a ustack once the short run's program has exited: said
        assert "bpftrace, arg7 as a pointer, ustack: exit status" in ustack["unavailable"]
        assert f"| {ustack['label']} | unavailable: " in proc.stdout
    elif not ustack["unavailable"]:
        assert 0 < ustack["delivered"] <= made
    for key in ("bpftrace-str", "bpftrace-ptr"):
        row = rows[key]
        if row["unavailable"]:
            assert row["unavailable"] == "bpftrace is not installed"
            assert f"| {row['label']} | unavailable: bpftrace is not installed |" in proc.stdout
        else:
            assert 0 < row["delivered"] <= made
    verdict = "--record loses nothing: 0 lost at most, 2,000 of 2,000 decoded (median): met"
    assert verdict in proc.stdout


def _row(key, added, lost=0, delivered=20, decode_s=0.1, loop_ns=1000):
    tracer = next(t for t in bench.tracers(Path("tracee")) if t.key == key)
    return bench.Row(tracer, added, added, loop_ns, delivered, lost, lost,
                     20 - delivered - lost, 5.0, 0.3, decode_s, 0.05)


def test_verdicts_follow_the_figures():
    rows = {"btfgen-text": _row("btfgen-text", 30.0),
            "btfgen-record": _row("btfgen-record", 50.0, lost=1, delivered=19, decode_s=1.0),
            "bpftrace-str": _row("bpftrace-str", 40.0),
            "bpftrace-ptr": _row("bpftrace-ptr", 40.0)}
    lines = bench.targets(rows, calls=10)
    assert [line.rsplit(": ", 1)[1] for line in lines] == [
        "met", "met", "**missed**", "**missed**", "**missed**", "**missed**"]
    assert "1 lost at most, 19 of 20 decoded" in lines[4]
    assert "took 1.00 s (0.05 s of it start-up: 21 events/s)" in lines[5]
    # Decoding faster than the loop made the events, start-up aside: kept up.
    rows["btfgen-record"] = _row("btfgen-record", 50.0, decode_s=0.05 + 5e-6, loop_ns=1000)
    assert bench.targets(rows, calls=10)[5].endswith(": met")
    # --stack's cost beside bpftrace's ustack: each over its own line without a stack
    rows["btfgen-stack"] = _row("btfgen-stack", 45.0)
    rows["bpftrace-ustack"] = _row("bpftrace-ustack", 47.0)
    said = [line for line in bench.targets(rows, calls=10) if line.startswith("--stack")]
    assert said == ["--stack's cost per call: 15 ns over btfgen without it; bpftrace's ustack "
                    "7 ns over its line without (frame pointers only: cut where the code keeps "
                    "none)"]


def test_unaccounted_events_are_what_neither_arrived_nor_was_said_lost():
    tracer = next(t for t in bench.tracers(Path("tracee")) if t.key == "bpftrace-ptr")
    runs = [bench.Run(3_000, 1.0, 15, 2), bench.Run(2_000, 1.1, 20, 0)]
    startups = [bench.Run(0, 0.1, 15, 0), bench.Run(0, 0.2, 15, 0)]
    row = bench.summarize(tracer, runs, startups, alone_ns=100.0, calls=10)
    assert row.most_unsaid == 3 and row.most_lost == 2 and row.delivered == 17
    assert row.added_ns == 150.0 and row.best_added_ns == 100.0
    # Each run less the start-up of its own round: (0.9 + 0.9) / 2 s over 10 calls.
    assert row.cpu_ns == pytest.approx(0.9e8)
    assert row.startup_cpu_s == pytest.approx(0.15)
    assert row.cpu_noise_ns == pytest.approx(0.1e8)


def test_tracer_cpu_within_the_start_ups_spread_is_no_figure():
    # A start-up that cost more than the whole run (the morning's -1,189 ns/call) says only a
    # bound, never a negative CPU time.
    assert bench.cpu_figure(-1189.0, 300.0) == "≤ 300 (within the start-ups' spread)"
    assert bench.cpu_figure(200.0, 300.0) == "≤ 300 (within the start-ups' spread)"
    assert bench.cpu_figure(-5.0, 0.0) == "≤ 0 (within the start-ups' spread)"
    assert bench.cpu_figure(5316.0, 300.0) == "5,316"
