"""--stack's readers of ELF objects, standard library only (probe/elf_file.py, eh_frame.py),
checked against binutils on real objects: every row of every FDE's CFA table against
`readelf --debug-dump=frames-interp` (the CFA rule and each register's column), the function
symbols against `nm`, the build id against `readelf -n`; and the stack part's layout against
trace.bpf.c's constants."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from btfgen.probe import eh_frame, elf_file, stack_wire

ROOT = Path(__file__).resolve().parents[2]
# x86_64's DWARF register numbers, as readelf names them
X86_64 = {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
          **{f"r{i}": i for i in range(8, 16)}, "ra": 16}
PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
volatile long sink;
long __attribute__((noipa)) leaf(long i) { return i * 3; }
long __attribute__((noipa)) with_frame(long n)
{
	char *buf = __builtin_alloca(n + 16);  /* a CFA from rbp */
	memset(buf, 1, n + 16);
	return leaf(buf[n]);
}
long __attribute__((noipa)) saves(long a, long b, long c, long d, long e, long f)
{
	long x = leaf(a), y = leaf(b), z = leaf(c), w = leaf(d), v = leaf(e);
	return x * y + z * w + v * f + leaf(x + y + z + w + v);
}
int main(int argc, char **argv) { sink = with_frame(argc) + saves(1, 2, 3, 4, 5, 6); return 0; }
"""


def _objects(tmp_path) -> list[Path]:
    if not shutil.which("gcc") or not shutil.which("readelf"):
        pytest.skip("no gcc or readelf")
    src = tmp_path / "p.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "p"
    subprocess.run(["gcc", "-O2", "-g", str(src), "-o", str(exe)], check=True)
    found = [exe]
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if libc.exists():
        found.append(libc)
    return found


def _readelf_rows(path: Path):
    """(pc, {column: text}) of every row readelf prints of the .eh_frame's FDEs (a row an FDE
    without rows of its own has: its CIE's first, at its start)."""
    # (binutils 2.40 exits 1 on libc.so.6 having printed every table: its status is not read)
    out = subprocess.run(["readelf", "--debug-dump=frames-interp", str(path)],
                         capture_output=True, text=True).stdout
    cies: dict[str, tuple] = {}
    for chunk in re.split(r"\n\n+", out):
        lines = chunk.strip().splitlines()
        if not lines:
            continue
        head = lines[0].split()
        if "CIE" in head and len(lines) >= 3:
            cols = lines[1].split()
            cies[head[0]] = (cols, lines[2].split())
        elif "FDE" in head:
            cie = re.search(r"cie=([0-9a-f]+)", lines[0]).group(1)
            start = int(re.search(r"pc=([0-9a-f]+)\.\.", lines[0]).group(1), 16)
            if len(lines) == 1:
                cols, first = cies[cie]
                yield start, dict(zip(cols[1:], first[1:]))
                continue
            cols = lines[1].split()
            for row in lines[2:]:
                # a register rule is two words: "r9 (r9)", "r1 (rdx)"
                parts = re.findall(r"r\d+ \(\w+\)|\S+", row)
                yield int(parts[0], 16), dict(zip(cols[1:], parts[1:]))


def _check_row(row: eh_frame.Row, want: dict, where: str) -> None:
    cfa = want["CFA"]
    if cfa == "exp":
        assert row.cfa_reg is None, where
    else:
        reg, off = re.fullmatch(r"(\w+)([+-]\d+)", cfa).groups()
        assert (row.cfa_reg, row.cfa_offset) == (X86_64[reg], int(off)), where
    for name, text in want.items():
        if name == "CFA" or name not in X86_64:
            continue
        rule = row.rules.get(X86_64[name])
        if text == "u":
            assert rule is None or rule[0] == eh_frame.UNDEFINED, (where, name)
        elif text == "s":
            assert rule is None or rule[0] == eh_frame.SAME, (where, name)
        elif text.startswith("c"):
            assert rule == (eh_frame.OFFSET, int(text[1:])), (where, name, rule)
        elif text.startswith("v"):
            assert rule == (eh_frame.VAL_OFFSET, int(text[1:])), (where, name, rule)
        elif text in ("exp", "vexp"):
            assert rule is not None and rule[0] == eh_frame.EXPRESSION, (where, name)
        else:
            other = re.fullmatch(r"r(\d+) \(\w+\)", text)
            assert other and rule == (eh_frame.REGISTER, int(other.group(1))), \
                (where, name, rule)


def test_every_cfa_row_as_readelf_reads_it(tmp_path):
    for path in _objects(tmp_path):
        elf = elf_file.ElfFile(path.read_bytes(), str(path))
        s = elf.section(".eh_frame")
        frames = eh_frame.EhFrame(elf.section_bytes(s), s.addr, elf.order, elf.wide)
        rows = list(_readelf_rows(path))
        assert len(rows) > (20 if path.name == "p" else 5000)
        for pc, want in rows:
            row = frames.row(pc)
            assert row is not None, f"{path}: no FDE at {pc:#x}"
            _check_row(row, want, f"{path}: {pc:#x}")
        # the rbp-based CFA of an alloca's frame is among them
        if path.name == "p":
            assert any(w["CFA"].startswith("rbp") for _, w in rows)


def test_symbols_and_build_id_as_binutils_read_them(tmp_path):
    for path in _objects(tmp_path):
        elf = elf_file.ElfFile(path.read_bytes(), str(path))
        nm = ["nm", "--defined-only", "-S"] + ([] if elf.has_symtab else ["-D"])
        out = subprocess.run([*nm, str(path)], check=True, capture_output=True,
                             text=True).stdout
        checked = 0
        for line in out.splitlines():
            parts = line.split()
            if len(parts) != 4 or parts[2] not in "Tti":
                continue
            addr, size, name = int(parts[0], 16), int(parts[1], 16), parts[3].split("@")[0]
            if not size:
                continue
            got = elf.symbol_at(addr + size - 1)
            assert got is not None and got[1] <= size - 1, (path, name)
            if got[0] == name:
                checked += 1
        assert checked > (3 if path.name == "p" else 1000)
        notes = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True,
                               text=True).stdout
        want = re.search(r"Build ID: ([0-9a-f]+)", notes)
        assert elf.build_id == (want.group(1) if want else None)


def test_an_address_in_no_symbol_is_not_named_by_the_one_below(tmp_path):
    path = _objects(tmp_path)[0]
    elf = elf_file.ElfFile(path.read_bytes(), str(path))
    starts, ends, names = elf.symbols()
    i = names.index("leaf")
    assert elf.symbol_at(starts[i]) == ("leaf", 0)
    # past its end, before the next symbol: padding, no function's
    gap = ends[i]
    if gap < starts[i + 1]:
        assert elf.symbol_at(gap) is None


def test_not_elf_is_one_line(tmp_path):
    with pytest.raises(elf_file.ElfError, match="not an ELF file"):
        elf_file.ElfFile(b"#!/bin/sh\n" * 10, "script")


def test_stack_part_layout_is_trace_bpf_cs():
    text = (ROOT / "btfgen" / "trace" / "trace.bpf.c").read_text()

    def define(name: str) -> int:
        return int(re.search(rf"#define {name} (\d+)", text).group(1))

    assert define("TRACE_STACK_FRAMES") == stack_wire.FRAMES
    assert define("TRACE_STACK_SLICE") == stack_wire.SLICE
    assert define("EVENT_STACK") == stack_wire.EVENT_STACK
    body = re.search(r"struct trace_stack \{(.*?)\};", text, re.S).group(1)
    fields = re.findall(r"__u(\d+) ([\w, ]+);", body)
    size = sum(int(bits) // 8 * len(names.split(",")) for bits, names in fields)
    assert size == stack_wire.HEAD.size == 40
