"""`btfgen trace --kernel --module` in Debian's amd64 7.2 guest: a module's function (binfmt_misc's
bm_status_read, the module from Debian's own package, insmod'ed) beside a vmlinux one
(shmem_file_llseek), traced through the kprobe path (one kprobe.session link, by name), through
the BPF trampoline (a tracing_multi link per BTF object: the kernel's, and the module's, its
program loaded against the module's BTF), and one fsession program a function, each call's
values the same in every mode and as the loop made them.

The loop reads binfmt_misc's status file LOOPS times with pread at offset 0 (each read is one
bm_status_read of NBYTES, returning "enabled\\n", 8 bytes) and seeks a tmpfs file to SEEK_TO
LOOPS times; nothing else in the guest reads that file or seeks there."""

from __future__ import annotations

import json
import re

import pytest

from btfgen.trace import build as trace_build

from . import kernel as kernels
from . import mass, python_guest, scenario
from .conftest import btf_for, kernel_for

pytestmark = pytest.mark.live

LOOPS = 200
NBYTES = 100
STATUS = "/proc/sys/fs/binfmt_misc/status"
LOOP = (f"import os\nst = os.open('{STATUS}', os.O_RDONLY)\n"
        f"fd = os.open('/tmp/seek', os.O_RDWR | os.O_CREAT)\n"
        f"for _ in range({LOOPS}):\n"
        f"    os.pread(st, {NBYTES}, 0)\n"
        f"    os.lseek(fd, {scenario.SEEK_TO}, os.SEEK_SET)\n")
# Run in the guest on the JSON events: what each function's calls were, as a few lines.
DIGEST = r"""import collections, json, sys
calls = collections.defaultdict(collections.Counter)
for line in open('/tmp/out'):
    if not line.startswith('{'):
        continue
    e = json.loads(line)
    f, args = e['function'], e.get('args') or {}
    if e['kind'] == 'entry' and f == 'bm_status_read':
        calls[f]['nbytes=' + str(args.get('nbytes'))] += 1
    elif e['kind'] == 'entry' and f == 'shmem_file_llseek' and args.get('offset') == SEEK_TO:
        calls[f]['offset=%d whence=%s' % (args['offset'], args.get('whence'))] += 1
    elif e['kind'] == 'exit' and (f == 'bm_status_read' or
                                  (f == 'shmem_file_llseek' and e['return'] == SEEK_TO)):
        calls[f]['return=' + str(e['return'])] += 1
print('digest', json.dumps({f: dict(sorted(c.items())) for f, c in sorted(calls.items())}))
""".replace("SEEK_TO", str(scenario.SEEK_TO))
RUNS = {"kprobe": ("session", "attaching one kprobe.session link (as asked"),
        "tramp": ("tracing-multi", "attaching one fsession.multi link (as asked"),
        "fsession": ("fsession", "attaching one fsession program per function (2) (as asked")}


def test_module_functions_on_a_link_of_their_own(tmp_path):
    name = "unstable-amd64"
    k = kernel_for(name)
    btf = btf_for(k)
    try:
        python_guest.files(k.target)
        ko = kernels.module(k, "fs/binfmt_misc")
    except Exception as e:  # noqa: BLE001 - the packages' own errors, as trace_guest says
        pytest.skip(f"{name}: Debian's python3/libbpf1/modules cannot be had: {e}")
    req = trace_build.Request(functions=["bm_status_read", "shmem_file_llseek"], kernel=True,
                              btf=str(btf), module="binfmt_misc", module_btf=str(ko),
                              arch=k.target.arch, strings=False)
    manifest = trace_build.build(req, tmp_path / "trace")
    assert manifest.btf_module.name == "binfmt_misc"
    first = manifest.btf_module.first_id
    ids = dict(zip(manifest.functions, manifest.btf_ids))
    assert ids["bm_status_read"] >= first > ids["shmem_file_llseek"], (ids, first)
    assert manifest.trampoline and not manifest.trampoline.refused

    g, py = mass.guest_with(k, {"trace": tmp_path / "trace"})
    g.file("binfmt_misc.ko", ko.read_bytes())
    g.file("loop.py", LOOP.encode())
    g.file("digest.py", DIGEST.encode())
    libs = f"export LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    g.step("insmod", f"insmod /binfmt_misc.ko && mount -t binfmt_misc binfmt_misc "
                     f"/proc/sys/fs/binfmt_misc && cat {STATUS} && ls /sys/kernel/btf/binfmt_misc")
    for run, (attach, _) in RUNS.items():
        g.step(run, f"cd / && {libs}; {py.python} /trace/btfgen_trace.py --run /trace --json "
                    f"--attach {attach} -- {py.python} /loop.py >/tmp/out 2>/tmp/err; rc=$?; "
                    f"cat /tmp/err; {py.python} /digest.py; exit $rc")
    boot = g.run(k, timeout=1200)
    text, rc = boot.section("insmod")
    assert rc == 0 and "enabled" in text, text[-3000:]
    want = {"bm_status_read": {f"nbytes={NBYTES}": LOOPS, "return=8": LOOPS},
            "shmem_file_llseek": {f"offset={scenario.SEEK_TO} whence=0": LOOPS,
                                  f"return={scenario.SEEK_TO}": LOOPS}}
    for run, (attach, said) in RUNS.items():
        text, rc = boot.section(run)
        assert rc == 0, f"{run}: the tool failed (exit {rc}):\n{text[-3000:]}"
        assert said in text, text[-3000:]
        if attach == "tracing-multi":
            # the module's function on a link of its own, loaded against its BTF object
            assert ("module binfmt_misc: its 1 functions on their own fsession.multi link"
                    in text), text[-3000:]
        got = re.search(r"^digest (.+)$", text, re.M)
        assert got, text[-3000:]
        assert json.loads(got.group(1)) == want, f"{run}:\n{text[-3000:]}"
