"""`btfgen.open` and `Target`: the one arch rule, the one selector, the one DWARF policy, and the
commands that map onto them (btfgen trace's build included)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
import toolchains

import btfgen
from btfgen.btf import types as T
from btfgen.btf.made import MadeTypes
from btfgen.errors import ArchError, DwarfError

SOURCE = """
struct pair { long a, b; };
long f_seven(long a, long b, long c, long d, long e, long f, long g, long h, long i, long j)
{ return a + b + c + d + e + f + g + h + i + j; }
long g_pair(struct pair p, int *q) { return p.a + p.b + *q; }
int h_other(int x) { return x * 3; }
"""


def _object(arch: str):
    tc = toolchains.TOOLCHAINS[arch]
    if not (tc.available() and toolchains.have("pahole")):
        pytest.skip(f"no {tc.compiler} or pahole")
    return str(toolchains.compile_c(SOURCE, arch))


def _btfgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True, text=True)


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_the_arch_comes_from_the_elf(arch):
    target = btfgen.open(_object(arch))
    assert target.arch == arch and target.types.elf_machine


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_trace_build_for_a_foreign_vmlinux_takes_its_arch(tmp_path, arch):
    """`btfgen trace --kernel --btf <an ELF of another arch> --build DIR` without --arch: the
    ELF's machine decides, as for every other command (it used to be the host's)."""
    obj = _object(arch)
    run = _btfgen("trace", "--kernel", "--btf", obj, "--build", str(tmp_path / "t"), "f_seven")
    assert run.returncode == 0, run.stderr
    manifest = json.loads((tmp_path / "t" / "trace.json").read_text())
    assert manifest["arch"] == arch and manifest["functions"] == ["f_seven"]
    assert (tmp_path / "t" / manifest["module"]).is_file()


def test_raw_btf_beside_its_elf_takes_the_elfs_arch(tmp_path):
    """A raw BTF names no machine; the DWARF file it is checked against does."""
    obj = _object("arm64")
    raw = tmp_path / "raw.btf"
    subprocess.run(["llvm-objcopy-19", "--dump-section", f".BTF={raw}", obj, str(tmp_path / "o")],
                   check=True)
    assert btfgen.open(str(raw), dwarf=obj).arch == "arm64"
    assert btfgen.open(str(raw), dwarf=None, arch="arm64").arch == "arm64"
    run = _btfgen("check", obj, "--btf", str(raw), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["arch"] == "arm64"


def test_an_elf_no_description_answers_to_is_refused(tmp_path):
    elf = tmp_path / "sparc.o"
    data = bytearray(open(_object("x86_64"), "rb").read())
    data[18:20] = (2).to_bytes(2, "little")  # e_machine EM_SPARC
    elf.write_bytes(bytes(data))
    with pytest.raises(ArchError, match="no ABI description for EM_SPARC"):
        btfgen.open(str(elf), dwarf=None)


def test_selection_names_globs_files_and_what_is_missing(tmp_path):
    target = btfgen.open(_object("x86_64"))
    names = tmp_path / "names"
    names.write_text("# wanted\nh_other  # one more\n\nnone_such\n")
    sel = target.select(["g_*", "nothing_*", "f_seven"], files=[str(names)])
    assert [f.name for f in sel.functions] == sorted(
        ["f_seven", "g_pair", "h_other"], key=lambda n: target.types.find_funcs(n)[0].id)
    assert sel.missing == ["nothing_*", "none_such"]
    assert len(target.select().functions) == 3


def test_dwarf_policy(tmp_path):
    obj = _object("x86_64")
    assert btfgen.open(obj).dwarf == obj  # its own DWARF, unasked
    assert btfgen.open(obj, dwarf=None).dwarf is None
    with pytest.raises(DwarfError, match="no such file"):
        btfgen.open(obj, dwarf=str(tmp_path / "missing"))
    # DWARF asked for by name that cannot be read is the caller's error; the input's own,
    # consulted unasked, is a warning and the description's placement stands.
    arm = _object("arm64")
    with pytest.raises(DwarfError):
        btfgen.open(obj, dwarf=arm).placement()
    target = btfgen.open(obj)
    target.dwarf = arm  # as if its own DWARF were unreadable
    placement = target.placement()
    assert placement.warning and placement.dwarf is None and placement.layout.functions
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target.place()
    assert any(issubclass(w.category, btfgen.BtfgenWarning) for w in caught)


def test_decoding_answers_from_the_target():
    target = btfgen.open(_object("x86_64"))
    fn = target.function("h_other")
    assert "h_other" in repr(target) or "x86_64" in repr(target)
    ctx = bytearray(8 * 21)
    ctx[14 * 8:14 * 8 + 8] = (41).to_bytes(8, "little")  # pt_regs.di
    assert fn.entry(bytes(ctx), b"") == (41,)
    assert target.layout("h_other").args[0].name == "x"
    with pytest.raises(KeyError):
        target.function("none_such")


def test_a_ctx_without_a_stack_pointer_reads_no_stack_argument(tmp_path):
    """A kernel's pt_regs without the sp field: stack arguments are unavailable and the
    generated BTFGEN_SP reads nothing (it used to read the ctx at offset -1)."""
    t = MadeTypes()
    long_ = t.add(T.Int, "long", size=8, encoding=T.INT_SIGNED, bit_offset=0, bits=64)
    fields = ["r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx",
              "si", "di", "orig_ax", "ip", "cs", "flags"]  # no sp
    members = tuple(T.Member(n, long_.id, 64 * i, 0, t) for i, n in enumerate(fields))
    t.add(T.Struct, "pt_regs", size=8 * len(fields), members=members, kind_flag=False)
    proto = t.add(T.FuncProto, "", ret_id=long_.id,
                  params=tuple(T.Param(f"a{i}", long_.id, t) for i in range(8)), variadic=False)
    t.add(T.Func, "eight", type_id=proto.id, linkage=T.Linkage.GLOBAL)
    from btfgen.abi.arches import load_arch
    from btfgen.codegen.outputs import generate

    layout = btfgen.Target(t, load_arch("x86_64")).place()
    (f,) = layout.functions
    assert layout.ctx.sp_offset is None
    assert all(a.pieces for a in f.args[:6])
    assert all("holds no stack pointer" in (a.unavailable or "") for a in f.args[6:])
    header = generate(layout, t, ("bpf",))["btfgen.bpf.h"]
    assert "#define BTFGEN_SP(ctx) ((__u64)0)" in header


def test_a_g_elf_without_btf_is_told_apart_by_the_errors_type():
    """`open_input` used to decide whether to run pahole by the text of an error message."""
    from btfgen.btf.reader import open_btf
    from btfgen.errors import NoBtfSection

    if not toolchains.have("pahole", "gcc"):
        pytest.skip("no gcc or pahole")
    obj = str(toolchains.compile_c(SOURCE, "x86_64", btf=False))
    with pytest.raises(NoBtfSection):
        open_btf(obj)
    target = btfgen.open(obj)  # BTF made from its DWARF
    assert target.dwarf == obj and target.select(["f_seven"]).functions
