"""DWARF-corrected layouts: a function compiled with another convention than its prototype
(i386 regparm(0), as the kernel's asmlinkage) is placed where DWARF says, the layout JSON says
which source placed each value, and the generated decoders follow it."""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys

import pytest
import toolchains

from test_check import REGPARM


def _obj():
    if not toolchains.TOOLCHAINS["i386"].available() or not toolchains.have("pahole"):
        pytest.skip("no i386 toolchain")
    return toolchains.compile_c(REGPARM, "i386")


def _layout(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "btfgen", "layout", *args, "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {f["name"]: f for f in json.loads(proc.stdout)["functions"]}


def test_layout_follows_dwarf(tmp_path):
    obj = _obj()
    funcs = _layout(str(obj))  # automatic: the input has .debug_info
    asml = funcs["asml"]
    assert [(a["source"], a["pieces"]) for a in asml["args"]] == [
        ("dwarf", [{"stack": 4, "value_offset": 0, "size": 4}]),
        ("dwarf", [{"stack": 8, "value_offset": 0, "size": 4}]),
        ("dwarf", [{"stack": 12, "value_offset": 0, "size": 4}]),
    ]
    assert asml["ret"]["source"] == "abi"
    assert [a["pieces"][0]["hwreg"] for a in funcs["normal"]["args"]] == ["eax", "edx", "ecx"]
    assert {a["source"] for a in funcs["normal"]["args"]} == {"abi"}
    # --no-dwarf: the description alone, and no "source" key (layouts without DWARF unchanged).
    plain = _layout(str(obj), "--no-dwarf")
    assert plain["asml"]["args"][0]["pieces"][0]["hwreg"] == "eax"
    assert "source" not in plain["asml"]["args"][0]
    # --dwarf FILE: the input without DWARF (as a stripped build), its DWARF apart.
    stripped = tmp_path / "stripped.o"
    subprocess.run(["objcopy", "--strip-debug", str(obj), str(stripped)], check=True)
    assert _layout(str(stripped))["asml"]["args"][0]["pieces"][0]["hwreg"] == "eax"
    apart = _layout(str(stripped), "--dwarf", str(obj), "--func", "asml")
    assert apart["asml"]["args"] == asml["args"]


def test_generated_python_decoder_follows_dwarf(tmp_path):
    obj = _obj()
    proc = subprocess.run([sys.executable, "-m", "btfgen", str(obj), "-o", str(tmp_path),
                           "--lang", "python,json,bpf", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    spec = importlib.util.spec_from_file_location("gen_i386", tmp_path / "btfgen_i386.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ctx = bytearray(68)
    struct.pack_into("<I", ctx, 24, 0xDEAD)  # eax: not where asml's first argument is
    stack = struct.pack("<IiiI", 0xC0DE, 3, 6, 0x1234)  # return address, then the arguments
    assert tuple(mod.function("asml").decode_entry(bytes(ctx), stack)) == (3, 6, 0x1234)
    header = (tmp_path / "btfgen.bpf.h").read_text()
    # The BPF decoder reads it from the stack too (the stack arguments in one read from sp + 4).
    assert "BTFGEN_READ(stk, sizeof(stk), sp + 4);" in header
    assert "__builtin_memcpy((char *)&a->facility + 0, (char *)stk + 4 - 4, 4);" in header
    assert "BTFGEN_REG_COPY((char *)&a->facility" not in header
