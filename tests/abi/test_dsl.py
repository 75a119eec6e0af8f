"""The description language: every shipped description parses; broken ones fail with
"file:line:col: what", one line; a prototype the rules cannot place is reported, not fatal."""

from __future__ import annotations

import re

import pytest
from abi_corpus import available, protos_btf

from btfgen.abi.arches import conventions
from btfgen.abi.dsl import parse_text
from btfgen.errors import AbiError
from btfgen.place import place_functions
from btfgen.resources import arches_dir



def _flat_riscv64() -> str:
    """riscv64.abi with its include inlined and its word-relative numbers in bytes: one text
    to break in known places."""
    text = (arches_dir() / "riscv64.abi").read_text()
    text = text.replace('  include "riscv.inc";\n', (arches_dir() / "riscv.inc").read_text())
    return re.sub(r"\b(\d+)w\b", lambda m: str(int(m.group(1)) * 8), text)


RISCV64 = _flat_riscv64()


def test_all_ten_descriptions_parse():
    assert sorted(c.name for c in conventions()) == sorted(
        ["x86_64", "i386", "arm64", "riscv64", "riscv32", "loongarch64", "s390x", "ppc64le", "arm",
         "mips64el"])
    for c in conventions():
        tramp = {"trampoline"} if c.name in TRAMPOLINE_ARCHES else set()
        assert set(c.ctxs) == {"pt_regs", "ftrace_regs"} | tramp, c.name
        assert set(c.ctx_rules) == tramp, c.name


# The arches whose BPF JIT builds trampolines (arch_prepare_bpf_trampoline), the ones whose
# description has a `ctx trampoline` and rules of its own.
TRAMPOLINE_ARCHES = {"x86_64"}


def line_col(text: str, pos: int) -> tuple[int, int]:
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


@pytest.mark.parametrize("old,new,at,message", [
    ("regs(gpr) | stack;", "regs(gpr) stack;", "stack;", "expected ';' or '|', got 'stack'"),
    ("pointer 8;", "pointer 8", "endian", "expected ';', got 'endian'"),
    ("when size <= 8", "when sizee <= 8", "sizee", "unknown quantity 'sizee'"),
    ("regs(gpr) | stack;", "regs(fpr) | stack;", "regs(fpr)", "unknown register pool fpr"),
    ("regs(gpr, split)", "regs(gpr, splt)", "splt", "unknown regs() option 'splt'"),
    ("a0 = a0 @ 80;", "a0 = a0 @ ;", ";", "expected NUMBER, got ';'"),
    ("arch riscv64 {", "arch riscv64 $", "$", "unexpected character '$'"),
    # registers named outside the pools: a pool, a ctx or the dwarf list must know them
    ("sret arg;", "sret reg q9;", "q9", "unknown sret register q9"),
    ("sret arg;", "sret arg; sret_exit q9;", "q9", "unknown sret_exit register q9"),
    # a statement said twice would silently replace the first
    ("pointer 8;", "pointer 8; pointer 4;", "pointer 4", "pointer given twice (first at "),
    ("sret arg;", "sret arg; sret reg a0;", "sret reg", "sret given twice"),
    ("elf EM_RISCV;", "elf EM_RISCV; elf EM_X86_64;", "elf EM_X86_64", "elf given twice"),
])
def test_syntax_and_meaning_errors_point_at_the_text(old, new, at, message):
    text = RISCV64.replace(old, new, 1)
    line, col = line_col(text, text.index(at, text.index(new)))
    with pytest.raises(AbiError) as e:
        parse_text(text, "riscv64.abi")
    msg = str(e.value)
    assert msg.startswith(f"riscv64.abi:{line}:{col}: ") and message in msg
    assert "\n" not in msg


def test_a_repeated_statement_names_both_places():
    text = RISCV64.replace("pointer 8;", "pointer 8;\n  pointer 4;", 1)
    first = line_col(text, text.index("pointer 8;"))
    second = line_col(text, text.index("pointer 4;"))
    with pytest.raises(AbiError) as e:
        parse_text(text, "riscv64.abi")
    assert str(e.value) == (f"riscv64.abi:{second[0]}:{second[1]}: pointer given twice "
                            f"(first at riscv64.abi:{first[0]}:{first[1]})")


def test_sret_registers_a_ctx_or_dwarf_list_names_are_accepted():
    # arm64's x8 is in no pool; a register only the ctx holds is as good
    text = RISCV64.replace("sret arg;", "sret reg a7; sret_exit sp;", 1)
    conv = parse_text(text, "riscv64.abi")
    assert (conv.sret_mode, conv.sret_reg, conv.sret_exit) == ("reg", "a7", "sp")


def test_missing_required_property():
    with pytest.raises(AbiError, match=r"^x\.abi:1:1: arch x: missing `endian`$"):
        parse_text("arch x { pointer 8; }", "x.abi")


def test_unplaceable_values_are_reported_and_the_run_continues():
    if not available("riscv64"):
        pytest.skip("no riscv64 toolchain")
    # A description that knows only words: doubles, structs and wide returns have no rule.
    text = RISCV64.replace("when size <= 16 => regs(gpr, split) | stack(align natural);", "")
    text = text.replace("otherwise => byref;", "when float => unavailable(\"no floats here\");")
    text = text.replace("when size <= 16 => regs(ret);", "when size <= 8 => regs(ret);")
    text = text.replace("otherwise => sret;", "")
    conv = parse_text(text, "words.abi")
    btf = protos_btf("riscv64")
    funcs = {f.name: f for f in btf.funcs()}
    lay = place_functions(btf, conv, [funcs["f_7s16"], funcs["r_s16"], funcs["f_ll"]])
    f_7s16, r_s16, f_ll = lay.functions
    s = f_7s16.args[7]
    assert s.pieces == () and s.unavailable.startswith("words.abi: no argument rule for")
    assert f_7s16.args[8].pieces[0].hwreg == "a7"  # later arguments still placed
    assert r_s16.ret.unavailable.startswith("words.abi: no return rule for")
    assert [a.pieces[0].hwreg for a in f_ll.args] == ["a0", "a1", "a2"]


def test_flat_text_is_the_description():
    flat = parse_text(RISCV64, "riscv64.abi")
    (shipped,) = [c for c in conventions() if c.name == "riscv64"]
    assert (flat.ctxs, flat.pools, flat.max_align, flat.slot) == \
        (shipped.ctxs, shipped.pools, shipped.max_align, shipped.slot)
    assert [r.conds for r in flat.arg_rules] == [r.conds for r in shipped.arg_rules]


def test_words_scale_with_the_pointer():
    (r32,) = [c for c in conventions() if c.name == "riscv32"]
    assert (r32.slot, r32.max_align, r32.ctxs["pt_regs"].size) == (4, 8, 144)
    assert r32.ctxs["pt_regs"].entries[0].offset == 40


def test_include_errors_name_their_file(tmp_path):
    (tmp_path / "x.abi").write_text('arch x {\n  pointer 8;\n  include "part.inc";\n}\n')
    with pytest.raises(AbiError, match=r"^x\.abi:3:11: include part\.inc: "):
        parse_text((tmp_path / "x.abi").read_text(), "x.abi", tmp_path)
    (tmp_path / "part.inc").write_text("  endian little;\n  slot 1w;\n  bogus;\n")
    with pytest.raises(AbiError, match=r"^part\.inc:3:"):
        parse_text((tmp_path / "x.abi").read_text(), "x.abi", tmp_path)
    (tmp_path / "part.inc").write_text('  include "part.inc";\n')
    with pytest.raises(AbiError, match="includes itself"):
        parse_text((tmp_path / "x.abi").read_text(), "x.abi", tmp_path)


def test_words_before_the_pointer_are_an_error():
    with pytest.raises(AbiError, match=r"^w\.abi:1:15: 2w: words before the `pointer` size"):
        parse_text("arch w { slot 2w; pointer 8; }", "w.abi")
