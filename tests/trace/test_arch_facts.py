"""`btfgen trace` on every arch: what the run side needs to know of the arch it was built for
(the `uname -m` spellings, the byte order, the bpf() syscall's number) comes from the arch's
description through the manifest the build writes; the run side (btfgen/probe) keeps no table
of its own, so adding an arch is adding a file here too."""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from btfgen.abi.arches import conventions, host_bpf_syscall, load_arch
from btfgen.probe import errors
from btfgen.probe import manifest as trace_manifest
from btfgen.trace.build import Request, build

# tests/toolchains.py and tests/abi/abi_corpus.py, importable by plain name.
for _d in (Path(__file__).resolve().parents[1], Path(__file__).resolve().parents[1] / "abi"):
    if str(_d) not in sys.path:
        sys.path.insert(0, str(_d))
from abi_corpus import available, protos_btf  # noqa: E402
from toolchains import ARCHES  # noqa: E402

# Each arch's syscall table (syscall_64.tbl, syscall_32.tbl, asm-generic/unistd.h, ...).
BPF_SYSCALL = {"x86_64": 321, "i386": 357, "arm64": 280, "riscv64": 280, "riscv32": 280,
               "loongarch64": 280, "arm": 386, "s390x": 351, "ppc64le": 361, "mips64el": 5315}
# What `uname -m` says on each (MIPS says mips64 in either byte order).
UNAME = {"x86_64": "x86_64", "i386": "i686", "arm64": "aarch64", "riscv64": "riscv64",
         "riscv32": "riscv32", "loongarch64": "loongarch64", "arm": "armv7l", "s390x": "s390x",
         "ppc64le": "ppc64le", "mips64el": "mips64"}


def test_every_description_gives_its_bpf_syscall():
    assert {c.name: c.bpf_syscall for c in conventions()} == BPF_SYSCALL
    assert sorted(ARCHES) == sorted(BPF_SYSCALL)


def test_the_host_number_comes_from_the_host_description():
    assert host_bpf_syscall() == load_arch(platform.machine()).bpf_syscall is not None


def _on(monkeypatch, machine: str, byteorder: str) -> None:
    monkeypatch.setattr(trace_manifest.platform, "machine", lambda: machine)
    monkeypatch.setattr(trace_manifest.sys, "byteorder", byteorder)


@pytest.mark.parametrize("arch", ARCHES)
def test_the_manifest_carries_the_arch_facts_and_the_run_side_checks_them(arch, tmp_path,
                                                                        monkeypatch):
    if not available(arch) or not (shutil.which("clang-19") or shutil.which("clang")):
        pytest.skip(f"no {arch} toolchain or no clang")
    # The BTF alone: pyelftools cannot apply some arches' DWARF relocations (RISC-V's), and
    # what is tested here does not depend on DWARF.
    with open(protos_btf(arch).path, "rb") as f:
        (tmp_path / "types.btf").write_bytes(ELFFile(f).get_section_by_name(".BTF").data())
    out = tmp_path / "trace"
    build(Request(["f_ll"], kernel=True, btf=str(tmp_path / "types.btf"), arch=arch), out)
    manifest = trace_manifest.load_manifest(out)
    assert manifest.to_json() == (out / "trace.json").read_text()
    conv = load_arch(arch)
    assert manifest.bpf_syscall == BPF_SYSCALL[arch]
    assert manifest.uname == list(conv.names) and UNAME[arch] in manifest.uname
    assert manifest.byte_order == conv.byte_order

    _on(monkeypatch, UNAME[arch], conv.byte_order)
    trace_manifest.check_target(manifest)  # accepted (a warning at most: not this kernel's BTF)
    for other, machine in UNAME.items():
        if machine not in conv.names:
            _on(monkeypatch, machine, conv.byte_order)
            with pytest.raises(errors.RunError, match=f"^built for {arch} "):
                trace_manifest.check_target(manifest)
    # The right name in the other byte order: a big-endian mips64 is not mips64el.
    _on(monkeypatch, UNAME[arch], "big" if conv.byte_order == "little" else "little")
    with pytest.raises(errors.RunError, match="-endian"):
        trace_manifest.check_target(manifest)


def test_a_manifest_without_the_facts_is_refused(tmp_path):
    (tmp_path / "trace.json").write_text(json.dumps({"format": 1, "arch": "x86_64"}))
    with pytest.raises(errors.RunError, match="format 1, this btfgen trace reads 3: build"):
        trace_manifest.load_manifest(tmp_path)
