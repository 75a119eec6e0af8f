"""benchmarks/bench_sleepable.py: a short run prints a row for each attach mode this kernel takes
sleepable uprobe programs in, sleepable and not (the script refuses a run whose line does not
say the programs it asked for), with the BPF programs' own time."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.abi.arches import host_bpf_syscall
from btfgen.probe import features

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_sleepable.py"


def test_short_run_has_both_rows_of_each_mode(tmp_path):
    if reason := features.bpf_programs().why:
        pytest.skip(f"live: {reason}")
    if not shutil.which("gcc") or not (shutil.which("clang-19") or shutil.which("clang")):
        pytest.skip("no gcc or clang")
    if features.sleepable_uprobes(host_bpf_syscall(), "single").why:
        pytest.skip("no sleepable uprobe programs here")
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--calls", "300", "--rounds", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    modes = {r["mode"] for r in rows}
    assert "single" in modes, rows
    assert sorted((r["mode"], r["sleepable"]) for r in rows) == sorted(
        (m, s) for m in modes for s in (True, False)), rows
    for r in rows:  # each run's own programs, each having run on every call
        assert r["bpf_ns_a_run"] and all(ns > 0 for ns in r["bpf_ns_a_run"].values()), r
