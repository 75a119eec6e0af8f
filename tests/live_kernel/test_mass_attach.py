"""The whole kernel at once: every function the unstable-amd64 guest's ftrace can attach to that
its BTF has, less btfgen's deny list, traced by one `btfgen trace` run (one kprobe.multi and
one kretprobe.multi link), with the generic decoder still decoding a known call right (the
trace tool scenario's lseek through shmem_file_llseek) and nothing lost.

The floor and the sizes between are benchmarks/bench_mass_attach.py's; the fprobe comparison
over a thousand functions is test_fetcher*.py's."""

from __future__ import annotations

import re

import pytest

from btfgen.trace import deny

from . import build, mass, python_guest, scenario
from .conftest import btf_for, kernel_for

pytestmark = pytest.mark.live

NAME = "unstable-amd64"
EMPTY_BUNDLE = b"BTFGBNDL" + bytes(16)  # the loader only makes the calls


def test_whole_kernel_attached_with_the_generic_decoder(tmp_path):
    k = kernel_for(NAME)
    btf = btf_for(k)
    try:
        python_guest.files(k.target)
    except Exception as e:  # noqa: BLE001 - the packages' own errors, as trace_guest says
        pytest.skip(f"{NAME}: Debian's python3/libbpf1 cannot be had: {e}")
    attachable = mass.attachable(k, btf)
    candidates = deny.split(attachable, deny.patterns()).kept
    assert "lookup_nulls_elem_raw" in attachable and "lookup_nulls_elem_raw" not in candidates
    functions = mass.build_trace(btf, k.target.arch, candidates, tmp_path / "trace")
    # Only what the build must leave out (static functions of one name, prototypes differing).
    assert len(functions) > 0.97 * len(candidates) > 20000, (len(functions), len(candidates))
    assert "shmem_file_llseek" in functions

    g, py = mass.guest_with(k, {"trace": tmp_path / "trace"})
    g.file("loader", build.loader(k.target).read_bytes(), 0o755)
    g.file("empty.bundle", EMPTY_BUNDLE)
    g.step("whole", f"cd / && export LD_LIBRARY_PATH={python_guest.library_path(k.target)}; "
                    f"{py.python} /trace/btfgen_trace.py --run /trace --timings -- /loader "
                    f"/empty.bundle lseek {scenario.SEEK_TO:#x} >/tmp/out 2>/tmp/err; rc=$?; "
                    "cat /tmp/err; grep -m5 '^shmem_file_llseek' /tmp/out; "
                    "echo \"lines $(wc -l </tmp/out)\"; exit $rc")
    boot = g.run(k, timeout=900)
    text, rc = boot.section("whole")
    assert rc == 0, f"the tool failed (exit {rc}):\n{text[-3000:]}"
    assert "btfgen_trace: attaching kprobe_multi links" in text, text[-3000:]
    # Every function of the directory attached: none skipped as untraceable here.
    assert "not traceable here" not in text, text[-3000:]
    call = re.compile(rf"^shmem_file_llseek\(file=0x[0-9a-f]+, offset={scenario.SEEK_TO}, "
                      r"whence=0\)$", re.M)
    assert call.search(text), text[-3000:]
    assert re.search(r"^shmem_file_llseek -> \d+ \(", text, re.M), text[-3000:]
    assert re.search(r"^btfgen_trace: 0 records lost \(ring buffer full\)$", text, re.M), text
    lines = int(re.search(r"^lines (\d+)$", text, re.M).group(1))
    assert lines > 100, text[-3000:]  # the loader's own exec and calls, decoded
    t = mass.timings(text)
    assert {"run: attach", "run: detach", "run: spec map fill"} <= set(t), text[-3000:]
