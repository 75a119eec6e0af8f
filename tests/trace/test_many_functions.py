"""More functions than the specs map's compiled size (4096): the build takes them all (the run
side sizes the map at load), their file offsets are found in one reading of the binary (one
reading a function took minutes for thousands), and the last cookie's spec decodes its call."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from btfgen.decoder.spec_format import MAX_FUNCTIONS
from btfgen.trace import bpfload

N = MAX_FUNCTIONS + 4


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    cc = shutil.which("cc")
    if cc is None or not (shutil.which("clang-19") or shutil.which("clang")):
        pytest.skip("no C compiler or no clang")
    d = tmp_path_factory.mktemp("many")
    (d / "m.h").write_text("".join(f"int f{i}(int a);\n" for i in range(N)))
    (d / "m.c").write_text('#include "m.h"\n' + "".join(
        f"__attribute__((noinline)) int f{i}(int a) {{ return a + {i}; }}\n" for i in range(N))
        + f"int main(void) {{ return f{N - 1}(1) != {N}; }}\n")
    subprocess.run([cc, "-O1", "-o", str(d / "m"), str(d / "m.c")], check=True)
    return d


def test_offsets_in_one_reading_agree_with_one_by_one(program):
    names = [f"f{i}" for i in (0, 1, N // 2, N - 1)]
    assert bpfload.function_file_offsets(str(program / "m"), names) == \
        [bpfload.function_file_offset(str(program / "m"), n) for n in names]
    with pytest.raises(bpfload.BpfLoadError, match="no function symbol 'nope'"):
        bpfload.function_file_offsets(str(program / "m"), ["f0", "nope"])


def test_more_functions_than_the_compiled_map_size(program, tmp_path):
    cmd = [sys.executable, "-m", "btfgen", "trace", "--header", str(program / "m.h")]
    built = subprocess.run([*cmd, "--build", str(tmp_path / "t"), str(program / "m"), "f*"],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    why = bpfload.bpf_unavailable()
    if why:
        pytest.skip(f"BPF unavailable: {why}")
    ran = subprocess.run([*cmd[:4], "--run", str(tmp_path / "t")], capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"f{N - 1}(a=1)\nf{N - 1} -> {N} "), ran.stdout
