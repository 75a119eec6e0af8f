"""`btfgen` (generate): selection, exit codes, one-line errors, atomic write-if-changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import golden
import pytest
import zoo
from toolchains import TOOLCHAINS, compile_c

from btfgen.codegen import bpf
from btfgen.codegen.outputs import generate

ROOT = Path(__file__).resolve().parents[2]


def btfgen(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True, text=True,
                          env=env)


@pytest.fixture(scope="module")
def obj():
    if not TOOLCHAINS["arm64"].available():
        pytest.skip("aarch64 cross compiler not installed")
    return str(compile_c(golden.SOURCE, "arm64"))


def test_select_and_missing_names(obj, tmp_path):
    funcs = tmp_path / "funcs.txt"
    funcs.write_text("# wanted\nwith_enum  # trailing comment\n\nnot_there\n")
    r = btfgen(obj, "--func", "scalars", "--func", "pass_*", "--func", "zz*", "--funcs-file",
               str(funcs), "-o", str(tmp_path / "out"))
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1] == f"btfgen: {obj}: no function named zz*, not_there"
    assert "arm64: 3 functions, 3 fully decodable" in r.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "btfgen.bpf.h", "btfgen_arm64.py", "btfgen_specs.h", "layout.json"]
    header = (out / "btfgen.bpf.h").read_text()
    assert [n for n in golden.FUNCTIONS if f"btfgen_entry_{n}(" in header] == \
        ["scalars", "pass_pair", "with_enum"]
    # arch from the ELF machine, default output directory generated/<arch>/
    r = btfgen(obj, "--func", "tiny", "--lang", "json", "-q", "-o", str(tmp_path / "j"))
    assert r.returncode == 0 and r.stderr == ""
    assert [p.name for p in (tmp_path / "j").iterdir()] == ["layout.json"]


def test_unchanged_files_are_not_rewritten(obj, tmp_path):
    out = tmp_path / "out"
    assert btfgen(obj, "-o", str(out), "-q").returncode == 0
    def state():
        return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino, p.read_bytes())
                for p in out.iterdir()}

    before = state()
    r = btfgen(obj, "-o", str(out))
    assert r.returncode == 0
    assert "0 files written, 4 unchanged" in r.stderr
    assert before == state()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("args, message", [
    (["--lang", "bpf,cobol"], "btfgen: error: --lang: cobol: choose among bpf, python, json"),
    (["/nonexistent/vmlinux"], "btfgen: error: /nonexistent/vmlinux: No such file or directory"),
    (["--arch", "vax"], "btfgen: error: unknown arch 'vax'"),
    (["--funcs-file", "/nonexistent/list"], "btfgen: error: /nonexistent/list: No such file"),
    (["-j", "0"], "btfgen: error: argument -j/--jobs: '0': a number of processes"),
])
def test_usage_errors_are_one_line(obj, args, message, tmp_path):
    if args[0] not in ("/nonexistent/vmlinux",):
        args = [obj, *args]
    r = btfgen(*args, "-o", str(tmp_path))
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(message)


def test_functions_sharing_a_name_are_all_generated_apart():
    table, arch = zoo.build()
    names = bpf.function_names(arch.functions)
    assert names[-2:] == ["dup__106", "dup__107"]
    module = generate(arch, table, ("python",))["btfgen_x86_64.py"]
    assert "'dup__106': ('dup', 106," in module and "'dup__107': ('dup', 107," in module


def test_layout_text_is_the_layout_json_contract():
    import json

    from btfgen.codegen.outputs import layout_text
    from btfgen.layout_json import to_json

    table, arch = zoo.build()
    assert json.loads(layout_text(arch)) == json.loads(json.dumps(to_json(arch)))


def test_each_lang_writes_its_registry_entries_and_two_processes_the_same_bytes():
    from btfgen.codegen.outputs import DEFAULT_LANGS, LANGS, OUTPUTS, file_names

    table, arch = zoo.build()
    names = file_names(arch.arch)
    assert len(set(names.values())) == len(OUTPUTS)
    assert LANGS == ("bpf", "python", "json", "kernel") and DEFAULT_LANGS == LANGS[:3]
    for lang in LANGS:
        got = generate(arch, table, (lang,))
        assert set(got) == {names[o.name] for o in OUTPUTS if o.lang == lang}
    assert set(generate(arch, table, ("bpf",), specs_table=False)) == {names["header"]}
    one = generate(arch, table)
    assert set(one) == {names[o.name] for o in OUTPUTS if o.lang in DEFAULT_LANGS}
    assert generate(arch, table, jobs=2) == one
    every = generate(arch, table, LANGS)
    assert set(every) == set(names.values()) and generate(arch, table, LANGS, jobs=2) == every
