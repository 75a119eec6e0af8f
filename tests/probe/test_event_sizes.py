"""Events the size of what they hold: for real traced calls (uprobes on this machine), the bytes
the BPF side sends of each event are the bytes spec_format.event_size gives from the function's
descriptor, for calls of several shapes, in every attach mode the kernel has, from a thread with
its own scratch slot and from one past the slots (decoded in a slot given back after).
Root, BPF, gcc and pahole, else skipped with the reason."""

from __future__ import annotations

import io
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from btfgen.abi.arches import host_bpf_syscall
from btfgen.probe import bpf_object, features, manifest, run, spec_format, tracefs
from btfgen.trace import command

PROGRAM = r"""
#include <pthread.h>
#include <string.h>

struct big { long v[5]; };
volatile long sink;

__attribute__((noinline)) void nothing(void) { sink++; }
__attribute__((noinline)) long six(long a, int b, short c, char d, long e, unsigned long f)
{ return a + b + c + d + e + (long)f; }
__attribute__((noinline)) long by_value(struct big b, int k) { return b.v[0] + b.v[4] + k; }
__attribute__((noinline)) struct big make_big(int a)
{ struct big b = { { a, a + 1, a + 2, a + 3, a + 4 } }; return b; }
__attribute__((noinline)) long named(const char *s, const char *t)
{ return (long)strlen(s) + (long)strlen(t); }

static const char text[] = "a string the capture reads";

static void calls(void)
{
	struct big b = { { 1, 2, 3, 4, 5 } };

	sink += *(volatile const char *)text; /* its page in: a probe cannot fault it in */
	nothing();
	sink += six(1, -2, 3, 4, 5, 6);
	sink += by_value(b, 9);
	sink += make_big(10).v[2];
	sink += named(text, text + sizeof(text) - 1);
}

static void *worker(void *arg) { calls(); return arg; }

int main(void)
{
	pthread_t t;

	calls();
	if (pthread_create(&t, 0, worker, 0) || pthread_join(t, 0))
		return 1;
	return 0;
}
"""
FUNCTIONS = ["nothing", "six", "by_value", "make_big", "named"]
# Event head (40) and record head (16): what every event has before its data.
HEADS = spec_format.size_of(spec_format.EVENT_HEAD) + spec_format.size_of(spec_format.RECORD_HEAD)


def _reason() -> str | None:
    if platform.machine() != "x86_64":
        return f"the program is built for x86_64, this is {platform.machine()}"
    missing = [t for t in ("gcc", "pahole") if shutil.which(t) is None]
    return f"not installed: {', '.join(missing)}" if missing else features.bpf_programs().why


@pytest.fixture(scope="module")
def directory(tmp_path_factory) -> Path:
    reason = _reason()
    if reason:
        pytest.skip(f"no live uprobes: {reason}")
    tracefs.mount_tracefs()
    tmp = tmp_path_factory.mktemp("sizes")
    (tmp / "shapes.c").write_text(PROGRAM)
    exe = tmp / "shapes"
    proc = subprocess.run(["gcc", "-O1", "-g", "-pthread", str(tmp / "shapes.c"), "-o",
                           str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = tmp / "dir"
    assert command.main(["--build", str(out), str(exe), *FUNCTIONS]) == 0
    return out


def _modes() -> list[str]:
    modes = ["single"]
    if features.uprobe_multi_links(host_bpf_syscall()):
        modes.append("multi")
    if features.session_links(host_bpf_syscall(), kernel=False):
        modes.append("session")
    return modes


def _sent(directory: Path, mode: str, monkeypatch, slots: int | None) -> tuple[list, str]:
    """Trace one run of the program in this process: ([(btf_id, kind, bytes sent, tid)], the
    printed lines). `slots`: the user build's per-thread scratch slots, else as built."""
    seen = []

    real_reader = run.reader

    def measured_reader(fd, sink, committed_fd=None):
        def measured(span):
            for raw in span:
                tid = int.from_bytes(raw[4:8], "little")
                btf_id, kind = (int.from_bytes(raw[at:at + 4], "little") for at in (40, 44))
                seen.append((btf_id, kind, len(raw), tid))
            sink(span)

        return real_reader(fd, measured, committed_fd)

    monkeypatch.setattr(run, "reader", measured_reader)
    if slots is not None:
        load = bpf_object.BpfObject.load

        def fewer_slots(self):
            self.set_max_entries("scratch", slots)
            load(self)

        monkeypatch.setattr(bpf_object.BpfObject, "load", fewer_slots)
    out = io.StringIO()
    assert run.run(directory, run.Options([], attach=mode), out=out) == 0
    return seen, out.getvalue()


@pytest.mark.parametrize("slots", [None, 1], ids=["a-slot-a-thread", "past-the-slots"])
@pytest.mark.parametrize("mode", _modes())
def test_python_says_the_bytes_bpf_sends(directory, mode, slots, monkeypatch, capfd):
    seen, printed = _sent(directory, mode, monkeypatch, slots)
    err = capfd.readouterr().err
    assert err.endswith("btfgen trace: 0 records lost (ring buffer full)\n"), err
    decoders = manifest.load_decoders(directory, manifest.load_manifest(directory))
    descs = {d.btf_id: d for d in (decoders._descriptor(n)[0] for n in decoders.names())}
    # Every function's entry and exit, from two threads.
    assert sorted({(descs[b].name, k) for b, k, _, _ in seen}) == sorted(
        (f, k) for f in FUNCTIONS for k in (0, 1))
    assert len({tid for *_, tid in seen}) == 2
    for btf_id, kind, sent, _ in seen:
        assert sent == spec_format.event_size(descs[btf_id], kind), (descs[btf_id].name, kind)
    sizes = {(descs[b].name, k): n - HEADS for b, k, n, _ in seen}
    # The shapes as this ABI (x86_64) lays them out: six arguments, a 40-byte struct by value,
    # a struct returned through memory, two strings after their pointers; no argument at all
    # and a void return still send the heads and whatever the decoder that ran wrote.
    assert sizes["six", 0] == 48 and sizes["by_value", 0] >= 48
    assert sizes["make_big", 1] >= 40 and sizes["named", 0] > 256
    assert max(sizes.values()) < spec_format.DATA_SIZE
    assert printed.count("named(s=\"a string the capture reads\", t=\"\")") == 2, printed
    assert printed.count("make_big -> {v=[10, 11, 12, 13, 14]}") == 2, printed


@pytest.mark.parametrize("mode", _modes())
def test_no_scratch_is_its_own_loss(directory, mode, monkeypatch, capfd):
    """The user build's scratch slots and spill slots all taken (by threads that are not the
    program's, put there before it runs): each of its events is lost for want of a scratch,
    counted as that (the BPF side's LOST_NO_SCRATCH, losses.NO_SCRATCH) and said as that, not
    as a full ring buffer."""
    from btfgen.probe import losses, ringspan

    load = bpf_object.BpfObject.load

    def taken(self):
        self.set_max_entries("scratch", 1)
        self.set_max_entries("spill", 1)
        load(self)
        info, size = ringspan._MapInfo(), ringspan.ctypes.c_uint32(
            ringspan.ctypes.sizeof(ringspan._MapInfo))
        for at, name in enumerate(("scratch", "spill")):
            lib = ringspan.libbpf()
            assert not lib.bpf_obj_get_info_by_fd(self.map_fd(name), ringspan.ctypes.byref(info),
                                                  ringspan.ctypes.byref(size))
            self.update(name, (0x7FFFFFF0 + at).to_bytes(4, "little"), bytes(info.value_size))

    monkeypatch.setattr(bpf_object.BpfObject, "load", taken)
    out = io.StringIO()
    assert run.run(directory, run.Options([], attach=mode), out=out) == 0
    err = capfd.readouterr().err
    events = 2 * len(FUNCTIONS) * 2  # two threads, each function's entry and exit
    assert out.getvalue() == ""
    assert err.endswith(f"btfgen trace: {events} records lost (no scratch: more threads in the "
                        "traced functions at once than the BPF side has slots for)\n"
                        "btfgen trace: 0 records lost (ring buffer full)\n"), err
    assert (losses.RING_FULL, losses.NO_SCRATCH) == (0, 1)
    source = (Path(run.__file__).parent.parent / "trace" / "trace.bpf.c").read_text()
    assert "#define LOST_RING_FULL 0\n" in source and "#define LOST_NO_SCRATCH 1\n" in source
