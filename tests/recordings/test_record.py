"""Recordings (`btfgen trace --record`): written and read back without BPF, they print what the
live tracer prints; a truncated or damaged file is refused in one line, whatever the damage."""

from __future__ import annotations

import contextlib
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
from btfgen.recordings.reader import Reader

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
    with Reader(str(path)) as r:
        assert sum(b.count for b in r.batches()) == n
        assert (r.events, r.lost) == (n, seed % 5)
        assert r.header["kernel_release"] == "synthetic" and r.header["arch"] == mod.ARCH


def _event_maker(mod):
    """ev(kind, ns, tid, flags): an event of the module's first function, in its byte order."""
    import random

    d = synth.descriptors(mod)[0]
    rng = random.Random(1)

    def ev(kind, ns, tid, flags=0):
        return synth.event(d, kind, rng, ns, tid, 0, 0, mod.BYTE_ORDER, flags)

    return ev


def test_an_exit_after_its_threads_loss_is_not_paired_across_it():
    """Call 1's exit and call 2's entry were lost to a full ring buffer: the thread's next
    record (call 2's exit) carries EVENT_THREAD_LOST, and is shown without a duration instead
    of one measured from call 1's entry; the other thread's open call is untouched, and a loss
    of an unknown thread forgets every thread's."""
    from btfgen.probe import spec_format

    mod = MODULES["x86_64"]
    ev = _event_maker(mod)

    lost = spec_format.EVENT_THREAD_LOST
    evs = [ev(0, 1000, 7), ev(0, 1500, 8), ev(1, 9000, 7, lost), ev(1, 9500, 8)]
    lines = _live(mod, evs).splitlines()
    assert not lines[2].endswith(" us)") and lines[3].endswith("(8.000 us)"), lines
    unknown = spec_format.EVENT_SOME_LOST
    evs = [ev(0, 1000, 7), ev(0, 1500, 8), ev(0, 2000, 9, unknown), ev(1, 9500, 8, unknown)]
    lines = _live(mod, evs).splitlines()
    assert not lines[3].endswith(" us)"), lines


def test_an_exit_whose_entry_the_kernel_skipped_is_paired_with_nothing(tmp_path, capsys):
    """An fsession's exit whose entry the kernel skipped (EVENT_NO_ENTRY): shown without a
    duration or its entry's arguments, never closing the thread's older open call of its
    function, which its own exit then closes; counted. The fentry.multi / fexit.multi pair's
    records (EVENT_UNPAIRED) open and close nothing, said once. Live and from a recording alike."""
    import json

    from btfgen.probe import spec_format

    mod = MODULES["x86_64"]
    ev = _event_maker(mod)

    skipped = spec_format.EVENT_NO_ENTRY
    evs = [ev(0, 1000, 7), ev(1, 5000, 7, skipped), ev(1, 9000, 7)]
    lines = _live(mod, evs).splitlines()
    assert not lines[1].endswith(" us)") and lines[2].endswith("(8.000 us)"), lines
    out = io.StringIO()
    p = output.Printer([Function(x) for x in synth.descriptors(mod)], mod.BYTE_ORDER, out,
                       flush=False, as_json=True)
    for e in evs:
        p.event(e)
    got = [json.loads(line) for line in out.getvalue().splitlines()]
    assert got[1]["paired"] is False and "duration_ns" not in got[1], got
    assert "paired" not in got[2] and got[2]["duration_ns"] == 8000, got
    assert p.no_entry == 1
    unpaired = spec_format.EVENT_UNPAIRED
    evs = [ev(0, 1000, 7, unpaired), ev(1, 9000, 7, unpaired)]
    lines = _live(mod, evs).splitlines()
    assert len(lines) == 2 and not lines[1].endswith(" us)"), lines
    assert capsys.readouterr().err.count("exits are shown without their entry's") == 1
    path = tmp_path / "r.btfrec"
    evs = [ev(0, 1000, 7), ev(1, 5000, 7, skipped), ev(1, 9000, 7)]
    synth.write(path, mod, evs)
    for kw in ({}, {"as_json": True}):
        assert _decoded(path, **kw) == _live(mod, evs, **kw)


GOOD_EVENTS = synth.events(synth.descriptors(MODULES["s390x"]), 40, 1, "big")


@pytest.fixture(scope="module", params=[4, 3, 2, 1])
def good(tmp_path_factory, request) -> bytes:
    """A whole recording of each version (versions 1 to 3: as btfgen wrote them before)."""
    mod = MODULES["s390x"]
    path = tmp_path_factory.mktemp("rec") / "r.btfrec"
    synth.write(path, mod, GOOD_EVENTS, lost=3, batch=16, version=request.param)
    return path.read_bytes()


@pytest.fixture(scope="module")
def good_v2(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("rec") / "r.btfrec"
    synth.write(path, MODULES["s390x"], GOOD_EVENTS, lost=3, batch=16)
    return path.read_bytes()


def _version(data: bytes) -> int:
    return recording.FILE_HEAD.unpack_from(data)[1]


def _refused(tmp_path, data: bytes) -> str:
    path = tmp_path / "bad.btfrec"
    path.write_bytes(data)
    with pytest.raises(recording.RecordError) as e:
        replay.print_recording(str(path), io.StringIO())
    return str(e.value)


def _span_ends(data: bytes) -> list[tuple[int, int]]:
    """(byte after each span, events up to it) of a whole version 2, 3 or 4 file."""
    _, version, size, _, _ = recording.FILE_HEAD.unpack_from(data)
    at, events, out = recording.FILE_HEAD.size + size, 0, []
    while data[at:at + 4] == b"SPAN":
        _, n, runs, nbytes, _crc, _hcrc = recording.SPAN_HEAD.unpack_from(data, at)
        at += recording.SPAN_HEAD.size + runs * recording.RUN.size + nbytes
        at += recording.checks_size(nbytes) if version >= 3 else 0
        events += n
        out.append((at, events))
    return out


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10**6))
def test_truncated_anywhere_is_refused_or_decoded_up_to_the_cut(tmp_path, good, cut):
    """Version 1 (written to FILE.part, renamed when whole): a truncated file is refused.
    Versions 2 and 3 (written as they go): every event of a span wholly before the cut is printed as
    the tracer printed it, and one line says where the file was cut."""
    cut %= len(good)
    if _version(good) == 1:
        assert "\n" not in _refused(tmp_path, good[:cut])
        return
    head = recording.FILE_HEAD.size + recording.FILE_HEAD.unpack_from(good)[2]
    if cut < head:  # killed before the first span: no event to decode
        assert "\n" not in _refused(tmp_path, good[:cut])
        return
    path = tmp_path / "cut.btfrec"
    path.write_bytes(good[:cut])
    whole = [(end, n) for end, n in _span_ends(good) if end <= cut]
    at, events = whole[-1] if whole else (head, 0)
    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert replay.print_recording(str(path), out) == 0
    assert out.getvalue() == _live(MODULES["s390x"], GOOD_EVENTS[:events])
    assert err.getvalue() == (f"btfgen decode: {path}: cut at byte {at} after {events} events "
                              f"(the recording has no end: its tracer was killed?); records "
                              f"lost unknown\n")


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


@pytest.mark.parametrize("damage, says, version", [
    (lambda g: g[:-1], "truncated", 1),
    (lambda g: g[:len(g) // 2], "truncated", 1),
    (lambda g: b"", "not a btfgen recording", None),
    (lambda g: b"hello world\n", "not a btfgen recording", None),
    (lambda g: g[:8] + (6).to_bytes(4, "little") + g[12:], "recording version 6", None),
    (lambda g: g + b"x", "data after the end", None),
])
def test_cli_one_line_exit_2(tmp_path, good, damage, says, version):
    if version and _version(good) != version:
        pytest.skip(f"version {version} only")
    path = tmp_path / "bad.btfrec"
    path.write_bytes(damage(good))
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout == ""  # checked whole before the first line
    assert proc.stderr.startswith("btfgen: error: ") and says in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_cli_decodes_a_cut_recording_and_says_so(tmp_path, good_v2):
    ends = _span_ends(good_v2)
    path = tmp_path / "cut.btfrec"
    path.write_bytes(good_v2[:ends[1][0] + 100])  # two spans whole, the third begun
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == _live(MODULES["s390x"], GOOD_EVENTS[:32])
    assert proc.stderr == (f"btfgen decode: {path}: cut at byte {ends[1][0]} after 32 events "
                           f"(the recording has no end: its tracer was killed?); records lost "
                           f"unknown\n")


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



@pytest.mark.parametrize("arch", ARCHES)
def test_descriptors_made_once_a_prototype_are_each_functions_own(tmp_path, arch):
    """The tracer makes a recording's descriptors once a prototype (DecoderView.descriptors),
    sharing their fields: each is the function's as the module makes it alone, and the file's
    header is the same as one written from descriptors made one by one."""
    import types

    from btfgen.probe.manifest import DecoderView

    mod = MODULES[arch]
    names = mod.names()
    # Two more functions of the golden functions' prototypes (a kernel's share them by the
    # thousand; the goldens' five have one each), between them.
    protos = dict(mod._FUNCTION_PROTOS)
    first, last = protos[names[0]], protos[names[-1]]
    protos["also_first"] = ("also_first", 90001, first[2])
    protos["also_last"] = ("also_last", 90002, last[2])
    view = types.SimpleNamespace(_FUNCTION_PROTOS=protos, _values=mod._values,
                                 FunctionDesc=mod.FunctionDesc)
    order = [names[0], "also_last", *names[1:], "also_first"]
    shared = DecoderView(view).descriptors(order)

    def alone(name):
        fname, btf_id, k = protos[name]
        return mod.FunctionDesc.check((fname, btf_id) + mod._values(k))

    one_by_one = [alone(n) for n in order]
    assert one_by_one[:1] + one_by_one[2:-1] == synth.descriptors(mod)
    assert shared == one_by_one
    assert [d.name for d in shared] == [protos[n][0] for n in order]
    assert shared[1].args is shared[-2].args  # made once, shared
    head = synth.header(mod)
    for descs, name in ((one_by_one, "a"), (shared, "b")):
        recording.Writer(str(tmp_path / name), head, descs, mod.BYTE_ORDER).close(0)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_a_raw_span_whose_headers_do_not_hold_its_count_is_refused(tmp_path):
    """A raw span (no runs: handed over on the BPF side's count) is checked against its own
    headers: a record count they do not hold, or a header still BUSY, is refused in one line,
    its checksums good."""
    import zlib

    path = tmp_path / "r.btfrec"
    mod = MODULES["x86_64"]
    synth.write(path, mod, synth.events(synth.descriptors(mod), 8, 1, "little"),
                batch=4)  # span 2 of 2 raw
    good = path.read_bytes()
    raw = good.index(b"SPAN", good.index(b"SPAN") + 4)
    _, n, nruns, nbytes, crc, _ = recording.SPAN_HEAD.unpack_from(good, raw)
    assert nruns == 0 and n == 4

    def resealed(records: int, body=None) -> bytes:
        head = recording.SPAN_HEAD.pack(b"SPAN", records, 0, nbytes, crc, 0)
        head = head[:-4] + zlib.crc32(head[:-4]).to_bytes(4, "little")
        data = bytearray(good[:raw] + head + good[raw + len(head):])
        if body:
            at = raw + len(head)
            data[at:at + nbytes] = body(bytearray(data[at:at + nbytes]))
            checks = recording.checks(bytes(data[at:at + nbytes]))
            data[at + nbytes:at + nbytes + len(checks)] = checks
        return bytes(data)

    assert "4 records, its head says 5" in _refused(tmp_path, resealed(5))

    def busy(body):
        body[3] |= 0x80  # the first header's BUSY bit (little-endian)
        return body
    assert "BUSY" in _refused(tmp_path, resealed(4, busy))
