"""The whole kernel at once: every function the unstable-amd64 guest's ftrace can attach to that
its BTF has, less btfgen's deny list, traced by one `btfgen trace` run (7.2: one fsession.multi
link on the BPF trampoline, what it cannot take on a kprobe.session link beside it), with the
generic decoder still decoding a known call right: the trace tool scenario's lseek, through
shmem_file_llseek.

Every kernel function of a starting process is a firehose: a program's exec alone makes over a
million events, and the reader decodes a few thousand a second under TCG, so most are lost (and
said). The traced process therefore starts, sleeps while the reader drains a small ring buffer,
and only then seeks, and seeks again every few seconds (the same call): a loaded host's reader
may still be behind at the first seek (a CI run lost it: 556,805 records lost, the reader 3.6 s
behind when the process ended), and at least one of them is checked.

The floor and the sizes between are benchmarks/bench_mass_attach.py's; the fprobe comparison
over a thousand functions is test_fetcher*.py's."""

from __future__ import annotations

import json
import re

import pytest

from btfgen.trace import deny

from . import cache, mass, python_guest, scenario
from .conftest import kernel_with_python

pytestmark = pytest.mark.live

NAME = "unstable-amd64"
# Long enough for the reader to drain a 1 MiB ring (~9,000 events of ~112 bytes: six argument
# registers, or the return's two, and the heads) at TCG's pace: an 8 MiB ring of such events
# took it 14 s of the 15. Then SEEKS seeks, RETRY_S apart: each the same call, few kernel calls
# each, and the process otherwise asleep, so the reader catches up between them. (The process
# must not read the tool's output to learn whether a seek was printed: each read of a growing
# file is more calls to trace, and a run that did so kept the reader 9-30 s behind throughout.)
SLEEP_S = 15
SEEKS = 30
RETRY_S = 2
SEEKER = f"""import os, time
fd = os.open('/tmp/seek', os.O_RDWR | os.O_CREAT)
time.sleep({SLEEP_S})
for _ in range({SEEKS}):
    at = os.lseek(fd, {scenario.SEEK_TO}, os.SEEK_SET)
    time.sleep({RETRY_S})
print(at)
"""


def test_whole_kernel_attached_with_the_generic_decoder(tmp_path):
    k, btf = kernel_with_python(NAME)
    attachable = mass.attachable(k, btf)
    candidates = deny.split(attachable, deny.patterns()).kept
    assert "lookup_nulls_elem_raw" in attachable and "lookup_nulls_elem_raw" not in candidates
    functions = mass.build_trace(btf, k.target.arch, candidates, tmp_path / "trace")
    # Only what the build must leave out (static functions of one name, prototypes differing).
    assert len(functions) > 0.97 * len(candidates) > 20000, (len(functions), len(candidates))
    assert "shmem_file_llseek" in functions

    g, py = mass.guest_with(k, {"trace": tmp_path / "trace"})
    g.file("seek.py", SEEKER.encode())
    g.step("whole", f"cd / && export LD_LIBRARY_PATH={python_guest.library_path(k.target)}; "
                    f"{py.python} /trace/btfgen_trace.py --run /trace --timings "
                    "--ring-size 1 -- "
                    f"{py.python} /seek.py >/tmp/out 2>/tmp/err; rc=$?; "
                    "cat /tmp/err; "
                    f"grep -m3 '^shmem_file_llseek(.*offset={scenario.SEEK_TO},' /tmp/out; "
                    f"grep -m3 '^shmem_file_llseek -> {scenario.SEEK_TO}' /tmp/out; "
                    f"grep -m1 -x '{scenario.SEEK_TO}' /tmp/out; "
                    "echo \"lines $(wc -l </tmp/out)\"; exit $rc")
    boot = g.run(k, timeout=1800)  # 1,363 s in all once under a host load of 20
    text, rc = boot.section("whole")
    # Kept for reading (docs/live-kernels.md's figures come from here).
    cache.write_atomic(cache.ROOT / "results" / f"mass-attach-{NAME}.txt",
                       f"{k.release}, {len(functions)} functions, boot {boot.seconds:.1f}s\n"
                       f"{text}".encode())
    assert rc == 0, f"the tool failed (exit {rc}):\n{text[-3000:]}"
    # 7.2 has tracing_multi: auto puts the whole kernel on one fsession.multi link, what the
    # build knows the trampoline cannot take (a struct returned, btf_id_deny, noreturn_deny,
    # ...) on one kprobe.session link beside it, and the kernel refusing neither link.
    manifest = json.loads((tmp_path / "trace" / "trace.json").read_text())
    refused = manifest["trampoline"]["refused"]
    names = manifest["functions"]
    assert {"do_exit", "___migrate_enable"} <= {names[int(i)] for i in refused}, refused
    assert len(names) - len(refused) > 0.97 * len(names), len(refused)
    assert (f"btfgen_trace: attaching one fsession.multi link (the BPF trampoline: the "
            f"kernel's cheapest; {len(refused)} functions the trampoline cannot take") in text, \
        text[-3000:]
    assert "on one kprobe.session link)" in text, text[-3000:]
    assert "was refused" not in text, text[-3000:]
    # Every function of the directory attached: none skipped as untraceable here.
    assert "not traceable here" not in text, text[-3000:]
    call = re.compile(rf"^shmem_file_llseek\(file=0x[0-9a-f]+, offset={scenario.SEEK_TO}, "
                      r"whence=0\)$", re.M)
    assert call.search(text), text[-3000:]
    # Its return, with the call's duration unless the run said it stopped pairing exits with
    # entries (records lost faster than it could note the threads losing them).
    unpaired = "exits are not paired with entries from here on (no durations)" in text
    ret = rf"^shmem_file_llseek -> {scenario.SEEK_TO}" + ("$" if unpaired else r" \(")
    assert re.search(ret, text, re.M), text[-3000:]
    assert re.search(rf"^{scenario.SEEK_TO}$", text, re.M), text[-3000:]  # what lseek returned
    # Losses are counted and said, never silent.
    assert re.search(r"^btfgen_trace: \d+ records lost \(ring buffer full\)$", text, re.M), text
    lines = int(re.search(r"^lines (\d+)$", text, re.M).group(1))
    assert lines > 1000, text[-3000:]  # the process's own start, decoded
    t = mass.timings(text)
    assert {"run: attach", "run: detach", "run: spec map fill"} <= set(t), text[-3000:]
