"""Recordings (`btfgen trace --record`): written and read back without BPF, they print what the
live tracer prints; a truncated or damaged file is refused in one line, whatever the damage."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btfgen.decoder.runtime import Function
from btfgen.probe import output, recording
from btfgen.recordings import replay

ARCHES = ["x86_64", "s390x", "i386", "arm64"]  # both byte orders, both pointer sizes
MODULES = {a: synth.module(a) for a in ARCHES}
EXAMPLES = int(os.environ.get("BTFGEN_FUZZ_EXAMPLES", "150"))


def _live(mod, evs, **kw) -> str:
    out = io.StringIO()
    p = output.Printer([Function(d) for d in synth.descriptors(mod)], mod.BYTE_ORDER, out,
                       flush=False, **kw)
    for e in evs:
        p.event(e)
    return out.getvalue()


def _decoded(path, **kw) -> str:
    out = io.StringIO()
    replay.print_recording(str(path), out, **kw)
    return out.getvalue()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=st.sampled_from(ARCHES), n=st.integers(1, 300), seed=st.integers(0, 2**32),
       batch=st.sampled_from([None, 1, 7, 64]), failed=st.sampled_from([0.0, 0.3]))
def test_decoded_file_prints_what_the_tracer_prints(tmp_path, arch, n, seed, batch, failed):
    mod = MODULES[arch]
    evs = synth.events(synth.descriptors(mod), n, seed, mod.BYTE_ORDER, failed)
    path = tmp_path / "r.btfrec"
    synth.write(path, mod, evs, lost=seed % 5, batch=batch)
    for kw in ({}, {"as_json": True}, {"errors": True}, {"errors": True, "as_json": True}):
        assert _decoded(path, **kw) == _live(mod, evs, **kw)
    with recording.Reader(str(path)) as r:
        assert sum(len(b.order) for b in r.batches()) == n
        assert (r.events, r.lost) == (n, seed % 5)
        assert r.header["kernel_release"] == "synthetic" and r.header["arch"] == mod.ARCH


def test_an_exit_after_its_threads_loss_is_not_paired_across_it():
    """Call 1's exit and call 2's entry were lost to a full ring buffer: the thread's next
    record (call 2's exit) carries EVENT_THREAD_LOST, and is shown without a duration instead
    of one measured from call 1's entry; the other thread's open call is untouched, and a loss
    of an unknown thread forgets every thread's."""
    import random

    from btfgen.probe import spec_format

    mod = MODULES["x86_64"]
    d = synth.descriptors(mod)[0]
    rng = random.Random(1)

    def ev(kind, ns, tid, flags=0):
        return synth.event(d, kind, rng, ns, tid, 0, 0, mod.BYTE_ORDER, flags)

    lost = spec_format.EVENT_THREAD_LOST
    evs = [ev(0, 1000, 7), ev(0, 1500, 8), ev(1, 9000, 7, lost), ev(1, 9500, 8)]
    lines = _live(mod, evs).splitlines()
    assert not lines[2].endswith(" us)") and lines[3].endswith("(8.000 us)"), lines
    unknown = spec_format.EVENT_SOME_LOST
    evs = [ev(0, 1000, 7), ev(0, 1500, 8), ev(0, 2000, 9, unknown), ev(1, 9500, 8, unknown)]
    lines = _live(mod, evs).splitlines()
    assert not lines[3].endswith(" us)"), lines


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    mod = MODULES["s390x"]
    path = tmp_path_factory.mktemp("rec") / "r.btfrec"
    synth.write(path, mod, synth.events(synth.descriptors(mod), 40, 1, mod.BYTE_ORDER),
                lost=3, batch=16)
    return path.read_bytes()


def _refused(tmp_path, data: bytes) -> str:
    path = tmp_path / "bad.btfrec"
    path.write_bytes(data)
    with pytest.raises(recording.RecordError) as e:
        replay.print_recording(str(path), io.StringIO())
    return str(e.value)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10**6))
def test_truncated_anywhere_is_refused(tmp_path, good, cut):
    cut %= len(good)
    message = _refused(tmp_path, good[:cut])
    assert "\n" not in message


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(0, 10**6), xor=st.integers(1, 255))
def test_any_changed_byte_is_refused(tmp_path, good, at, xor):
    at %= len(good)
    data = bytearray(good)
    data[at] ^= xor
    assert "\n" not in _refused(tmp_path, bytes(data))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=200), keep=st.integers(0, 200))
def test_garbage_after_a_good_prefix_is_refused(tmp_path, good, junk, keep):
    assert "\n" not in _refused(tmp_path, good[:keep] + junk)


@pytest.mark.parametrize("damage, says", [
    (lambda g: g[:-1], "truncated"),
    (lambda g: g[:len(g) // 2], "truncated"),
    (lambda g: b"", "not a btfgen recording"),
    (lambda g: b"hello world\n", "not a btfgen recording"),
    (lambda g: g[:8] + (2).to_bytes(4, "little") + g[12:], "recording version 2"),
    (lambda g: g + b"x", "data after the end"),
])
def test_cli_one_line_exit_2(tmp_path, good, damage, says):
    path = tmp_path / "bad.btfrec"
    path.write_bytes(damage(good))
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout == ""  # checked whole before the first line
    assert proc.stderr.startswith("btfgen: error: ") and says in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_cli_decodes(tmp_path, good):
    path = tmp_path / "r.btfrec"
    path.write_bytes(good)
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == _decoded(path)
    assert proc.stdout.count("\n") == 40
    assert proc.stderr == ("btfgen decode: 40 events recorded on s390x synthetic; 3 records "
                           "lost (ring buffer full)\n")
