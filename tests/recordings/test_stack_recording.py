"""Stacks in recordings (--stack with --record), without BPF: the notes a recording keeps
(btfgen.probe.stack_notes writes them, recording.Writer.note frames them, reader.py reads them
back before the span they name), the frames decode names from them (kernel symbols kept, or
--kallsyms), and damage to them refused in one line, exit 2."""

from __future__ import annotations

import io
import json
import os
import random
import struct
import subprocess
import sys
import zlib

import pytest
import synth

from btfgen.probe import recording, stack_wire, symbolize
from btfgen.probe.event import HEADS
from btfgen.probe.stack_notes import StackNotes
from btfgen.recordings import replay, stack_notes
from btfgen.recordings.reader import Reader

MOD = synth.module("x86_64")
DESCS = synth.descriptors(MOD)
DESC = DESCS[0]
ENV = dict(os.environ, LC_ALL="C", PYTHONPATH=str(synth.ROOT))
KALLSYMS = "ffffffff81000000 T _stext\nffffffff81001000 T vfs_read\n" \
    "ffffffff81002000 t helper [mymod]\nffffffff81003000 D some_data\n"


def _entry(kernel=(), user_fp=(), tgid: int = 42, sp: int = 0) -> bytes:
    """An entry of DESC carrying a stack part (EVENT_STACK), as trace.bpf.c writes it."""
    ev = bytearray(synth.event(DESC, 0, random.Random(1), 1000, flags=stack_wire.EVENT_STACK))
    HEADS["little"].pack_into(ev, 0, tgid, tgid, b"synth", 1000, 0, stack_wire.EVENT_STACK)
    part = stack_wire.STRUCTS["little"].pack(len(kernel), len(user_fp), 0, 0,
                                             user_fp[0] if user_fp else 0, sp, 0, 0)
    return bytes(ev) + part + struct.pack(f"<{len(kernel) + len(user_fp)}Q", *kernel, *user_fp)


def _header(stack=("kernel",)) -> dict:
    return dict(synth.header(MOD), stack=list(stack), kind="kernel")


class _Sink:
    """recording.Writer's note() and span(), kept in order."""

    def __init__(self) -> None:
        self.got = []

    def note(self, body) -> None:
        self.got.append(("note", json.loads(json.dumps(body))))

    def span(self, span) -> None:
        self.got.append(("span", span.records))


def test_kernel_symbols_noted_once_before_their_span(tmp_path):
    (tmp_path / "kallsyms").write_text(KALLSYMS)
    sink = _Sink()
    notes = StackNotes(sink, DESCS, "x86_64", "little", str(tmp_path / "kallsyms"))
    from btfgen.probe import ringspan

    notes.span(ringspan.Span.of([_entry(kernel=(0xffffffff81001010, 0xffffffff81002008))]))
    notes.span(ringspan.Span.of([_entry(kernel=(0xffffffff81001010,))]))  # nothing new
    assert sink.got == [
        ("note", {"maps": [], "objects": [], "kernel": [
            [0xffffffff81001010, "vfs_read", 0x10, "kernel", None],
            [0xffffffff81002008, "helper", 8, "[mymod]", None]]}),
        ("span", 1), ("span", 1)]


def test_a_process_maps_and_objects_noted_with_build_ids():
    # this process's own code: an address in the Python executable's text
    exe = os.path.realpath(sys.executable)
    maps = symbolize.read_maps(os.getpid())
    text = next(m for m in maps if m.path == exe)
    sink = _Sink()
    notes = StackNotes(sink, DESCS, "x86_64", "little", "/nonexistent")
    from btfgen.probe import ringspan

    ev = _entry(user_fp=(text.start + 16,), tgid=os.getpid(), sp=1)
    notes.span(ringspan.Span.of([ev, ev]))
    [(_, note), span] = sink.got
    assert span == ("span", 2)
    [noted] = note["maps"]
    assert noted["tgid"] == os.getpid() and [text.start, text.end, text.offset, exe] in \
        noted["maps"]
    with open(exe, "rb") as f:
        from btfgen.probe import elf_file

        bid = elf_file.ElfFile(f.read(), exe).build_id
    assert note["objects"] == [{"path": exe, "build_id": bid, "why": None}]


def _write(path, notes, events, header=None) -> None:
    w = recording.Writer(str(path), header or _header(), DESCS, "little")
    for note in notes:
        w.note(note)
    w.records(events)
    w.close(0)


NOTE = {"maps": [], "objects": [], "kernel": [[0xffffffff81001010, "vfs_read", 0x10, "kernel",
                                               None]]}


def test_notes_read_back_before_their_span(tmp_path):
    path = tmp_path / "r.btfrec"
    _write(path, [NOTE, {"maps": [{"tgid": 7, "why": "gone"}], "objects": [], "kernel": []}],
           [_entry(kernel=(0xffffffff81001010,))])
    with Reader(str(path)) as r:
        [batch] = list(r.batches())
        assert r.version == 5 and r.events == 1
    assert batch.notes == (stack_notes.Note([], [], [(0xffffffff81001010, "vfs_read", 0x10,
                                                      "kernel", None)]),
                           stack_notes.Note([(7, "gone")], [], []))


def _decode(path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "btfgen", "decode", *args, str(path)],
                          capture_output=True, text=True, env=ENV, timeout=120)


def test_kernel_frames_named_from_the_recording_or_kallsyms(tmp_path):
    path = tmp_path / "r.btfrec"
    _write(path, [NOTE], [_entry(kernel=(0xffffffff81001010, 0xffffffff81002004))])
    out = io.StringIO()
    replay.print_recording(str(path), out)
    lines = out.getvalue().splitlines()
    assert lines[1:] == ["    vfs_read+0x10 (kernel)", "    0xffffffff81002004 (no kernel "
                         "symbol for it in the recording (--kallsyms FILE names it))"]
    (tmp_path / "System.map").write_text(KALLSYMS)
    proc = _decode(path, "--kallsyms", str(tmp_path / "System.map"), "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    stack = json.loads(proc.stdout)["stack"]
    assert [(f["symbol"], f["offset"], f["object"]) for f in stack["kstack"]] == \
        [("vfs_read", 0x10, "kernel"), ("helper", 4, "[mymod]")]


def _reseal_note(path, body: bytes) -> None:
    """The recording's first note's body replaced, its checksums made again."""
    data = bytearray(path.read_bytes())
    at = data.index(b"NOTE")
    _, size, _, _ = recording.NOTE_HEAD.unpack_from(data, at)
    head = recording.NOTE_HEAD.pack(b"NOTE", len(body), zlib.crc32(body), 0)
    head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
    data[at:at + recording.NOTE_HEAD.size + size] = head + body
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("body, says", [
    (b"{", "not JSON"),
    (b'{"maps": [], "objects": []}', "not a note's members"),
    (b'{"maps": [{"tgid": 1, "maps": [[5, 4, 0, "/x"]]}], "objects": [], "kernel": []}',
     "process 1's maps: 0x5-0x4"),
    (b'{"maps": [], "objects": [{"path": "/x", "build_id": "zz", "why": null}], '
     b'"kernel": []}', "a build id 'zz'"),
    (b'{"maps": [], "objects": [], "kernel": [[-1, "f", 0, "kernel", null]]}',
     "-1 is not an address"),
])
def test_a_damaged_note_one_line_exit_2(tmp_path, body, says):
    path = tmp_path / "r.btfrec"
    _write(path, [NOTE], [_entry(kernel=(0xffffffff81001010,))])
    _reseal_note(path, body)
    proc = _decode(path)
    assert proc.returncode == 2 and proc.stdout == "", proc
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"btfgen: error: {path}: corrupt note at byte ") and says in line, line


def test_a_note_failing_its_checksum_refused_and_a_torn_one_is_the_cut(tmp_path):
    path = tmp_path / "r.btfrec"
    _write(path, [NOTE], [_entry(kernel=(0xffffffff81001010,))])
    data = bytearray(path.read_bytes())
    at = data.index(b"NOTE")
    data[at + recording.NOTE_HEAD.size + 3] ^= 1
    path.write_bytes(bytes(data))
    proc = _decode(path)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"btfgen: error: {path}: corrupt note at byte {at} (checksum)"], proc.stderr
    path.write_bytes(bytes(data[:at + 10]))  # killed as it wrote the note
    proc = _decode(path)
    assert proc.returncode == 0 and f"cut at byte {at} after 0 events" in proc.stderr


def test_a_damaged_stack_part_one_line_exit_2(tmp_path):
    path = tmp_path / "r.btfrec"
    bad = bytearray(_entry(kernel=(0xffffffff81001010,)))
    at = len(bad) - 8 - stack_wire.HEAD.size
    struct.pack_into("<H", bad, at, 200)  # 200 kernel frames: more than trace.bpf.c takes
    _write(path, [NOTE], [bytes(bad)])
    proc = _decode(path)
    assert proc.returncode == 2 and proc.stdout == "", proc
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"btfgen: error: {path}: corrupt event (") and \
        "a stack part of 200 kernel, 0 user frames" in line, line


def test_a_version_4_recording_still_reads(tmp_path):
    path = tmp_path / "r.btfrec"
    synth.write(path, MOD, synth.events(DESCS, 6, 3, "little"))
    data = bytearray(path.read_bytes())
    data[8:12] = (4).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with Reader(str(path)) as r:
        assert sum(b.count for b in r.batches()) == 6 and r.version == 4


def _call_with_kernel_stack(path) -> None:
    """One call of DESC, its entry's kernel stack: DESC itself, then two callers."""
    note = {"maps": [], "objects": [], "kernel": [
        [0xffffffff81001000, DESC.name, 0, "kernel", None],
        [0xffffffff81002010, "caller", 0x10, "kernel", None],
        [0xffffffff81003020, "outermost", 0x20, "[mymod]", None]]}
    entry = _entry(kernel=(0xffffffff81001000, 0xffffffff81002010, 0xffffffff81003020))
    exit_ = synth.event(DESC, 1, random.Random(2), 3000, tid=42)
    _write(path, [note], [entry, exit_])


def test_folded_stacks_put_the_recorded_callers_at_the_root(tmp_path):
    path = tmp_path / "r.btfrec"
    _call_with_kernel_stack(path)
    proc = _decode(path, "--format", "folded")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"synth [42];outermost;caller;{DESC.name} 2000\n"


STACK_ROW = ([f"{DESC.name}+0x0 (kernel)", "caller+0x10 (kernel)", "outermost+0x20 ([mymod])"],
             [0xffffffff81001000, 0xffffffff81002010, 0xffffffff81003020], None)


def test_dataset_stack_columns(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "r.btfrec"
    _call_with_kernel_stack(path)
    proc = _decode(path, "--format", "parquet", "-o", str(tmp_path / "ds"))
    assert proc.returncode == 0, proc.stderr
    [f] = (tmp_path / "ds").rglob("*.parquet")
    rows = sorted(pq.read_table(f).to_pylist(), key=lambda r: r["kind"])
    assert [(r["kind"], r["stack"], r["stack_ip"], r["stack_cut"]) for r in rows] == [
        ("entry", *STACK_ROW), ("exit", None, None, None)]


def test_columnar_parquet_files_stack_columns(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    from btfgen.recordings import columnar

    path = tmp_path / "r.btfrec"
    _call_with_kernel_stack(path)
    assert columnar.write_parquet(str(path), str(tmp_path / "out")) == 0
    [entry] = pq.read_table(tmp_path / "out" / f"{DESC.name}.entry.parquet").to_pylist()
    assert (entry["stack"], entry["stack_ip"], entry["stack_cut"]) == STACK_ROW
    exits = pq.read_table(tmp_path / "out" / f"{DESC.name}.exit.parquet")
    assert "stack" not in exits.schema.names and exits.num_rows == 1


def test_user_frames_by_the_recorded_maps_never_a_device(tmp_path):
    # a crafted recording naming /dev/zero as an object: not read (it would never end)
    note = {"maps": [{"tgid": 42, "maps": [[0x1000, 0x2000, 0, "/dev/zero"],
                                           [0x3000, 0x4000, 0, str(tmp_path / "gone")]]}],
            "objects": [{"path": "/dev/zero", "build_id": "abcd", "why": None},
                        {"path": str(tmp_path / "gone"), "build_id": "abcd", "why": None}],
            "kernel": []}
    path = tmp_path / "r.btfrec"
    _write(path, [note], [_entry(user_fp=(0x1010,), sp=1), _entry(user_fp=(0x3010,), sp=1),
                          _entry(user_fp=(0x5000,), sp=1)],
           header=dict(synth.header(MOD), stack=["user"]))
    out = io.StringIO()
    replay.print_recording(str(path), out)
    frames = [x.strip() for x in out.getvalue().splitlines() if x.startswith("    0x")]
    assert frames == ["0x1010 (/dev/zero: not a regular file here)",
                      f"0x3010 ({tmp_path / 'gone'}: not found here (No such file or "
                      "directory))", "0x5000 (in no mapped file)"]
