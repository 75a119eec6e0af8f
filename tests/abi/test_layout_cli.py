"""`btfgen layout`: the JSON contract, the table, exit statuses and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from abi_corpus import available, protos_btf

ROOT = Path(__file__).resolve().parents[2]


def btfgen(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env)


def needs(arch: str) -> str:
    if not available(arch):
        pytest.skip(f"no {arch} toolchain")
    return protos_btf(arch).path


def test_json_contract():
    path = needs("riscv64")
    run = btfgen("layout", path, "--arch", "riscv", "--func", "f_7s16", "--func", "r_s24",
                 "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert {"arch", "ctx", "byte_order", "functions"} <= doc.keys()
    assert (doc["arch"], doc["ctx"], doc["byte_order"]) == ("riscv64", "pt_regs", "little")
    assert doc["ctx_info"]["source"] == "default"
    # Functions come in BTF id order, whatever the order they were asked for in.
    assert [x["btf_id"] for x in doc["functions"]] == sorted(x["btf_id"] for x in doc["functions"])
    f, r = sorted(doc["functions"], key=lambda x: x["name"] != "f_7s16")
    assert {"name", "btf_id", "args", "ret", "variadic"} <= f.keys()
    s = f["args"][7]
    assert {"name", "type", "size", "pieces", "by_ref", "at_exit", "unavailable"} <= s.keys()
    assert (s["name"], s["type"], s["size"]) == ("s", "struct s16", 16)
    assert s["pieces"] == [
        {"reg": "a7", "hwreg": "a7", "ctx_offset": 136, "reg_size": 8, "value_offset": 0,
         "size": 8},
        {"stack": 0, "value_offset": 8, "size": 8}]
    assert f["ret"] is None and f["variadic"] is False
    ret = r["ret"]
    assert ret["by_ref"] and ret["pieces"][0]["reg"] == "a0" and not ret["at_exit"]
    assert r["args"][0]["pieces"][0]["reg"] == "a1"
    assert btfgen("layout", path, "--arch", "riscv", "--func", "f_7s16", "--func", "r_s24",
                  "--json").stdout == run.stdout  # deterministic


def test_arch_from_the_elf_and_big_endian():
    path = needs("s390x")
    doc = json.loads(btfgen("layout", path, "--func", "f_c9", "--json").stdout)
    assert (doc["arch"], doc["byte_order"]) == ("s390x", "big")
    assert doc["functions"][0]["args"][8]["pieces"] == [
        {"stack": 191, "value_offset": 0, "size": 1}]


def test_table_output_and_ftrace_regs():
    path = needs("arm64")
    run = btfgen("layout", path, "--func", "r_s24", "--ctx", "ftrace_regs")
    assert run.returncode == 0, run.stderr
    assert "ctx ftrace_regs = struct __arch_ftrace_regs" in run.stdout
    assert "*(regs[8](x8)[0:8])" in run.stdout and "regs[0](x0)[0:4]" in run.stdout


def test_missing_function_is_status_1():
    path = needs("x86_64")
    run = btfgen("layout", path, "--func", "no_such_function")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "no function named no_such_function" in run.stderr


def test_unknown_arch_is_one_line_status_2():
    path = needs("x86_64")
    run = btfgen("layout", path, "--arch", "vax")
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert run.stderr.startswith("btfgen: error: unknown arch 'vax'; valid names: ")
