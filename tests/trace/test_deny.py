"""The deny list: `btfgen trace --kernel` leaves out of its globs the functions its own BPF
program and run side call (deny.txt), says how many and why, keeps a function named as it is,
and keeps everything with --no-deny."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from btfgen.trace import deny
from btfgen.trace.command import main

# Names as a kernel has them: the hash map lookup the program does per event (which drowned an
# earlier `lookup_*` run), helpers, the fprobe/ftrace machinery, RCU; and ordinary functions.
DENIED = ["lookup_nulls_elem_raw", "htab_map_lookup_elem", "bpf_ringbuf_reserve",
          "fprobe_entry", "ftrace_ops_list_func", "__rcu_read_lock", "migrate_disable",
          "_raw_spin_lock_irqsave", "is_endbr"]
KEPT = ["lookup_fast", "lookup_open", "vfs_read", "do_sys_openat2"]
SOURCE = "".join(f"long {n}(long a, int b) {{ return a + b; }}\n" for n in DENIED + KEPT)


def test_every_pattern_has_a_group_and_matches_what_it_is_for():
    pats = deny.patterns()
    assert pats and all(p.why for p in pats), [p for p in pats if not p.why]
    assert len({p.why for p in pats}) >= 3  # one reason per group, not one for all
    split = deny.split(DENIED + KEPT, pats)
    assert split.kept == KEPT
    assert sorted(n for names in split.left_out.values() for n in names) == sorted(DENIED)


def test_a_pattern_takes_the_reason_of_its_group(tmp_path):
    path = tmp_path / "deny.txt"
    path.write_text("# a comment before any group\n## maps\n# why, at length\n*_map_*  # lookups\n"
                    "\n## locks\nspin_*\n")
    assert deny.patterns(path) == [deny.Pattern("*_map_*", "maps"),
                                   deny.Pattern("spin_*", "locks")]
    assert deny.split(["spin_lock", "a_map_b", "x"], deny.patterns(path)) == \
        deny.Denied(["x"], {"locks": ["spin_lock"], "maps": ["a_map_b"]})


@pytest.fixture(scope="module")
def kernel_btf(tmp_path_factory):
    clang = shutil.which("clang-19") or shutil.which("clang")
    if clang is None:
        pytest.skip("no clang")
    d = tmp_path_factory.mktemp("deny")
    (d / "k.c").write_text(SOURCE)
    subprocess.run([clang, "-g", "-O2", "-target", "bpfel", "-c", str(d / "k.c"), "-o",
                    str(d / "k.o")], check=True)
    with open(d / "k.o", "rb") as f:
        (d / "k.btf").write_bytes(ELFFile(f).get_section_by_name(".BTF").data())
    return d / "k.btf"


def _build(kernel_btf, tmp_path, capsys, *args):
    out = tmp_path / "trace"
    status = main(["--kernel", "--btf", str(kernel_btf), "--arch", "x86_64", "--build", str(out),
                   *args])
    err = capsys.readouterr().err
    assert status == 0, err
    return json.loads((out / "trace.json").read_text())["functions"], err


def test_globs_leave_out_the_denied_and_say_so(kernel_btf, tmp_path, capsys):
    functions, err = _build(kernel_btf, tmp_path, capsys, "*")
    assert sorted(functions) == sorted(KEPT)
    said = [line for line in err.splitlines() if "left out" in line]
    assert len(said) == 1, err
    assert said[0].startswith(f"btfgen trace: left out {len(DENIED)} functions btfgen's own "), said
    assert "--no-deny keeps them" in said[0] and "lookup_nulls_elem_raw" in said[0]
    assert "btfgen's BPF program" in said[0] and "probe machinery" in said[0], said


def test_lookup_glob_keeps_lookups_but_not_the_hash_map_s(kernel_btf, tmp_path, capsys):
    functions, _ = _build(kernel_btf, tmp_path, capsys, "lookup_*")
    assert sorted(functions) == ["lookup_fast", "lookup_open"]


def test_a_function_named_as_it_is_is_traced(kernel_btf, tmp_path, capsys):
    functions, err = _build(kernel_btf, tmp_path, capsys, "lookup_nulls_elem_raw", "vfs_*")
    assert functions == ["lookup_nulls_elem_raw", "vfs_read"]
    assert "left out" not in err


def test_no_deny_keeps_everything(kernel_btf, tmp_path, capsys):
    functions, err = _build(kernel_btf, tmp_path, capsys, "--no-deny", "*")
    assert sorted(functions) == sorted(DENIED + KEPT)
    assert "left out" not in err


def test_only_denied_functions_is_nothing_to_trace(kernel_btf, tmp_path, capsys):
    status = main(["--kernel", "--btf", str(kernel_btf), "--arch", "x86_64", "--build",
                   str(tmp_path / "t"), "bpf_*", "*rcu*"])
    err = capsys.readouterr().err
    assert status == 1 and err.splitlines()[-1] == "btfgen trace: nothing left to trace", err


@pytest.mark.parametrize("argv, said", [
    (["--no-deny", "./prog", "f"], "--btf and --no-deny are for kernel functions"),
    (["--run", "DIR", "--no-deny"], "--run takes no functions, types, filters or captures")])
def test_no_deny_is_for_building_kernel_globs(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"btfgen trace: {said}") and len(err.splitlines()) == 1, err
