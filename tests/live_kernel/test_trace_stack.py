"""`btfgen trace --kernel --stack` in Debian's amd64 7.2 guest (issue 48, item 1): the kernel
stack of each call of shmem_file_llseek (a loop of lseek on a tmpfs file), taken by
bpf_get_stack and named by the guest's /proc/kallsyms, under the entry line in JSON, through
the kprobe path (one kprobe.session link, a pair of kprobe_multi links) and the BPF
trampoline (tracing_multi). Every call at the loop's offset has a stack, and it is the system
call's path: lseek's own functions, then do_syscall_64, outermost last."""

from __future__ import annotations

import json
import re

import pytest

from btfgen.trace import build as trace_build

from . import mass, python_guest, scenario
from .conftest import kernel_with_python

pytestmark = pytest.mark.live

LOOPS = 50
LOOP = (f"import os\nfd = os.open('/tmp/seek', os.O_RDWR | os.O_CREAT)\n"
        f"for _ in range({LOOPS}):\n"
        f"    os.lseek(fd, {scenario.SEEK_TO}, os.SEEK_SET)\n")
# Run in the guest on the JSON events: the loop's calls' stacks, as names, counted.
DIGEST = r"""import collections, json
stacks = collections.Counter()
for line in open('/tmp/out'):
    if not line.startswith('{'):
        continue
    e = json.loads(line)
    if e['kind'] == 'entry' and (e.get('args') or {}).get('offset') == SEEK_TO:
        names = [f['symbol'] or '?' for f in e.get('stack', {}).get('kstack', [])]
        stacks[' '.join(names)] += 1
print('digest', json.dumps(stacks))
""".replace("SEEK_TO", str(scenario.SEEK_TO))
RUNS = {"session": "attaching one kprobe.session link (as asked",
        "multi": "attaching kprobe_multi links",
        "tracing-multi": "attaching one fsession.multi link (as asked"}


def test_kernel_stacks_named_by_kallsyms(tmp_path):
    name = "unstable-amd64"
    k, btf = kernel_with_python(name)
    req = trace_build.Request(functions=["shmem_file_llseek"], kernel=True, btf=str(btf),
                              arch=k.target.arch, strings=False, stack=("kernel",))
    manifest = trace_build.build(req, tmp_path / "trace")
    assert manifest.stack == ["kernel"] and manifest.trampoline

    g, py = mass.guest_with(k, {"trace": tmp_path / "trace"})
    g.file("loop.py", LOOP.encode())
    g.file("digest.py", DIGEST.encode())
    libs = f"export LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    for run in RUNS:
        g.step(run, f"cd / && {libs}; {py.python} /trace/btfgen_trace.py --run /trace --json "
                    f"--attach {run} -- {py.python} /loop.py >/tmp/out 2>/tmp/err; rc=$?; "
                    f"cat /tmp/err; head -c 1500 /tmp/out; echo; {py.python} /digest.py; "
                    "exit $rc")
    boot = g.run(k, timeout=1200)
    for run, said in RUNS.items():
        text, rc = boot.section(run)
        assert rc == 0, f"{run}: the tool failed (exit {rc}):\n{text[-3000:]}"
        assert said in text, text[-3000:]
        got = re.search(r"^digest (.+)$", text, re.M)
        assert got, text[-3000:]
        stacks = json.loads(got.group(1))
        assert sum(stacks.values()) == LOOPS, f"{run}: {stacks}"
        for names, n in stacks.items():
            frames = names.split()
            # the system call's path, outermost last: lseek's functions (those not inlined)
            # under do_syscall_64
            lseek = [i for i, f in enumerate(frames)
                     if f in ("vfs_llseek", "ksys_lseek", "__x64_sys_lseek")]
            assert lseek and "do_syscall_64" in frames, f"{run}: {names}"
            assert max(lseek) < frames.index("do_syscall_64"), f"{run}: {names}"
