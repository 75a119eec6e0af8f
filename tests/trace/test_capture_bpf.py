"""Capture ops in the generic decoder, in the kernel variant (bpf_probe_read_kernel(_str)), a
buffer's too:
benchmarks/bench_capture.py's program loaded (the verifier accepts the capture loop) and run
under BPF_PROG_TEST_RUN on kernel memory, its record decoded by the generated module. Needs root
and BPF on an x86_64 host, else skipped."""

from __future__ import annotations

import importlib.util
import platform
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "codegen"))
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def bench():
    from bpfrun import bpf_permitted

    reason = bpf_permitted()
    if reason or platform.machine() != "x86_64":
        pytest.skip(reason or "not an x86_64 machine")
    spec = importlib.util.spec_from_file_location("bench_capture",
                                                  ROOT / "benchmarks" / "bench_capture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(bench, tmp_path, program: str, function: str, string_size: int = 64):
    from bench_generic import ns_per_run
    from bpfrun import BpfObject

    obj_path, specs, ns = bench.build(tmp_path, string_size)
    with BpfObject(obj_path) as obj:
        obj.fill_array("specs", specs)
        _, ret = ns_per_run(obj, program, 1)
        assert ret == 0
        rec = obj.global_data(".data.rec")
    return ns["function"](function).decode_captures(rec)


@pytest.mark.parametrize("program", ["generic_all", "interpreter_all"])
def test_every_capture_kind_in_kernel_memory(bench, tmp_path, program):
    """The straight-line decoder (its first and last capture ops inline, the hops through the
    capture subprogram) and the ops interpreter (every op through the subprogram)."""
    caps = _run(bench, tmp_path, program, "ft")
    assert caps["s"] == bench.TEXT[:64] and caps["s"].truncated and caps["s"].space == "kernel"
    whole = caps["*p"]
    assert (whole["a"], whole["lo"], whole["mid"], whole["name"]) == (1, 6, -200, "head")
    assert whole["c"].name == "BLUE" and whole["label"] and whole["next"]
    assert caps["p->label"] == "a label" and not caps["p->label"].truncated
    assert caps["p->next->name"] == "tail"
    assert caps["p->next->next->a"].reason == "p->next->next is NULL"
    assert caps["p->lo"] == 6 and caps["p->c"].name == "BLUE"


def test_a_string_that_fits_is_not_truncated(bench, tmp_path):
    caps = _run(bench, tmp_path, "generic_capture", "fs", string_size=100)
    assert caps["s"] == bench.TEXT and not caps["s"].truncated


@pytest.mark.parametrize("program", ["generic_buffer", "interpreter_buffer"])
def test_a_buffer_of_an_arguments_length(bench, tmp_path, program):
    """`fb: buf[n]`, n 256: the BUF op reads the length from the record, then that many
    bytes (the benchmark's figure is of this program), inline and on the interpreter."""
    caps = _run(bench, tmp_path, program, "fb")
    got = caps["buf[n]"]
    assert bytes(got) == bench.TEXT.encode() + bytes(bench.BUFFER - len(bench.TEXT))
    assert got.length == bench.BUFFER and not got.truncated and got.space == "kernel"
