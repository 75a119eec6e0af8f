"""benchmarks/bench_reader.py run small: its table has a row per reader, and every reader, in
every round, handed on exactly the records the producer put in the ring (counted where they
land: the C reader's callback, the recording's events, the printed lines). Its speed is a
figure, not checked here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_reader.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_reader", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()
RECORDS, ROUNDS = 2_000, 2


def test_small_run_has_every_row_and_every_reader_takes_every_record(tmp_path):
    reason = bench.checks()
    if reason:
        pytest.skip(f"the producer cannot run here: {reason}")
    figures = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--records", str(RECORDS), "--rounds",
                           str(ROUNDS), "--json", str(figures)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(figures.read_text())["rows"]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    labels = [line.split(" | ")[0][2:] for line in table[1:]]
    c_rows = [rows[k]["label"] for k in bench.C_READERS if "unavailable" not in rows[k]]
    assert labels == [label for _, label, _ in bench.READERS] + [
        f"--record / {label}" for label in c_rows]
    for key, label, _ in bench.READERS:
        row = rows[key]
        if "unavailable" in row:  # only the C reader may be, and only for libbpf's headers
            assert key in bench.C_READERS, key
            assert row["unavailable"].startswith("libbpf's headers are not installed")
            assert f"| {label} | unavailable: {row['unavailable']} |" in proc.stdout
            continue
        for name, _ in bench.SIZES:
            figure = row[name]
            assert figure["made"] == [RECORDS] * ROUNDS, (key, name)
            assert figure["read"] == figure["made"], (key, name)
            assert figure["records_s"] > 0 and figure["mb_s"] > 0, (key, name)


def test_bad_options_are_refused_in_one_line(capsys):
    assert bench.main(["--records", "3"]) == 2
    assert bench.main(["--rounds", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["bench_reader: --records must be even and >= 2, --rounds >= 1"] * 2


def test_the_ring_holds_the_records_with_their_headers():
    page = bench.os.sysconf("SC_PAGE_SIZE")
    assert bench.ring_bytes(1, 1080) == 16 * page  # at least 16 pages
    size = bench.ring_bytes(100_000, 1080)  # 1,088 bytes a record: 108.8 MB
    assert size == 128 << 20
    assert bench.ring_bytes(100_000, 1081) == 128 << 20  # 1,096: still fits
    assert bench.ring_bytes(123_362, 1080) == 256 << 20  # past 128 MiB


def _setup(c_reader):
    sizes = {"six": (104, 64), "named": (352, 64)}
    return bench.Setup(None, {}, None, None, {"six": 1, "named": 0}, sizes, "given", c_reader,
                       "" if c_reader else "libbpf's headers are not installed (Debian: "
                       "libbpf-dev)", None)


def _runs(keys):
    # Two rounds a reader: 1,000 of 1,000 records in 1 ms and 2 ms (a median of 750,000/s);
    # the text reader's second round read one short.
    runs = {}
    for name, _ in bench.SIZES:
        runs[name] = {k: [(1000, 1000, 0.001, 0.001),
                          (1000, 999 if k == "text" else 1000, 0.002, 0.001)] for k in keys}
    return runs


def test_the_table_says_what_is_missing_and_what_was_short():
    setup = _setup(None)
    rows = bench.summary(setup, _runs(["record", "record_walked", "text"]))
    out = bench.table(setup, rows)
    assert "| libbpf (C) | unavailable: libbpf's headers are not installed" in out
    assert "--record / " not in out  # no ratio without the C reader
    lines = out.splitlines()
    assert lines[0].startswith("| reader | 6 arguments (entry 104 B, exit 64 B): records/s")
    record = next(line for line in lines if line.startswith("| --record |"))
    # 750,000 records/s; (104 + 64) / 2 bytes a record: 63 MB/s.
    assert record == "| --record | 750,000 | 63 | 750,000 | 156 |"
    assert "(read 999 of 1,000)" in next(line for line in lines if line.startswith("| text |"))


def test_the_ratio_is_record_over_the_c_reader_round_by_round():
    setup = _setup(Path("ring_reader"))
    runs = _runs(["c", "c_null", "record", "record_walked", "text"])
    for name, _ in bench.SIZES:
        # 10 M/s, then 2 M/s; 10 M/s of its CPU time both times.
        runs[name]["c"] = [(1000, 1000, 0.0001, 0.0001), (1000, 1000, 0.0005, 0.0001)]
    out = bench.table(setup, bench.summary(setup, runs)).splitlines()
    # Rounds: 1 M/s over 10 M/s, 0.5 M/s over 2 M/s: a median of 0.175 (the medians' ratio,
    # 0.75 M/s over 6 M/s, would be 0.125).
    assert "| --record / libbpf (C) | 0.175x |  | 0.175x |  |" in out
    # --record: 1 M records a second of its CPU time both rounds.
    assert bench.cpu_figures(bench.summary(setup, runs)).endswith(
        "--record 1,000,000 / 1,000,000; --record, every header walked (no count: 32-bit) "
        "1,000,000 / 1,000,000; text 999,500 / 999,500; "
        "--record / libbpf (C) 0.100x / 0.100x")
    assert "| --record / libbpf (C), to /dev/null | 1.000x |  | 1.000x |  |" in out
