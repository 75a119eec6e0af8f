"""`btfgen trace --kernel --module NAME`: a module's functions typed by its split BTF over the
kernel's, named in the manifest with the module's first BTF id (the trampoline's link per BTF
object: by_btf_object), its digest for the run side; bad usage in one line."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path

import pytest
from manifests import manifest

from btfgen.btf.reader import open_btf
from btfgen.probe import attach
from btfgen.probe import manifest as trace_manifest
from btfgen.trace import build
from btfgen.trace.command import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "btf"))
from rawbtf import BtfWriter  # noqa: E402

KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")


@pytest.fixture
def module_btf(tmp_path):
    """A module's split BTF over this machine's kernel BTF: one function of its own,
    `mod_read(long count)` returning int, typed by the kernel's int and long."""
    if not KERNEL_BTF.exists():
        pytest.skip("no /sys/kernel/btf/vmlinux")
    if not (shutil.which("clang-19") or shutil.which("clang")):
        pytest.skip("no clang")
    base = open_btf(str(KERNEL_BTF))
    raw = KERNEL_BTF.read_bytes()
    str_len = struct.unpack_from("<I", raw, 20)[0]  # btf_header.str_len
    w = BtfWriter(base_str_len=str_len, first_id=len(base))
    (int_,) = base.find_types("int", "int")
    (long_,) = base.find_types("long int", "int")
    proto = w.func_proto(int_.id, [("count", long_.id)])
    w.func("mod_read", proto)
    path = tmp_path / "mod"
    path.write_bytes(w.bytes())
    return path, len(base)


def test_module_functions_come_with_their_btf_object(module_btf, tmp_path, capsys,
                                                     monkeypatch):
    path, first = module_btf
    monkeypatch.setattr(build, "trampoline_variants",
                        lambda _types: list(build.TRAMPOLINE_OBJECTS))
    out = tmp_path / "t"
    status = main(["--kernel", "--module", "mod", "--module-btf", str(path), "--arch", "x86_64",
                   "--build", str(out), "mod_*", "vfs_read"])
    assert status == 0, capsys.readouterr().err
    manifest = json.loads((out / "trace.json").read_text())
    assert manifest["functions"] == ["vfs_read", "mod_read"]  # by BTF id: the kernel's first
    assert manifest["btf_ids"][1] == first + 1  # after its prototype: the module's own ids
    assert manifest["btf"] == str(KERNEL_BTF)
    assert manifest["btf_sha256"] == hashlib.sha256(KERNEL_BTF.read_bytes()).hexdigest()
    assert manifest["btf_module"] == {"name": "mod", "btf": str(path), "first_id": first,
                                      "btf_sha256": hashlib.sha256(path.read_bytes())
                                      .hexdigest()}
    typed = trace_manifest.load_manifest(out)
    assert attach.by_btf_object(typed, [0, 1]) == ([0], [1])
    assert attach.by_btf_object(typed, [1]) == ([], [1])
    # typed by the module's BTF: its one argument, by name
    assert "count" in (out / "trampoline" / "btfgen.bpf.h").read_text()


def test_a_glob_matches_the_modules_functions_only(module_btf, tmp_path, capsys):
    path, _ = module_btf
    status = main(["--kernel", "--module", "mod", "--module-btf", str(path), "--arch", "x86_64",
                   "--build", str(tmp_path / "t"), "vfs_rea*"])
    assert status == 1
    assert "no function 'vfs_rea*'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["--module-btf", "x.ko", "--kernel", "vfs_read"], "--module-btf is the BTF of a --module"),
    (["--module", "a/b", "--kernel", "vfs_read"], "a module's name"),
    (["--module", "m", "/bin/true", "main"], "--module is for kernel functions"),
])
def test_bad_module_options(argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_a_module_not_loaded_is_said(tmp_path, capsys):
    status = main(["--kernel", "--module", "no_such_module_here", "--build",
                   str(tmp_path / "t"), "f"])
    assert status == 2
    err = capsys.readouterr().err
    assert "/sys/kernel/btf/no_such_module_here: no such file (module no_such_module_here " \
           "not loaded?" in err


class _Refusing:
    """A loaded object whose kernel takes the kernel's link and refuses the module's program
    (as a kernel without tracing_multi on modules would)."""

    def __init__(self):
        self.links, self.made = [], []

    def attach_tracing_multi(self, program, ids, cookies, attach_type, what):
        self.made.append(("kernel", program, list(ids)))
        self.links.append(object())

    def load_clone(self, program, attach_type, fd):
        from btfgen.probe.errors import BpfLoadError

        raise BpfLoadError("trace_session loaded against the module's BTF: Invalid argument", 22)


def test_a_refused_module_link_hands_its_functions_back(monkeypatch, capsys):
    from btfgen.probe import syscall

    monkeypatch.setattr(syscall, "kernel_btf_fd", lambda number, name: None)
    made = manifest(btf_ids=[10, 500], btf_module={"name": "mod", "first_id": 400},
                    bpf_syscall=321)
    mode = attach.AttachMode("tracing_multi", "o", ("trace_session",), "one fsession.multi link",
                             attach_types=(syscall.BPF_TRACE_FSESSION_MULTI,))
    obj = _Refusing()
    assert attach.attach_trampoline(obj, made, [0, 1], mode, [7, 8], Path("d")) == [1]
    assert obj.made == [("kernel", "trace_session", [10])]
    err = capsys.readouterr().err
    assert ("module mod: the trampoline refused (no BTF object of module mod in the kernel "
            "(not loaded?)): its 1 functions on a kprobe link instead") in err
    # the BTF object found, the program refused: the same
    monkeypatch.setattr(syscall, "kernel_btf_fd", lambda number, name: __import__("os").dup(0))
    obj = _Refusing()
    assert attach.attach_trampoline(obj, made, [0, 1], mode, [7, 8], Path("d")) == [1]
    assert "Invalid argument" in capsys.readouterr().err
