"""More functions than the specs map's compiled size (4096): the build takes them all (the run
side sizes the map at load), their file offsets are found in one reading of the binary (one
reading a function took minutes for thousands), and the last cookie's spec decodes its call."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from btfgen.probe import bpf_object, errors, features, libbpf
from btfgen.probe.spec_format import MAX_FUNCTIONS
from btfgen.trace import symbols

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
    assert [f.offset for f in symbols.functions(str(program / "m"), names)] == \
        [symbols.function_file_offset(str(program / "m"), n) for n in names]
    with pytest.raises(symbols.SymbolError, match="no function symbol 'nope'"):
        symbols.functions(str(program / "m"), ["f0", "nope"])


def test_more_functions_than_the_compiled_map_size(program, tmp_path):
    cmd = [sys.executable, "-m", "btfgen", "trace", "--header", str(program / "m.h")]
    built = subprocess.run([*cmd, "--build", str(tmp_path / "t"), str(program / "m"), "f*"],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    why = features.bpf_programs().why
    if why:
        pytest.skip(f"BPF unavailable: {why}")
    ran = subprocess.run([*cmd[:4], "--run", str(tmp_path / "t")], capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"f{N - 1}(a=1)\nf{N - 1} -> {N} "), ran.stdout


def test_the_spec_table_is_every_spec_in_cookie_order(program, tmp_path):
    from btfgen.probe import manifest as trace_manifest

    subprocess.run([sys.executable, "-m", "btfgen", "trace", "--header", str(program / "m.h"),
                    "--build", str(tmp_path / "t"), str(program / "m"), "f1", "f0", "f4099"],
                   check=True, capture_output=True, timeout=120)
    manifest = trace_manifest.load_manifest(tmp_path / "t")
    decoders = trace_manifest.load_decoders(tmp_path / "t", manifest)
    table = (tmp_path / "t" / manifest.specs).read_bytes()
    assert table == b"".join(decoders.spec(n) for n in manifest.functions)
    assert manifest.btf_ids == [decoders.function(n).btf_id for n in manifest.functions]
    # A function's decoder is made at its first event, not for every function up front.
    made = []
    lazy = trace_manifest.LazyFunctions(_Counting(decoders, made), manifest.functions,
                             manifest.btf_ids)
    assert made == [] and lazy.get(12345) is None
    last = manifest.btf_ids[-1]
    assert lazy.get(last).btf_id == last and lazy.get(last) is lazy.get(last)
    assert made == [manifest.functions[-1]]


class _Counting:
    def __init__(self, decoders, made: list) -> None:
        self.decoders, self.made = decoders, made

    def function(self, name: str):
        self.made.append(name)
        return self.decoders.function(name)


def test_a_kernel_without_batch_updates_is_filled_one_by_one(program, tmp_path, monkeypatch):
    """Before 5.6 (or with a libbpf without it), bpf_map_update_batch fails with EINVAL: the
    map is filled an entry a call."""
    if features.bpf_programs().why:
        pytest.skip("BPF unavailable")
    import ctypes
    import errno

    from btfgen.abi.arches import host_bpf_syscall

    subprocess.run([sys.executable, "-m", "btfgen", "trace", "--header", str(program / "m.h"),
                    "--build", str(tmp_path / "t"), str(program / "m"), "f0", "f1", "f2"],
                   check=True, capture_output=True, timeout=120)
    table = (tmp_path / "t" / "specs.bin").read_bytes()
    lib = libbpf.libbpf()

    refused = []

    def refuse(*_):
        refused.append(1)
        ctypes.set_errno(errno.EINVAL)
        return -errno.EINVAL

    monkeypatch.setattr(lib, "bpf_map_update_batch", refuse)
    with bpf_object.BpfObject(str(tmp_path / "t" / "trace.bpf.o"),
                           bpf_syscall=host_bpf_syscall()) as obj:
        obj.expect_uprobe_multi("trace_entry")
        obj.expect_uprobe_multi("trace_exit")
        obj.set_max_entries("specs", 3)
        obj.load()
        obj.fill_array("specs", table, 3)
        assert refused == [1]
        size = len(table) // 3
        assert [obj.lookup("specs", i.to_bytes(4, sys.byteorder), size) for i in range(3)] == \
            [table[i * size:(i + 1) * size] for i in range(3)]


def test_a_directory_of_the_previous_format_is_refused_in_one_line(tmp_path):
    """Format 2 had no spec table: running one must say to build again, not fail on a key."""
    from btfgen.probe import manifest as trace_manifest

    (tmp_path / "trace.json").write_text('{"format": 2}')
    with pytest.raises(errors.InputError, match="format 2, this btfgen trace reads 3: build"):
        trace_manifest.load_manifest(tmp_path)
