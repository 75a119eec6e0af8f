"""The binary layouts BPF writes and Python reads are spec_format's tables: the C side
(trace.bpf.c with its trace_event.h, the generated btfgen_record) compiled by clang agrees with
the offsets and sizes the Python side takes from them, field by field."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from btfgen.decoder import runtime
from btfgen.probe import event, spec_format
from btfgen.recordings import columnar

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "btfgen" / "trace"
CLANG = shutil.which("clang-19") or shutil.which("clang")


def test_trace_event_header_is_the_table():
    """trace_event.h is printed from the table (`python -m btfgen.probe.spec_format`)."""
    assert (TRACE / spec_format.TRACE_HEADER).read_text() == spec_format.trace_header()
    source = (TRACE / "trace.bpf.c").read_text()
    assert f'#include "{spec_format.TRACE_HEADER}"' in source
    assert "struct trace_event {" not in source  # one definition: the header's
    assert "__uint(max_entries, BTFGEN_TRACE_MAX_FUNCTIONS);" in source


def _asserts() -> str:
    lines = [f"_Static_assert(BTFGEN_TRACE_MAX_FUNCTIONS == {spec_format.MAX_FUNCTIONS}, "
             f'"map size");']
    for struct_name, fields, end in (
            ("trace_event", spec_format.EVENT_HEAD, "rec"),
            ("btfgen_record", spec_format.RECORD_HEAD, "data")):
        for f in fields:
            at = spec_format.offset_of(fields, f.name)
            size = struct.calcsize("<" + f.code)
            lines.append(f"_Static_assert(__builtin_offsetof(struct {struct_name}, {f.name}) "
                         f'== {at}, "{struct_name}.{f.name} at {at}");')
            lines.append(f"_Static_assert(sizeof(((struct {struct_name} *)0)->{f.name}) == "
                         f'{size}, "{struct_name}.{f.name} of {size} bytes");')
        lines.append(f"_Static_assert(__builtin_offsetof(struct {struct_name}, {end}) == "
                     f'{spec_format.size_of(fields)}, "{struct_name}.{end}");')
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(CLANG is None, reason="needs clang")
@pytest.mark.parametrize("arch,target", [("x86_64", "bpfel"), ("s390x", "bpfeb")])
def test_compiled_structs_agree_with_the_table(tmp_path, arch, target):
    probe = tmp_path / "probe.c"
    probe.write_text(f'#include "{TRACE / "trace.bpf.c"}"\n' + _asserts())
    cmd = [CLANG, "-O2", "-g", "-target", target, f"-D__TARGET_ARCH_{arch}",
           f"-I{ROOT / 'generated' / 'examples' / arch}", "-c", str(probe), "-o",
           str(tmp_path / "probe.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(CLANG is None, reason="needs clang")
def test_the_probe_fails_when_the_table_and_c_disagree(tmp_path, monkeypatch):
    """The check above can fail: a table with the pad before cpu does not compile against it."""
    head = spec_format.EVENT_HEAD
    monkeypatch.setattr(spec_format, "EVENT_HEAD", head[:4] + (head[5], head[4]))
    probe = tmp_path / "probe.c"
    probe.write_text(f'#include "{TRACE / "trace.bpf.c"}"\n' + _asserts())
    proc = subprocess.run([CLANG, "-target", "bpfel", "-D__TARGET_ARCH_x86",
                           f"-I{ROOT / 'generated' / 'examples' / 'x86_64'}", "-c", str(probe),
                           "-o", str(tmp_path / "probe.o")], capture_output=True, text=True)
    assert proc.returncode and "trace_event.cpu at 36" in proc.stderr


def test_python_sides_take_the_table():
    head = spec_format.size_of(spec_format.EVENT_HEAD)
    record = spec_format.size_of(spec_format.RECORD_HEAD)
    assert event.EVENT_HEADER == head and event.DATA == head + record
    assert event.RECORD_HEADER == runtime.RECORD_HEADER_SIZE == record
    fmt = spec_format.struct_format(spec_format.RECORD_HEAD)
    assert runtime.RECORD_HEADERS["big"].format == ">" + fmt
    assert event.HEADS["little"].size == head
    offsets = {name: at for name, _fmt, at in columnar.EVENT_FIELDS + columnar.RECORD_FIELDS}
    assert offsets["timestamp"] == spec_format.offset_of(spec_format.EVENT_HEAD, "ns")
    assert offsets[columnar.FAILED] == head + spec_format.offset_of(spec_format.RECORD_HEAD,
                                                                   "failed")
    assert columnar.DATA_AT == head + record
    assert offsets[columnar.ID_KIND] == head + spec_format.offset_of(spec_format.RECORD_HEAD, "btf_id")


def test_the_run_side_carries_the_tables(tmp_path):
    """In a trace directory (no btfgen) the run side finds the tables in its own copy of the
    probe package (btfgen/probe/spec_format.py), which the build copies whole."""
    import sys

    from btfgen.trace import build

    build._copy_run_side(tmp_path)
    script = ("import sys\nsys.modules['btfgen'] = None\n"
              f"from {build.PROBE_COPY} import event, output, recording, run\n"
              "print(event.EVENT_HEADER, event.RECORD_HEADER, event.HEADS['big'].format)\n")
    proc = subprocess.run([sys.executable, "-B", "-c", script], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    head = spec_format.size_of(spec_format.EVENT_HEAD)
    record = spec_format.size_of(spec_format.RECORD_HEAD)
    assert proc.stdout.split() == [str(head), str(record),
                                   ">" + spec_format.struct_format(spec_format.EVENT_HEAD)]
