"""`Target.generate`: the files `btfgen -o DIR` writes, with captures and filters, from the
library; the command is this call and a write, so both give the same bytes."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import btfgen
from btfgen.errors import BtfgenError
from btfgen.typed.capture import CaptureOptionError
from btfgen.typed.filter import FilterOptionError

SOURCE = Path(__file__).resolve().parents[1] / "codegen" / "capture" / "header_target.c"
CAPTURE = "open_file: how->next->name, how->mid"
FILTER = 'open_file: prefix(filename, "/etc/") && dfd < 0'


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "header_target"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(out), str(SOURCE)], check=True)
    return out


def test_the_command_writes_what_generate_gives(program, tmp_path):
    cli = subprocess.run(
        [sys.executable, "-m", "btfgen", str(program), "--func", "open_file", "--lang",
         "bpf,python", "--self-contained", "-q", "-o", str(tmp_path), "--capture-strings",
         "--capture", CAPTURE, "--filter", FILTER, "--string-size", "40"],
        capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    files = btfgen.open(str(program)).generate(
        ["open_file"], ("bpf", "python"), strings=True, string_size=40, captures=[CAPTURE],
        filters=[FILTER], self_contained=True)
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert written == files
    assert "char filename[42];" in files["btfgen.bpf.h"]
    assert "btfgen_filter_open_file(" in files["btfgen_filter.h"]
    module = types.ModuleType("g")
    exec(files["btfgen_x86_64.py"], module.__dict__)
    names = [c.name for c in module.function("open_file").captures]
    assert names == ["how->next->name", "how->mid", "filename"]  # named first, then defaults


def test_without_captures_the_files_are_the_plain_ones(program):
    t = btfgen.open(str(program))
    plain = t.generate(["open_file"], ("bpf",), self_contained=True)
    caught = t.generate(["open_file"], ("bpf",), captures=[CAPTURE], self_contained=True)
    assert "btfgen_captures_open_file" not in plain["btfgen.bpf.h"]
    assert "btfgen_captures_open_file" in caught["btfgen.bpf.h"]
    assert set(plain) == {"btfgen.bpf.h", "btfgen_specs.h"}


@pytest.mark.parametrize("kwargs, error, text", [
    ({"captures": ["open_file: how->nxt"]}, CaptureOptionError,
     "--capture 'open_file: how->nxt': column 17: struct how has no member 'nxt'"),
    ({"captures": ["other: x"]}, CaptureOptionError, "'other' is not among the functions"),
    ({"filters": ["open_file: how > 1"]}, FilterOptionError,
     "--filter 'open_file: how > 1': column 12"),
    ({"filters": ["open_file: dfd >"]}, FilterOptionError, "--filter 'open_file: dfd >'"),
    ({"strings": True, "string_size": 4094}, BtfgenError, "--value-size: from 1 to 4093"),
    ({"filters": ["open_file: dfd > 0"], "langs": ("python",)}, BtfgenError,
     "filters are BPF C"),
])
def test_bad_captures_and_filters_name_what_is_wrong(program, kwargs, error, text):
    with pytest.raises(error) as e:
        btfgen.open(str(program)).generate(["open_file"], **kwargs)
    assert text in str(e.value)
    assert "\n" not in str(e.value)


def test_a_name_that_matches_nothing(program):
    with pytest.raises(KeyError, match="no function named gone"):
        btfgen.open(str(program)).generate(["open_file", "gone"])


def test_what_a_deeper_capture_leaves_out_is_said(tmp_path):
    header = tmp_path / "deep.h"
    header.write_text("struct node { const char *label; union { long n; char *text; } u; };\n"
                      "int walk(struct node *head);\n")
    from btfgen.target import BtfgenWarning

    with pytest.warns(BtfgenWarning, match=r"walk: \*\*head leaves out head->u: pointers in a "
                                           r"union"):
        files = btfgen.open(headers=[str(header)], arch="x86_64").generate(
            ["walk"], ("bpf",), captures=["walk: **head"])
    assert "head__label[258]" in files["btfgen.bpf.h"]
    cli = subprocess.run([sys.executable, "-m", "btfgen", "--header", str(header), "--arch",
                          "x86_64", "--func", "walk", "--lang", "bpf", "-q", "-o",
                          str(tmp_path / "out"), "--capture", "walk: **head"],
                         capture_output=True, text=True)
    assert cli.returncode == 0
    assert cli.stderr == ("btfgen: warning: capture walk: **head leaves out head->u: pointers "
                          "in a union (which member is in use is not known)\n")


TRAMPOLINE_PROGRAM = r"""
#include "btfgen.bpf.h"
#include "btfgen_specs.h"
#include "btfgen_filter.h"
char LICENSE[] SEC("license") = "GPL";
struct btfgen_args_open_file a;
struct btfgen_captures_open_file c;
struct btfgen_record rec;
SEC("fentry/open_file") int typed(__u64 *ctx)
{
	if (btfgen_entry_open_file(ctx, &a) || !btfgen_filter_open_file(&a))
		return 0;
	return btfgen_capture_open_file(&a, &c);
}
SEC("fentry.multi/*") int generic(__u64 *ctx)
{
	const struct btfgen_spec *s = btfgen_spec_at(BTFGEN_SPEC_open_file);

	return s ? btfgen_generic_decode(ctx, BTFGEN_SP(ctx), s, 0, &rec) : 0;
}
"""


def test_the_trampoline_ctx_with_captures_and_filters_compiles(program, tmp_path):
    """--ctx trampoline: the per-function decoder, its captures and its filter, and the generic
    decoder whose table holds the capture ops, in fentry and fentry.multi programs."""
    from btfgen.decoder.generic import CAP_ROOT

    t = btfgen.open(str(program), ctx="trampoline", dwarf=None)
    files = t.generate(["open_file"], ("bpf", "python"), strings=True, string_size=40,
                       captures=[CAPTURE], filters=[FILTER], self_contained=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert "bpf_get_func_arg(" in files["btfgen.bpf.h"]
    module = types.ModuleType("g")
    exec(files["btfgen_x86_64.py"], module.__dict__)
    fn = module.function("open_file")
    # What the user named comes before the default string (capture.py's order).
    assert [c.name for c in fn.captures] == ["how->next->name", "how->mid", "filename"]
    # The table's row: its ops, {src, dst, size, from[, space]}, start the captures (CAP_ROOT).
    row = next(line for line in files["btfgen_specs.h"].splitlines() if "/* open_file */" in line)
    assert re.search(r"\{ \d+, \d+, \d+, %d[ ,]" % CAP_ROOT, row), row
    (tmp_path / "t.bpf.c").write_text(TRAMPOLINE_PROGRAM)
    proc = subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror",
                           "-D__TARGET_ARCH_x86", "-c", str(tmp_path / "t.bpf.c"), "-o",
                           str(tmp_path / "t.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
