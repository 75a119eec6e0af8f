"""`btfgen trace` capturing what pointers point to, on this host with uprobes (root and BPF,
else skipped): strings by default for `char *` arguments, --capture paths through pointers into
a struct with bitfields, an enum, nested structs and char arrays, NULL pointers said as such; the
same values in text, --json, and --record decoded as text, jsonl and Parquet."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.probe import features

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "capture" / "capture_target.c"
ROOT = HERE.parents[1]
CAPTURES = "open_file: *how, how->label, how->next->name, how->next->label, how->lo, how->c"

EXPECTED = """\
open_file(dfd=-100, filename="/etc/hostname", how=0x@, *how={lo=6, mid=-200, c=BLUE(7), \
in={x=-42, tag='inner'}, name='headname', label=@, next=@}, how->label="a label", \
how->next->name='tail', how->next->label=<how->next->label is NULL>, how->lo=6, how->c=BLUE(7))
open_file -> 978
open_file(dfd=3, filename="/a/path/longer/t"..., how=0x@, *how={lo=5, mid=-3, c=RED(1), \
in={x=1, tag='t'}, name='tail', label=0, next=0}, how->label=<how->label is NULL>, \
how->next->name=<how->next is NULL>, how->next->label=<how->next is NULL>, how->lo=5, \
how->c=RED(1))
open_file -> 3706
open_file(dfd=4, filename=<filename is NULL>, how=0x0, *how=<how is NULL>, \
how->label=<how is NULL>, how->next->name=<how is NULL>, how->next->label=<how is NULL>, \
how->lo=<how is NULL>, how->c=<how is NULL>)
open_file -> 4
"""


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    import platform
    import shutil

    if platform.machine() != "x86_64" or not shutil.which("gcc") or not shutil.which("clang-19"):
        pytest.skip("needs an x86_64 host with gcc and clang-19")
    reason = features.bpf_programs().why
    if reason:
        pytest.skip(f"live uprobes unavailable: {reason}")
    out = tmp_path_factory.mktemp("capture") / "capture_target"
    subprocess.run(["gcc", "-O2", "-g", str(SOURCE), "-o", str(out)], check=True)
    return out


def _btfgen(*args, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def _shown(text: str) -> str:
    """Trace lines without addresses (they move) and call durations."""
    lines = [line for line in text.splitlines() if line.startswith("open_file")]
    lines = [re.sub(r" \(\d+\.\d{3} us\)$", "", line) for line in lines]
    lines = [re.sub(r"(0x|=)[0-9a-f]{5,}", r"\1@", line) for line in lines]
    return "".join(line + "\n" for line in lines)


def _flat(expected: str) -> str:
    return expected.replace("\\\n", "")


def test_text(exe):
    out = _btfgen("trace", "--string-size", "16", "--capture", CAPTURES, str(exe), "open_file")
    assert _shown(out.stdout) == _flat(EXPECTED)


def test_strings_are_default_and_can_be_left_out(exe):
    out = _btfgen("trace", str(exe), "open_file").stdout
    assert 'filename="/a/path/longer/than/sixteen/characters",' in out
    out = _btfgen("trace", "--no-strings", str(exe), "open_file").stdout
    assert "filename=0x" in out and '"' not in out


def _json_captures(lines) -> list:
    """The entries' captures, without the pointers inside *how (ASLR moves them run to run)."""
    out = [e.get("captures") for e in lines if e["kind"] == "entry"]
    for caps in out:
        if isinstance(caps["*how"], dict) and "label" in caps["*how"]:
            caps["*how"] = {k: v for k, v in caps["*how"].items() if k not in ("label", "next")}
    return out


def test_json_record_and_decode_give_the_same_values(exe, tmp_path):
    args = ["--string-size", "16", "--capture", CAPTURES, str(exe), "open_file"]
    live = [json.loads(line) for line in _btfgen("trace", "--json", *args).stdout.splitlines()
            if line.startswith("{")]
    caps = _json_captures(live)
    assert caps[0]["filename"] == "/etc/hostname"
    assert caps[0]["*how"]["in"] == {"x": -42, "tag": "inner"}
    assert caps[0]["*how"]["c"] == {"value": 7, "name": "BLUE"}
    assert caps[1]["filename"] == {"string": "/a/path/longer/t", "truncated": True}
    assert caps[2]["how->lo"] == {"unavailable": "how is NULL"}
    rec = tmp_path / "t.rec"
    _btfgen("trace", "--record", str(rec), *args)
    text = _btfgen("decode", str(rec)).stdout
    assert _shown(text) == _flat(EXPECTED)
    decoded = [json.loads(line) for line in
               _btfgen("decode", "--format", "jsonl", str(rec)).stdout.splitlines()]
    assert _json_captures(decoded) == caps
    pq = pytest.importorskip("pyarrow.parquet")
    _btfgen("decode", "-q", "--format", "parquet", "-o", str(tmp_path / "ds"), str(rec))
    (table,) = [pq.read_table(p) for p in (tmp_path / "ds").rglob("*.parquet")]
    rows = [r for r in table.to_pylist() if r["kind"] == "entry"]
    assert table.schema.field("cap:filename").type == "string"
    assert [r["cap:filename"] for r in rows] == ["/etc/hostname", "/a/path/longer/t", None]
    assert [r["cap:filename.truncated"] for r in rows] == [False, True, None]
    assert rows[0]["cap:*how"]["in"] == {"x": -42, "tag": "inner"}
    assert rows[0]["cap:*how"]["name"] == "headname" and rows[0]["cap:how->lo"] == 6
    assert [r["cap:how->next->name"] for r in rows] == ["tail", None, None]


DEEPER = """\
open_file(dfd=-100, filename="/etc/hostname", how=0x@, *how={lo=6, mid=-200, c=BLUE(7), \
in={x=-42, tag='inner'}, name='headname', label=@, next=@}, how->label="a label", \
*how->next={lo=5, mid=-3, c=RED(1), in={x=1, tag='t'}, name='tail', label=0, next=0}, \
how->next->label=<how->next->label is NULL>, *how->next->next=<how->next->next is NULL>)
open_file -> 978
open_file(dfd=3, filename="/a/path/longer/t"..., how=0x@, *how={lo=5, mid=-3, c=RED(1), \
in={x=1, tag='t'}, name='tail', label=0, next=0}, how->label=<how->label is NULL>, \
*how->next=<how->next is NULL>, how->next->label=<how->next is NULL>, \
*how->next->next=<how->next is NULL>)
open_file -> 3706
open_file(dfd=4, filename=<filename is NULL>, how=0x0, *how=<how is NULL>, \
how->label=<how is NULL>, *how->next=<how is NULL>, how->next->label=<how is NULL>, \
*how->next->next=<how is NULL>)
open_file -> 4
"""


def test_more_stars_follow_the_pointee_s_pointers(exe):
    """`***how`: the pointee, its string and struct pointers' pointees, and theirs: three
    levels, a NULL at any of them said as such."""
    out = _btfgen("trace", "--string-size", "16", "--capture", "open_file: ***how", str(exe),
                  "open_file")
    assert _shown(out.stdout) == _flat(DEEPER)


def test_bad_capture_is_one_line_exit_2(exe):
    proc = _btfgen("trace", "--capture", "open_file: how->nope", str(exe), "open_file",
                   ok=False)
    assert proc.returncode == 2
    assert proc.stderr == ("btfgen trace: --capture 'open_file: how->nope': column 17: "
                           "struct how has no member 'nope'\n")


def test_single_uprobes_give_the_same_values(exe):
    """--attach single: one uprobe and uretprobe a function, each with its BPF cookie (what a
    kernel without uprobe_multi, Debian 12's 6.1, gets in auto)."""
    out = _btfgen("trace", "--attach", "single", "--string-size", "16", "--capture", CAPTURES,
                  str(exe), "open_file")
    assert re.search(r"attaching one uprobe and uretprobe per function(, sleepable)? "
                     r"\(as asked\)", out.stderr), out.stderr
    assert _shown(out.stdout) == _flat(EXPECTED)
