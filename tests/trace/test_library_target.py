"""A shared library as `btfgen trace`'s target, short of BPF: what the build writes for it (the
manifest says it is a library; aliases traced once, versions and IFUNCs said) and which
processes the run side then runs and reports (btfgen.probe.processes)."""

from __future__ import annotations

import json
import shutil

import elf_samples
from manifests import manifest
import pytest

from btfgen.probe import processes, run
from btfgen.trace import command

needs_tools = pytest.mark.skipif(
    bool(elf_samples.skip_reason()) or not (shutil.which("clang-19") or shutil.which("clang")),
    reason=str(elf_samples.skip_reason() or "no clang"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return elf_samples.build(tmp_path_factory.mktemp("library"))


def _build(built, tmp_path, target: str, *funcs: str) -> tuple[int, dict | None]:
    out = tmp_path / "dir"
    status = command.main(["--build", str(out), "--header", str(built["header"]),
                        str(built[target]), *funcs])
    manifest = json.loads((out / "trace.json").read_text()) if status == 0 else None
    return status, manifest


@needs_tools
def test_a_library_is_built_as_a_probe_target(built, tmp_path, capsys):
    status, manifest = _build(built, tmp_path, "lib", "plain", "also_plain", "versioned")
    err = capsys.readouterr().err.splitlines()
    assert status == 0
    assert manifest["library"] is True
    assert manifest["functions"] == ["plain", "versioned"]  # also_plain is plain
    assert "btfgen trace: also_plain is plain (one function, at the same address): traced " \
           "once, as plain" in err
    assert any(line.startswith("btfgen trace: versioned: tracing versioned@@V2") for line in err)
    assert len(set(manifest["offsets"])) == 2


@needs_tools
@pytest.mark.parametrize("target, library", [("runnable", True), ("pie", False),
                                             ("fixed", False), ("old_pie", False)])
def test_library_or_program_in_the_manifest(built, tmp_path, target, library):
    status, manifest = _build(built, tmp_path, target, "work")
    assert status == 0 and manifest["library"] is library


@needs_tools
def test_an_ifunc_is_refused_in_one_line(built, tmp_path, capsys):
    status, _ = _build(built, tmp_path, "lib", "plain", "chosen")
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("btfgen trace: chosen in libsymt.so.1 is an IFUNC") \
        and err.count("\n") == 1


@needs_tools
def test_a_function_with_a_prototype_but_no_symbol(built, tmp_path, capsys):
    status, _ = _build(built, tmp_path, "stripped", "plain", "work")
    assert status == 1
    assert capsys.readouterr().err.endswith("no function symbol 'work'\n")


def _opts(command=(), pid=0):
    return run.Options(list(command), pid)


LIB = manifest(kind="user", program="/lib/libc.so.6", library=True)
PROGRAM = manifest(kind="user", program="/usr/bin/prog", library=False)
OLD_PROGRAM = manifest(kind="user", program="/usr/bin/prog")  # from before libraries
KERNEL = manifest(kind="kernel")
P = processes.Processes


@pytest.mark.parametrize("made, opts, expected", [
    # a library is never run: the command after --, else --pid, else every process
    (LIB, _opts(["cat", "/etc/hostname"]), P(("cat", "/etc/hostname"), 0)),
    (LIB, _opts(pid=42), P(None, 42)),
    (LIB, _opts(), P(None, 0)),
    # a program runs, with the arguments after --
    (PROGRAM, _opts(["in.bin"]), P(("/usr/bin/prog", "in.bin"), 0)),
    (PROGRAM, _opts(), P(("/usr/bin/prog",), 0)),
    (OLD_PROGRAM, _opts(), P(("/usr/bin/prog",), 0)),
    (PROGRAM, _opts(pid=42), P(None, 42)),
    (KERNEL, _opts(["ls"]), P(("ls",), 0)),
    (KERNEL, _opts(pid=7), P(None, 7)),
    (KERNEL, _opts(), P(None, 0)),
])
def test_which_processes(made, opts, expected):
    choice = processes.processes(made, opts)
    assert choice == expected
    assert processes.everyone(choice) == (expected == P(None, 0))


@needs_tools
def test_a_file_of_another_machine_than_the_arch_is_refused(built, tmp_path, capsys):
    out = tmp_path / "dir"
    status = command.main(["--build", str(out), "--arch", "riscv64", "--header",
                        str(built["header"]), str(built["lib"]), "plain"])
    assert status == 2
    assert capsys.readouterr().err == (
        f"btfgen trace: {built['lib']}: a 64-bit EM_X86_64 file, not riscv64's (64-bit "
        "EM_RISCV): give the file built for the arch traced\n")
