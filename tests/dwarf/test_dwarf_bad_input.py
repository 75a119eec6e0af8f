"""Bad DWARF input: one line on stderr and exit status 2, never a traceback; hypothesis mutates
the .debug_info of a real object and the reader either reads it or raises DwarfError."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import toolchains
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btfgen.abi.arches import load_arch
from btfgen.dwarf.reader import DwarfFile
from btfgen.errors import BtfgenError, DwarfError

SOURCE = """
struct s { long a, b, c; };
long sink(long);
long f(long a, int b, struct s v) { return sink(a) + b + v.c; }
static long g(char c, long long d) { return sink(c) * d; }
long h(long x, ...) { return g(x, x) + sink(x); }
"""


def _obj() -> Path:
    if not toolchains.TOOLCHAINS["x86_64"].available() or not toolchains.have("pahole"):
        pytest.skip("no x86_64 toolchain or pahole")
    return toolchains.compile_c(SOURCE, "x86_64")


def _btfgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True, text=True)


def _section(path: Path, name: str) -> tuple[int, int]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        sec = ELFFile(f).get_section_by_name(name)
        return sec["sh_offset"], sec["sh_size"]


def _one_line_exit_2(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("btfgen: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_no_debug_info(tmp_path):
    obj = _obj()
    stripped = tmp_path / "stripped.o"
    shutil.copy(obj, stripped)
    subprocess.run(["objcopy", "--strip-debug", "--keep-section=.BTF", str(stripped)], check=True)
    _one_line_exit_2(_btfgen("check", str(stripped)), "no DWARF (.debug_info section)", "-g")


def test_unknown_version(tmp_path):
    obj = _obj()
    bad = tmp_path / "v9.o"
    data = bytearray(obj.read_bytes())
    off, _ = _section(obj, ".debug_info")
    data[off + 4:off + 6] = (9).to_bytes(2, "little")  # the first unit's version
    bad.write_bytes(bytes(data))
    _one_line_exit_2(_btfgen("check", str(bad)), "DWARF version", "9")


def test_truncated(tmp_path):
    obj = _obj()
    off, size = _section(obj, ".debug_info")
    bad = tmp_path / "cut.o"
    data = bytearray(obj.read_bytes())
    # The unit claims more bytes than the section has: its DIEs run off the end.
    data[off:off + 4] = (size * 2).to_bytes(4, "little")
    bad.write_bytes(bytes(data))
    _one_line_exit_2(_btfgen("check", str(bad)), "DWARF")
    cut = tmp_path / "short.o"
    cut.write_bytes(obj.read_bytes()[:off + size // 3])
    _one_line_exit_2(_btfgen("check", str(cut)))


def test_other_arch():
    obj = _obj()
    _one_line_exit_2(_btfgen("check", str(obj), "--arch", "arm64"))
    with pytest.raises(DwarfError, match="EM_X86_64, not s390x"):
        DwarfFile(obj, load_arch("s390x"))


def test_not_elf(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF" + bytes(60))
    _one_line_exit_2(_btfgen("check", str(junk)))


def _alarm(signum, frame):
    raise TimeoutError("DWARF reader hung on mutated input")


@settings(max_examples=int(os.environ.get("BTFGEN_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1,
                      max_size=8), cut=st.one_of(st.none(), st.integers(0, 10**6)))
def test_mutated_debug_info(tmp_path, edits, cut):
    obj = _obj()
    off, size = _section(obj, ".debug_info")
    data = bytearray(obj.read_bytes())
    for pos, value in edits:
        data[off + pos % size] = value
    if cut is not None:
        del data[off + cut % size:off + size]
        data[off + cut % size:off + cut % size] = bytes(size - cut % size)
    path = tmp_path / "m.o"
    path.write_bytes(bytes(data))
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(10)
    try:
        with DwarfFile(path, load_arch("x86_64")) as f:
            for fn in f.functions():
                for p in fn.params:
                    p.location.describe()
    except BtfgenError:
        pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_damaged_dwarf_leaves_no_file_open(tmp_path, monkeypatch):
    """DwarfFile used to catch everything past opening and raise with the file still open."""
    from elftools.elf.elffile import ELFFile

    from btfgen.dwarf import reader

    if not toolchains.TOOLCHAINS["x86_64"].available():
        pytest.skip("no gcc")
    obj = toolchains.compile_c(SOURCE, "x86_64", btf=False)
    data = bytearray(Path(obj).read_bytes())
    with open(obj, "rb") as f:
        elf = ELFFile(f)
        names = [s.name for s in elf.iter_sections()]
        at = elf["e_shoff"] + names.index(".debug_aranges") * elf["e_shentsize"]
    data[at + 32:at + 40] = (10 ** 9).to_bytes(8, "little")  # sh_size far past the file
    bad = tmp_path / "bad.o"
    bad.write_bytes(bytes(data))
    opened = []

    def tracking_open(*args, **kw):
        opened.append(open(*args, **kw))
        return opened[-1]

    monkeypatch.setattr(reader, "open", tracking_open, raising=False)
    with pytest.raises(DwarfError, match="damaged DWARF"):
        DwarfFile(str(bad), load_arch("x86_64"))
    assert opened and all(f.closed for f in opened)
