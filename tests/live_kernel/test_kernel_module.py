"""btfgen's kernel C in the kernel's own fprobe callbacks (examples/fprobe): the module built from
the generated header for the exact kernel a guest boots (kbuild.py: the kernel's compiler and
headers, -Werror), loaded, attached by one fprobe to every `vfs_*` function of its table,
recorded by its user-space reader in btfgen's recording format and decoded on the host by
`btfgen decode`: the values `dd` passed (a count of 12,345 bytes written three times, 4,321
read five times) and what each call returned are in the records, entry and exit; nothing is
lost; the module unloads while a loop keeps calling traced functions, and leaves nothing."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import btfgen
from btfgen.btf.reader import open_btf

from . import fetcher, kbuild, modules, python_guest
from .conftest import kernel_with_python, unavailable

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fprobe"
COMMON = ROOT / "examples" / "common"  # the ring and proc files, shared with examples/kprobe
GUESTS = ["unstable-amd64", "unstable-arm64"]
WRITE, WRITES = 12345, 3
READ, READS = 4321, 5


def _module(name: str, btf_path: Path, arch: str, gen: Path) -> Path:
    names = fetcher.select(open_btf(str(btf_path)).funcs(), arch)
    t = btfgen.open(str(btf_path), arch=arch, ctx="ftrace_regs")
    files = t.generate(names, ("kernel", "python"))
    gen.mkdir(parents=True)
    for n, text in files.items():
        (gen / n).write_text(text)
    sources = modules.sources("fprobe", files["btfgen.kernel.h"].encode())
    try:
        return kbuild.build_module(name, sources, "btfgen_fprobe", extra_cflags=("-Werror",))
    except kbuild.debian.PackageError as e:
        unavailable(f"{name}: the module's toolchain cannot be had: {e}")


@pytest.mark.parametrize("name", GUESTS)
def test_fprobe_module_decodes_what_dd_passed(name, tmp_path):
    k, btf_path = kernel_with_python(name)
    arch = k.target.arch
    d = tmp_path / "guest"
    ko = _module(name, btf_path, arch, d / "gen")
    shutil.copytree(ROOT / "btfgen" / "probe", d / "btfgen_probe",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(EXAMPLE / "btfgen_fprobe_record.py", d / "btfgen_fprobe_record.py")
    g, py = python_guest.trace_guest(k.target, d)
    g.file("btfgen_fprobe.ko", ko.read_bytes())
    env = f"LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    g.step("load", "insmod /btfgen_fprobe.ko filter='vfs_*' && grep btfgen_fprobe /proc/modules "
                   "|| { dmesg | tail -20; exit 1; }")
    # The reader for a fixed time, the workload once it has started (Python under TCG).
    g.step("trace", f"mknod /dev/zero c 1 5; cd /trace && {env} timeout 300 {py.python} "
                    "btfgen_fprobe_record.py gen /tmp/rec.btfrec --seconds 15 & R=$!; sleep 6; "
                    f"dd if=/dev/zero of=/tmp/x bs={WRITE} count={WRITES} 2>/dev/null; "
                    f"dd if=/tmp/x of=/dev/null bs={READ} count={READS} 2>/dev/null; "
                    "wait $R; rc=$?; cat /proc/btfgen_fprobe_stats; exit $rc")
    # Unloaded while a loop keeps calling traced functions (vfs_read of /proc/version), and
    # with a call in flight: cat opening a FIFO blocks inside vfs_open (a traced function,
    # entered under the probe) until a writer comes, after the module is gone.
    g.step("unload", "mkfifo /tmp/fifo; (cat /tmp/fifo >/dev/null) & F=$!; "
                     "(while :; do cat /proc/version >/dev/null; done) & L=$!; sleep 1; "
                     "rmmod btfgen_fprobe; rc=$?; sleep 1; kill $L; wait $L 2>/dev/null; "
                     "echo done > /tmp/fifo; wait $F; "
                     "grep -c btfgen_fprobe /proc/modules; ls /proc | grep -c btfgen; "
                     "dmesg | grep -c -E 'Oops|BUG|WARNING|Call Trace'; "
                     "dmesg | grep 'btfgen_fprobe:'; exit $rc")
    g.step("out", "gzip -c /tmp/rec.btfrec | base64")  # the console is slow: compressed
    boot = g.run(k, timeout=900)
    out, rc = boot.section("load")
    assert rc == 0, out
    out, rc = boot.section("trace")
    assert rc == 0, out
    stats = dict(line.split() for line in out.splitlines()
                 if line.split()[:1] and line.split()[0] in
                 ("events", "lost", "missed", "unknown", "functions"))
    assert int(stats["lost"]) == 0 and int(stats["events"]) > 0, out
    out, rc = boot.section("unload")
    assert rc == 0, out
    lines = out.splitlines()
    # no module, no proc file, nothing the kernel complained of
    assert [x.strip() for x in lines[:3]] == ["0", "0", "0"], out
    assert "events" in out, out
    text, rc = boot.section("out")
    assert rc == 0
    rec = tmp_path / "rec.btfrec"
    rec.write_bytes(gzip.decompress(base64.b64decode("".join(text.split()))))
    p = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "jsonl", str(rec)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    events = [json.loads(line) for line in p.stdout.splitlines()]
    calls = fetcher.calls(events)
    dd = {c.tid for c in calls if c.function == "vfs_write" and c.args
          and c.args.get("count") == WRITE}
    # dd's writes of the data (its summary line, to /dev/null, is a write of its own)
    writes = [c for c in calls if c.function == "vfs_write" and c.tid in dd
              and c.args["count"] == WRITE]
    assert [c.ret for c in writes] == [WRITE] * WRITES, writes
    reads = [c for c in calls if c.function == "vfs_read" and c.args
             and c.args.get("count") == READ]
    assert [c.ret for c in reads] == [READ] * READS, reads
    # every exit had its entry (one thread's calls in order, nothing lost)
    assert all(c.args is not None for c in calls if c.tid in dd), calls
