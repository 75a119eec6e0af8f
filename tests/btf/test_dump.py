"""`btfgen dump` against `bpftool btf dump ... format raw` (bpftool 7.1), byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import csrc
import pytest
import rawbtf
import toolchains

from btfgen.btf.dump import dump_raw
from btfgen.btf.reader import open_btf

REPO = Path(__file__).resolve().parents[2]
VMLINUX = Path("/sys/kernel/btf/vmlinux")

pytestmark = pytest.mark.skipif(not toolchains.have("bpftool", "pahole"),
                                reason="needs bpftool and pahole")

# clang emits btf_decl_tag / btf_type_tag annotations into DWARF, and pahole turns them into
# DECL_TAG / TYPE_TAG.
TAGS_C = r"""
#define __tag(x) __attribute__((btf_decl_tag(x)))
#define __user __attribute__((btf_type_tag("user")))
#define __rcu __attribute__((btf_type_tag("rcu")))
struct tagged { int a __tag("member_tag"); int __user *p; long __rcu * __user *pp; } __tag("s_tag");
int tagged_fn(struct tagged *x, int __user *q, double d, float f) __tag("fn_tag");
int tagged_fn(struct tagged *x, int __user *q, double d, float f)
{ return x->a + *q + (int)d + (int)f; }
"""
CLANG_ARCHES = [a for a, tc in toolchains.TOOLCHAINS.items() if tc.compiler.startswith("clang")]


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """Per arch: the types+functions object, a second file merged into it, and that second
    file's BTF split on the first's."""
    root = tmp_path_factory.mktemp("btf-objects")
    built = {}

    def build(arch: str) -> dict[str, Path]:
        if arch not in built:
            tc = toolchains.TOOLCHAINS[arch]
            if not tc.available():
                pytest.skip(f"{tc.compiler} not installed")
            a = csrc.object_copy(csrc.a_source(), arch, root / f"a-{arch}.o")
            b = csrc.object_copy(csrc.b_source(), arch, root / f"b-{arch}.o")
            merged = csrc.link([toolchains.compile_c(src, arch, btf=False)
                                for src in (csrc.a_source(), csrc.b_source())],
                               arch, root / f"ab-{arch}.o")
            csrc.pahole(a, flags=("--btf_gen_floats",))
            csrc.pahole(merged)
            csrc.pahole(b, base=a)
            built[arch] = {"a": a, "b": b, "ab": merged}
        return built[arch]

    return build


def check(path: Path | str, base: Path | str | None = None) -> bytes:
    expected = csrc.bpftool_dump(path, base)
    ours = dump_raw(open_btf(str(path), None if base is None else str(base)))
    assert ours.encode("utf-8", "surrogateescape") == expected
    return expected


@pytest.mark.skipif(not VMLINUX.exists(), reason="no /sys/kernel/btf/vmlinux")
def test_running_kernel():
    text = check(VMLINUX)
    assert text.count(b"\n") > 10_000


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_compiled_objects(objects, arch):
    objs = objects(arch)
    text = check(objs["a"])
    # The source's kinds all made it into BTF, so the comparison covered them.
    for kind in (b"INT", b"PTR", b"ARRAY", b"STRUCT", b"UNION", b"ENUM", b"ENUM64", b"FWD",
                 b"TYPEDEF", b"VOLATILE", b"CONST", b"RESTRICT", b"FUNC", b"FUNC_PROTO",
                 b"FLOAT", b"bitfield_size=", b"encoding=SIGNED", b"fwd_kind=union"):
        assert kind in text, kind
    check(objs["ab"])


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_split(objects, arch):
    objs = objects(arch)
    text = check(objs["b"], objs["a"])
    base = open_btf(str(objs["a"]))
    first = text.split(b"]", 1)[0]
    assert first == f"[{len(base)}".encode()  # split ids continue the base's
    assert b"'other'" in text


@pytest.mark.parametrize("arch", CLANG_ARCHES)
def test_tags_from_clang(tmp_path, arch):
    if not toolchains.TOOLCHAINS[arch].available():
        pytest.skip("no clang")
    obj = csrc.object_copy(TAGS_C, arch, tmp_path / "tags.o")
    csrc.pahole(obj, flags=("--btf_gen_floats",))
    text = check(obj)
    for kind in (b"DECL_TAG", b"TYPE_TAG", b"FLOAT", b"component_idx=-1", b"component_idx=0"):
        assert kind in text, kind


@pytest.mark.parametrize("byte_order", ["little", "big"])
def test_every_kind_hand_built(tmp_path, byte_order):
    path = tmp_path / f"every-{byte_order}.btf"
    path.write_bytes(rawbtf.every_kind(byte_order))
    text = check(path)
    for kind in rawbtf.KIND:
        assert f"] {kind} '".encode() in text, kind


def test_hand_built_split_on_hand_built_base(tmp_path):
    base = tmp_path / "base.btf"
    base.write_bytes(rawbtf.every_kind("little"))
    n = len(open_btf(str(base)))
    strings = len(open_btf(str(base)).strings.data)
    w = rawbtf.BtfWriter("little", base_str_len=strings, first_id=n)
    # Names both new and shared with the base (offset 1 is the base's "int").
    s = w.composite("STRUCT", "split_struct", 16, [("a", 1, 0, 0), ("b", n + 1, 64, 0)])
    w.ref("PTR", s)
    w.add("TYPEDEF", "", 0, 1)
    w.records[-1] = w.u32(1, 8 << 24, 1)  # name offset 1: into the base's strings
    w.func("split_fn", w.func_proto(s, [("x", 1)]))
    split = tmp_path / "split.btf"
    split.write_bytes(w.bytes())
    text = check(split, base)
    assert f"[{n + 2}] TYPEDEF 'int' type_id=1".encode() in text


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "btfgen", "dump", *args], capture_output=True,
                          env=env, timeout=120, check=False)


def test_cli_matches_bpftool(objects):
    objs = objects("s390x")  # big-endian
    proc = run_cli(str(objs["a"]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == csrc.bpftool_dump(objs["a"])
    proc = run_cli(str(objs["b"]), "--base", str(objs["a"]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == csrc.bpftool_dump(objs["b"], objs["a"])


@pytest.mark.skipif(not VMLINUX.exists(), reason="no /sys/kernel/btf/vmlinux")
def test_cli_default_is_running_kernel():
    proc = run_cli()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == csrc.bpftool_dump(VMLINUX)
