"""Damaged input: every defect is one BtfError line naming the file, the .BTF offset and the
type id where they are known; the CLI prints that line and exits 2, with nothing on stdout."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import rawbtf
import toolchains

from btfgen.btf.dump import dump_raw
from btfgen.btf.reader import load_btf, open_btf
from btfgen.btf.measure import size_of
from btfgen.btf.types import TypeWalkError
from btfgen.errors import BtfError

REPO = Path(__file__).resolve().parents[2]


def good() -> bytes:
    return rawbtf.every_kind("little")


def header(data: bytes) -> tuple:
    return struct.unpack_from("<HBBIIIII", data)


def with_header(data: bytes, **fields) -> bytes:
    names = ["magic", "version", "flags", "hdr_len", "type_off", "type_len", "str_off",
             "str_len"]
    values = dict(zip(names, header(data)))
    values.update(fields)
    return struct.pack("<HBBIIIII", *[values[n] for n in names]) + data[24:]


def load(data: bytes, name: str = "x.btf"):
    return load_btf(name, data)


def everything(btf) -> None:
    dump_raw(btf)
    for type_id in range(len(btf)):
        t = btf[type_id]
        with contextlib.suppress(TypeWalkError):
            size_of(t)


def error_of(data: bytes, *, full: bool = True) -> str:
    with pytest.raises(BtfError) as info:
        btf = load(data)
        if full:
            everything(btf)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("x.btf: ")
    return message


def test_not_btf():
    assert "neither BTF" in error_of(b"hello, world\n")
    assert "neither BTF" in error_of(b"")


def test_truncated_header():
    message = error_of(good()[:10])
    assert "truncated header" in message and ".BTF+0xa" in message


def test_unsupported_version():
    assert "version 2" in error_of(with_header(good(), version=2))


def test_header_length():
    assert "header length 4" in error_of(with_header(good(), hdr_len=4))


def test_sections_past_the_end():
    data = good()
    h = header(data)
    assert "type section" in error_of(with_header(data, type_len=h[5] + 4096))
    assert "string section" in error_of(with_header(data, str_len=h[7] + 1))
    assert "runs past" in error_of(data[:len(data) - 3])  # strings cut short


def test_string_section_not_terminated():
    data = good()
    assert "NUL" in error_of(data[:-1] + b"x")


def test_truncated_record():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.composite("STRUCT", "s", 8, [("a", 1, 0, 0), ("b", 1, 32, 0)])
    data = w.bytes()
    types_len = header(data)[5]
    # Cut the type section inside the struct's second member.
    cut = with_header(data, type_len=types_len - 8, str_off=types_len - 8)
    cut = cut[:24 + types_len - 8] + data[24 + types_len:]
    message = error_of(cut)
    assert "type 2" in message and ".BTF+0x" in message


def test_absurd_vlen():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.add("STRUCT", "huge", 0xFFFF, 8)
    message = error_of(w.bytes())
    assert "type 2" in message and "vlen 65535" in message and ".BTF+0x" in message


def test_unknown_kind():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.records.append(w.u32(0, 25 << 24, 0))
    message = error_of(w.bytes())
    # The offset is the info word's, where the kind is.
    assert "type 2" in message and "unknown kind 25" in message and ".BTF+0x2c" in message
    w.records[-1] = w.u32(0, 0, 0)  # kind 0 (UNKN) is no record either
    assert "unknown kind 0" in error_of(w.bytes())


def test_string_offset_out_of_range():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.records.append(w.u32(0x10000, 2 << 24, 1))  # a PTR whose name is past the strings
    message = error_of(w.bytes())
    assert "type 2" in message and "0x10000" in message and ".BTF+0x28" in message
    btf = load(w.bytes())
    with pytest.raises(BtfError, match="type 2"):
        btf[2]
    with pytest.raises(BtfError, match="type 2"):
        btf.find_types("int")


def test_member_name_out_of_range():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.composite("STRUCT", "s", 4, [("a", 1, 0, 0)])
    w.records[-1] = w.records[-1][:12] + w.u32(0xFFFFFF, 1, 0)
    assert "type 2" in error_of(w.bytes())


@pytest.mark.parametrize("make", [
    lambda w: w.ref("PTR", 99),
    lambda w: w.array(1, 77, 4),
    lambda w: w.composite("UNION", "u", 4, [("a", 1, 0, 0), ("b", 1234, 0, 0)]),
    lambda w: w.func_proto(1, [("a", 50)]),
    lambda w: w.datasec(".data", 4, [(9, 0, 4)]),
    lambda w: w.func_proto(60, []),
])
def test_type_id_out_of_range(make):
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    make(w)
    message = error_of(w.bytes())
    assert "type 2" in message and "past the last (2)" in message and ".BTF+0x28" in message


def test_reference_cycle():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.ref("PTR", 3)
    w.ref("CONST", 4)
    w.ref("TYPEDEF", 2, "loop_t")
    btf = load(w.bytes())
    dump_raw(btf)  # the records themselves are fine
    for type_id in (2, 3, 4):
        with pytest.raises(BtfError, match=f"type {type_id}: reference cycle"):
            btf[type_id]
    w = rawbtf.BtfWriter()
    w.array(1, 1, 3)  # an array of itself
    with pytest.raises(BtfError, match="cycle 1 -> 1"):
        load(w.bytes())[1]


def test_void_parameter_and_bad_linkage():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.func_proto(1, [("", 0), ("b", 1)])
    w.func("f", 2, 5)
    btf = load(w.bytes())
    with pytest.raises(BtfError, match="parameter 0 is void"):
        btf[2]
    with pytest.raises(BtfError, match="unknown linkage 5"):
        btf[3]


def test_split_byte_order_differs():
    base = load(rawbtf.every_kind("little"), "base.btf")
    with pytest.raises(BtfError, match="byte order"):
        load_btf("split.btf", rawbtf.every_kind("big"), base)


def test_elf_without_btf():
    if not toolchains.TOOLCHAINS["x86_64"].available():
        pytest.skip("no gcc")
    obj = toolchains.compile_c("int f(int x) { return x; }\n", "x86_64", btf=False)
    with pytest.raises(BtfError, match="no .BTF section"):
        open_btf(str(obj))
    data = obj.read_bytes()
    with pytest.raises(BtfError, match="x.o: "):
        load_btf("x.o", data[:100])  # section headers gone


def test_missing_file():
    with pytest.raises(BtfError, match="/nonexistent/btf: No such file"):
        open_btf("/nonexistent/btf")


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "btfgen", "dump", *args], capture_output=True,
                          text=True, env=env, timeout=60, check=False)


def test_cli_not_btf():
    proc = cli("/etc/hostname")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("btfgen: error: /etc/hostname")


def test_cli_defect_late_in_the_file_leaves_no_partial_output(tmp_path):
    w = rawbtf.BtfWriter()
    for i in range(200):
        w.int_(f"int{i}", 4, 1)
    w.ref("PTR", 9999)
    path = tmp_path / "late.btf"
    path.write_bytes(w.bytes())
    proc = cli(str(path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "type 201" in proc.stderr and "late.btf: .BTF+0x" in proc.stderr
