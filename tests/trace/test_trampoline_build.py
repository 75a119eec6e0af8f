"""The trampoline's part of a kernel trace directory: built where the target's BTF names the
trampoline's attach types (enum bpf_attach_type), each function the trampoline cannot take
named with the reason, and a trace directory still made, without it, where its programs do
not compile."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from btfgen.trace import build
from btfgen.trace.command import main

KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
# A function the trampoline takes, one returning a struct (refused by its prototype), two the
# verifier refuses by name (btf_id_deny; noreturn_deny, the exit half of an fsession).
FUNCTIONS = ["vfs_read", "make_kuid", "migrate_disable", "do_exit"]


@pytest.fixture
def kernel_btf(monkeypatch):
    """This machine's kernel BTF, as if its enum bpf_attach_type named the trampoline's types
    (build.trampoline_variants is tested on its own in test_trampoline_attach.py)."""
    if not KERNEL_BTF.exists():
        pytest.skip("no /sys/kernel/btf/vmlinux")
    if not (shutil.which("clang-19") or shutil.which("clang")):
        pytest.skip("no clang")
    monkeypatch.setattr(build, "trampoline_variants",
                        lambda _types: list(build.TRAMPOLINE_OBJECTS))
    return KERNEL_BTF


def _build(kernel_btf, out, capsys, *options):
    status = main(["--kernel", "--btf", str(kernel_btf), "--arch", "x86_64", "--build",
                   str(out), *options, *FUNCTIONS])
    err = capsys.readouterr().err
    assert status == 0, err
    return json.loads((out / "trace.json").read_text()), err


def test_the_trampoline_is_built_with_what_it_cannot_take_named(kernel_btf, tmp_path, capsys):
    manifest, _ = _build(kernel_btf, tmp_path / "t", capsys)
    tramp = manifest["trampoline"]
    assert tramp["variants"] == ["fsession_multi", "fsession", "fentry_multi"]
    for name in set(tramp["objects"].values()):
        assert (tmp_path / "t" / name).stat().st_size > 0, name
    assert (tmp_path / "t" / tramp["module"]).is_file()
    specs = (tmp_path / "t" / tramp["specs"]).read_bytes()
    assert len(specs) == len((tmp_path / "t" / manifest["specs"]).read_bytes())
    names = manifest["functions"]
    refused = {names[int(i)]: why for i, why in tramp["refused"].items()}
    assert refused == {"make_kuid": "return value: a struct or union return value "
                                    "(btf_distill_func_proto)",
                       "migrate_disable": build.TRAMPOLINE_DENIED["migrate_disable"],
                       "do_exit": "__noreturn: the verifier refuses its exit half "
                                  "(noreturn_deny)"}


def test_trampoline_programs_that_do_not_compile_leave_the_kprobes_and_say_so(
        kernel_btf, tmp_path, capsys, monkeypatch):
    compile_ = build._compile

    def failing(out, *args, headers=None, **kw):
        if headers is not None:  # the trampoline's
            raise build.BuildError("compiling trace.bpf.c failed: fatal error: error in "
                                   "backend: Branch target out of insn range", status=1)
        return compile_(out, *args, headers=headers, **kw)

    monkeypatch.setattr(build, "_compile", failing)
    manifest, err = _build(kernel_btf, tmp_path / "t", capsys)
    assert "trampoline" not in manifest
    assert not list((tmp_path / "t").glob("trace.t*.bpf.o"))
    assert (tmp_path / "t" / manifest["object"]).is_file()
    assert ("btfgen trace: the BPF trampoline's programs were not built (compiling trace.bpf.c "
            "failed: fatal error: error in backend: Branch target out of insn range): the "
            "kprobe modes only\n") in err, err


def test_an_exit_capture_rooted_at_an_argument_stays_on_the_trampoline(kernel_btf, tmp_path,
                                                                         capsys):
    # What its exit needs of its entry (buf) is kept in a slot the fsession's cookie numbers,
    # as on a kprobe.session link: the cookie is never 0 after an entry ran (trace.bpf.c).
    from btfgen.probe import spec_format
    from btfgen.probe import manifest as trace_manifest

    out = tmp_path / "t"
    manifest, _ = _build(kernel_btf, out, capsys, "--capture", "vfs_read: buf[retval]")
    tramp = manifest["trampoline"]
    names = manifest["functions"]
    refused = {names[int(i)] for i in tramp["refused"]}
    assert "vfs_read" not in refused
    decoders = trace_manifest.load_decoders(out, tramp["module"])
    assert spec_format.read_head(decoders.spec("vfs_read"), "little")["carry"]
