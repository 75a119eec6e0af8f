"""DWARF definitions tied to their symbols the way each arch lays functions out: GCC's
-fpatchable-function-entry no-ops between the symbol and DWARF's first instruction (riscv,
arm64, ppc64le with its global entry, s390x, arm), the Thumb bit of an arm symbol; never to
another function. And the coverage `btfgen check` states: a check that could not tie DWARF to
the symbols exits 3, not 0 over "0 disagree"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import toolchains

import btfgen
from btfgen.abi.arches import load_arch
from btfgen.abi.convention import SymbolEntry
from btfgen.commands.check import summarize
from btfgen.dwarf.compare import AGREE, NO_PARAMETERS
from btfgen.dwarf.entries import FunctionSymbol, by_entry
from btfgen.dwarf.reader import DwarfFile

# `keyed` begins its body with a no-op of its own, as the kernel's static-key and alternative
# sites do: the patch area's no-ops cannot be told from it.
SOURCE = """
struct pair { long a, b; };
__attribute__((noipa)) int sink(int a, long b, const char *c) { return a + b + !c; }
int first(int a, long b, const char *c) { return sink(a, b, c) + 1; }
static __attribute__((noinline)) int helper(int a, long b) { return sink(b, a, 0) * 3; }
int calls(int a) { return helper(a, a + 1) + sink(a, 0, 0); }
long pr(struct pair p, int x) { return p.a * x + p.b; }
int keyed(int a, long b) { __asm__ volatile("nop"); return sink(a, b, 0); }
void _start(void)
{ struct pair p = {1, 2}; sink(first(1, 2, 0) + calls(3) + pr(p, 4) + keyed(5, 6), 0, 0); }
"""
WITH_PARAMS = {"sink", "first", "helper", "calls", "pr", "keyed"}

# arch, extra flags: the kernel's patchable entries (riscv 8,4 with RVC, arm64 4,2, ppc64le's
# ftrace site after its global entry, s390x), riscv without RVC, arm's Thumb with and without.
LAYOUTS = [
    ("riscv64", ("-fpatchable-function-entry=8,4",)),
    ("riscv64", ("-march=rv64ima_zicsr", "-fpatchable-function-entry=4,2")),
    ("arm64", ("-fpatchable-function-entry=4,2",)),
    ("ppc64le", ("-fpatchable-function-entry=2",)),
    ("s390x", ("-fpatchable-function-entry=2",)),
    ("arm", ("-mthumb", "-fpatchable-function-entry=2")),
    ("arm", ("-mthumb",)),
    ("arm", ("-fpatchable-function-entry=2",)),
]


def _compile(arch: str, extra: tuple[str, ...], source: str = SOURCE):
    """(object with its .BTF, linked executable): pyelftools relocates no riscv object's
    DWARF, and the kernel is a linked image too."""
    if not (toolchains.TOOLCHAINS[arch].available() and toolchains.have("pahole")):
        pytest.skip(f"no toolchain for {arch}")
    obj = toolchains.compile_c(source, arch, extra=extra)
    return obj, toolchains.link_exe(obj, arch)


@pytest.mark.parametrize("arch,extra", LAYOUTS, ids=[f"{a}{''.join(e)}" for a, e in LAYOUTS])
def test_every_function_is_tied_and_compared(arch, extra):
    obj, exe = _compile(arch, extra)
    conv = load_arch(arch)
    with DwarfFile(str(exe), conv) as dwarf:
        defs = {f.name: f for f in dwarf.functions() if f.name in WITH_PARAMS}
        values = {s.name: s["st_value"] for s in dwarf.elf.get_section_by_name(".symtab")
                  .iter_symbols()}
    # The layout under test: DWARF's first instruction is not the symbol's value.
    assert any(defs[n].address != values[n] for n in WITH_PARAMS), (defs, values)
    verdicts = {v.name: v for v in btfgen.open(str(obj), arch=arch, dwarf=str(exe)).check()}
    assert {n: verdicts[n].verdict for n in WITH_PARAMS} == {n: AGREE for n in WITH_PARAMS}
    s = summarize(list(verdicts.values()))
    assert (s["compared"], s["comparable"], s["coverage_percent"]) == (6, 6, 100.0), s


def test_ppc64le_global_entry_is_the_tie():
    """ELFv2: a function that sets up its TOC has a global entry (the symbol) and a local one
    past the setup (st_other); DWARF names the global entry, and the TOC setup changes only r2,
    so the arguments' places at entry are the same at both."""
    obj, exe = _compile("ppc64le", ())
    conv = load_arch("ppc64le")
    with DwarfFile(str(exe), conv) as dwarf:
        local = {s.name: s["st_other"]["local"] for s in
                 dwarf.elf.get_section_by_name(".symtab").iter_symbols()
                 if s["st_info"]["type"] == "STT_FUNC"}
        defs = {f.name: f for f in dwarf.functions() if f.name in WITH_PARAMS}
        starts = {n: a for a, ns in dwarf.symbols().items() for n in ns}
    assert any(local[n] > 1 for n in WITH_PARAMS), local  # a local entry past the global one
    assert {n: defs[n].address for n in WITH_PARAMS} == {n: starts[n] for n in WITH_PARAMS}
    verdicts = {v.name: v for v in btfgen.open(str(obj), arch="ppc64le", dwarf=str(exe)).check()}
    assert {verdicts[n].verdict for n in WITH_PARAMS} == {AGREE}


def _sym(name: str, address: int, size: int = 32) -> FunctionSymbol:
    return FunctionSymbol(name, address, size, 1, False)


class _Code:
    def __init__(self, code: dict[int, bytes]):
        self.code = code

    def read(self, s: FunctionSymbol, n: int) -> bytes:
        return self.code.get(s.address, b"")[:n]


RISCV = SymbolEntry((bytes.fromhex("0100"), bytes.fromhex("13000000")))


def test_each_no_op_of_the_run_and_the_one_after():
    # c.nop x4 (the patch area), nop (the body's own), then li a0,-22.
    code = {0x100: bytes.fromhex("0100" * 4 + "13000000" + "2955")}
    got = by_entry([_sym("f", 0x100)], RISCV, _Code(code))
    assert got == {0x100: ["f"], 0x102: ["f"], 0x104: ["f"], 0x106: ["f"], 0x108: ["f"],
                   0x10c: ["f"]}


def test_no_tie_past_the_symbol_or_onto_another_symbol():
    code = {0x100: bytes.fromhex("0100" * 4), 0x200: bytes.fromhex("0100" * 2 + "2955")}
    # `pad` is no-ops only: what follows it is not its code. `g` starts where f's run ends.
    got = by_entry([_sym("pad", 0x100, size=8), _sym("f", 0x200), _sym("g", 0x204)], RISCV,
                   _Code(code))
    assert got == {0x100: ["pad"], 0x102: ["pad"], 0x104: ["pad"], 0x106: ["pad"],
                   0x200: ["f"], 0x202: ["f"], 0x204: ["g"]}


def test_no_no_ops_no_tie_past_the_symbol():
    code = {0x100: bytes.fromhex("90" * 8)}
    assert by_entry([_sym("f", 0x100)], SymbolEntry(), _Code(code)) == {0x100: ["f"]}


def _strip(exe, tmp_path, *names: str):
    out = tmp_path / f"{exe.stem}-{'-'.join(names)}.elf"
    subprocess.run(["llvm-objcopy-19", *(f"--strip-symbol={n}" for n in names), str(exe),
                    str(out)], check=True)
    return out


def test_a_function_without_symbol_is_not_tied_to_its_neighbour(tmp_path):
    """helper's symbol stripped: its DWARF definition is `no ELF symbol`, never the function
    before it, though no-ops lie between."""
    obj, exe = _compile("riscv64", LAYOUTS[0][1])
    stripped = _strip(exe, tmp_path, "helper")
    verdicts = {v.name: v for v in btfgen.open(str(obj), arch="riscv64",
                                                     dwarf=str(stripped)).check()}
    assert verdicts["helper"].verdict == "no ELF symbol"
    assert {verdicts[n].verdict for n in WITH_PARAMS - {"helper"}} == {AGREE}


def _check(exe, obj, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "btfgen", "check", str(exe), "--btf", str(obj),
                           *args], capture_output=True, text=True)


def test_low_coverage_exits_3(tmp_path):
    obj, exe = _compile("riscv64", LAYOUTS[0][1])
    proc = _check(exe, obj)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 of 6 functions with parameters compared (100.0%): 6 agree, 0 disagree" \
        in proc.stdout
    # No symbols to tie DWARF to: nothing is compared, and that is not an agreement.
    bare = _strip(exe, tmp_path, *sorted(WITH_PARAMS))
    proc = _check(bare, obj)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "0 of 6 functions with parameters compared (0.0%): 0 agree, 0 disagree" in proc.stdout
    assert "coverage below 80%" in proc.stdout
    doc = json.loads(_check(bare, obj, "--json").stdout)
    assert (doc["summary"]["compared"], doc["summary"]["comparable"],
            doc["summary"]["coverage_percent"], doc["coverage_below_minimum"]) == (0, 6, 0.0, True)
    assert _check(bare, obj, "--min-coverage", "0").returncode == 0
    # One of six not tied (83.3%): enough for the default 80, not for 90.
    one = _strip(exe, tmp_path, "helper")
    assert _check(one, obj).returncode == 0
    assert _check(one, obj, "--min-coverage", "90").returncode == 3
    bad = _check(one, obj, "--min-coverage", "150")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_a_function_without_parameters_is_not_comparable(tmp_path):
    obj, exe = _compile("riscv64", LAYOUTS[0][1])
    s = summarize(btfgen.open(str(obj), arch="riscv64", dwarf=str(exe)).check())
    assert (s["functions"], s["compared"], s["comparable"]) == (7, 6, 6), s  # _start: none
    assert s["not_comparable"] == {NO_PARAMETERS: 1}


def test_dwarf_correction_warns_when_it_checked_few(tmp_path):
    obj, exe = _compile("riscv64", LAYOUTS[0][1])

    def layout(elf) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "btfgen", "layout", str(obj), "--dwarf",
                               str(elf), "--json"], capture_output=True, text=True)

    proc = layout(exe)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    bare = _strip(exe, tmp_path, *sorted(WITH_PARAMS))
    proc = layout(bare)
    assert proc.returncode == 0, proc.stderr
    assert f"btfgen: warning: DWARF ({bare}) checked 0 of 6 functions with parameters " \
        f"compared (0.0%): the others are placed from their prototype alone" in proc.stderr


def _riscv64_text() -> str:
    from btfgen.resources import arches_dir

    text = (arches_dir() / "riscv64.abi").read_text()
    return text.replace('  include "riscv.inc";\n', (arches_dir() / "riscv.inc").read_text())


def test_symbol_entry_statement():
    from btfgen.abi.dsl import parse_text

    text = _riscv64_text()
    assert parse_text(text, "riscv64.abi").symbol_entry == RISCV
    both = text.replace('symbol_entry { nop "0100" "13000000"; }',
                        'symbol_entry { nop "0100"; thumb_nop "00bf"; nop "13000000"; }')
    assert parse_text(both, "riscv64.abi").symbol_entry == SymbolEntry(
        RISCV.nops, (bytes.fromhex("00bf"),))
    assert load_arch("x86_64").symbol_entry == SymbolEntry()  # gcc and clang: the symbol


@pytest.mark.parametrize("bad,message", [
    ('nop "01x0";', 'nop: "01x0" is not hex bytes'),
    ('nop "";', "nop: an empty encoding"),
    ("nop 1;", "expected STRING"),
])
def test_symbol_entry_errors_point_at_the_text(bad, message):
    from btfgen.abi.dsl import parse_text
    from btfgen.errors import AbiError

    text = _riscv64_text().replace('nop "0100" "13000000";', bad)
    with pytest.raises(AbiError) as e:
        parse_text(text, "riscv64.abi")
    assert message in str(e.value) and str(e.value).startswith("riscv64.abi:"), e.value
