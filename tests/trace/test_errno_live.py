"""A user function's errno, live (issue 48, item 2): never the kernel's guess (-1 is not EPERM);
a -1 or NULL is named by the error of the last system call its thread made inside the call
(trace.bpf.c's raw_syscalls:sys_exit program), where that call failed, and shown bare where
none did. libc's open on a missing file (the issue's own command, and open() called by a
program's function), a function whose -1 comes with no system call (sigaddset's EINVAL, and a
plain -1 after an earlier ENOENT and EINVAL on its thread), one whose last system call
succeeded; text, --json, --record read back by `btfgen decode` (text, jsonl) and in the Parquet
dataset's errno columns; --errors=WHAT and a --filter on $retval choosing what an error is; a
WHAT that makes no sense said in one line, exit 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import live_needs
import pytest
from errno_target import FUNCS, TARGET

from btfgen.trace import symbols

ROOT = Path(__file__).resolve().parents[2]
FCNTL = "/usr/include/fcntl.h"
ENV = dict(os.environ, LC_ALL="C", PYTHONPATH=str(ROOT))
TOOL = [sys.executable, "-m", "btfgen", "trace"]
DECODE = [sys.executable, "-m", "btfgen", "decode"]

_WHY_NOT = live_needs.why_not()
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("errno")
    (d / "target.c").write_text(TARGET)
    subprocess.run(["gcc", "-O2", "-g", str(d / "target.c"), "-o", str(d / "target")],
                   check=True, capture_output=True)
    return d / "target"


def _run(args, status: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=ENV,
                          cwd=ROOT)
    assert proc.returncode == status, proc.stderr
    return proc


def _missing(tmp_path) -> str:
    return str(tmp_path / "no-such-dir" / "file")


def test_the_issues_libc_open_is_enoent_never_eperm():
    if symbols.locate("libc.so.6")[1] is None or not os.path.exists(FCNTL):
        pytest.skip("no libc.so.6 in ldconfig's cache, or no <fcntl.h>")
    proc = _run([*TOOL, "--errors", "--header", FCNTL, "libc.so.6", "open", "--", "cat",
                 "/nonexistent/file"], status=1)  # cat's own status
    lines = [re.sub(r" \(\d+\.\d{3} us\)$", "", x) for x in proc.stdout.splitlines()]
    assert lines == ['open(__file="/nonexistent/file", __oflag=0) -> -1 ENOENT'], proc.stdout


def test_the_issues_libc_open_recorded_decoded_and_in_the_dataset(tmp_path):
    """The same call recorded: `btfgen decode` says -1 ENOENT in text and jsonl, as the trace
    printed it, and the Parquet dataset's exit row has errno 2, ENOENT (its entry row null)."""
    if symbols.locate("libc.so.6")[1] is None or not os.path.exists(FCNTL):
        pytest.skip("no libc.so.6 in ldconfig's cache, or no <fcntl.h>")
    rec = tmp_path / "open.btfrec"
    _run([*TOOL, "--record", str(rec), "--header", FCNTL, "libc.so.6", "open", "--", "cat",
          "/nonexistent/file"], status=1)  # cat's own status
    text = [re.sub(r" \(\d+\.\d{3} us\)$", "", x)
            for x in _run([*DECODE, str(rec)]).stdout.splitlines()]
    assert text == ['open(__file="/nonexistent/file", __oflag=0)', "open -> -1 ENOENT"], text
    errors = [re.sub(r" \(\d+\.\d{3} us\)$", "", x)
              for x in _run([*DECODE, "--errors", str(rec)]).stdout.splitlines()]
    assert errors == ['open(__file="/nonexistent/file", __oflag=0) -> -1 ENOENT'], errors
    exits = [e for e in map(json.loads, _run([*DECODE, "--format", "jsonl", str(rec)]
                                             ).stdout.splitlines()) if e["kind"] == "exit"]
    assert [(e["function"], e["return"], e.get("errno")) for e in exits] == \
        [("open", -1, {"value": 2, "name": "ENOENT"})]
    pq = pytest.importorskip("pyarrow.parquet")
    _run([*DECODE, "-q", "--format", "parquet", "-o", str(tmp_path / "ds"), str(rec)])
    (part,) = (tmp_path / "ds").glob("host=*/kernel=*/function=open/*.parquet")
    rows = pq.read_table(part, columns=["kind", "ret", "errno", "errno_name"]).to_pylist()
    assert sorted(rows, key=lambda r: r["kind"]) == [
        {"kind": "entry", "ret": None, "errno": None, "errno_name": None},
        {"kind": "exit", "ret": -1, "errno": 2, "errno_name": "ENOENT"}]


def test_a_recordings_bare_minus_1_is_null_in_the_dataset(target, tmp_path):
    """A -1 with no failed system call inside its call (plain_fail, bad_signal) and one whose
    last system call succeeded (fail_then_ok) are bare when decoded and null in the dataset;
    open_missing's and fopen_missing's NULL are ENOENT in both."""
    pq = pytest.importorskip("pyarrow.parquet")
    missing = _missing(tmp_path)
    rec = tmp_path / "errno.btfrec"
    _run([*TOOL, "--record", str(rec), str(target), *FUNCS, "--", missing])
    decoded = [x.split(" (")[0] for x in _run([*DECODE, str(rec)]).stdout.splitlines()
               if " -> " in x]
    assert decoded == ["open_missing -> -1 ENOENT", "fopen_missing -> 0x0 ENOENT",
                       "bad_signal -> -1", "plain_fail -> -1", "neg_fail -> -2",
                       "fail_then_ok -> -1", "count -> 1", "count -> 7"], decoded
    _run([*DECODE, "-q", "--format", "parquet", "-o", str(tmp_path / "ds"), str(rec)])
    got = {}
    for part in (tmp_path / "ds").glob("host=*/kernel=*/function=*/*.parquet"):
        function = part.parent.name.split("=", 1)[1]
        for row in pq.read_table(part, columns=["timestamp", "kind", "errno", "errno_name"]
                                 ).to_pylist():
            if row["kind"] == "exit":
                got.setdefault(function, []).append(
                    (row["timestamp"], row["errno"], row["errno_name"]))
    assert {f: [x[1:] for x in sorted(v)] for f, v in got.items()} == {
        "open_missing": [(2, "ENOENT")], "fopen_missing": [(2, "ENOENT")],
        "bad_signal": [(None, None)], "plain_fail": [(None, None)], "neg_fail": [(None, None)],
        "fail_then_ok": [(None, None)], "count": [(None, None), (None, None)]}


def test_errno_named_only_where_a_system_call_in_the_call_failed(target, tmp_path):
    missing = _missing(tmp_path)
    proc = _run([*TOOL, "--errors=negative,null", str(target), *FUNCS, "--", missing])
    shown = [re.sub(r" \(\d+\.\d{3} us\)$", "", x) for x in proc.stdout.splitlines()
             if " -> " in x]
    assert shown == [
        f'open_missing(path="{missing}") -> -1 ENOENT',
        f'fopen_missing(path="{missing}") -> 0x0 ENOENT',
        "bad_signal(sig=-5) -> -1",  # errno is EINVAL, set with no system call: not known
        "plain_fail(x=-3) -> -1",  # errno still EINVAL, the last failed call ENOENT: neither
        "neg_fail(x=-3) -> -2",  # not -1: never named
        f'fail_then_ok(path="{missing}") -> -1',  # its last system call succeeded
    ]
    # what the program's errno was: the names shown are its, the bare ones not guessed
    assert "open_missing -1 2\n" in proc.stdout  # ENOENT
    assert "bad_signal -1 22\n" in proc.stdout  # EINVAL
    assert "plain_fail -1 22\n" in proc.stdout


def test_every_exit_json_and_a_recording(target, tmp_path):
    missing = _missing(tmp_path)
    text = _run([*TOOL, str(target), "open_missing", "plain_fail", "--", missing]).stdout
    exits = [re.sub(r" \(\d+\.\d{3} us\)$", "", x) for x in text.splitlines() if " -> " in x]
    assert exits == ["open_missing -> -1 ENOENT", "plain_fail -> -1"]
    events = [json.loads(x) for x in _run([*TOOL, "--json", str(target), "open_missing",
                                           "plain_fail", "--", missing]).stdout.splitlines()
              if x.startswith("{")]
    got = [(e["function"], e["return"], e.get("errno")) for e in events if e["kind"] == "exit"]
    assert got == [("open_missing", -1, {"value": 2, "name": "ENOENT"}),
                   ("plain_fail", -1, None)]
    rec = tmp_path / "errno.btfrec"
    _run([*TOOL, "--record", str(rec), str(target), "open_missing", "plain_fail", "--",
          missing])
    decoded = _run([*DECODE, "--errors", str(rec)]).stdout.splitlines()
    assert [re.sub(r" \(\d+\.\d{3} us\)$", "", x) for x in decoded] == [
        f'open_missing(path="{missing}") -> -1 ENOENT', "plain_fail(x=-3) -> -1"]


def test_what_an_error_is(target, tmp_path):
    missing = _missing(tmp_path)

    def errors(*opts):
        out = _run([*TOOL, *opts, str(target), "plain_fail", "neg_fail", "fopen_missing",
                    "count", "--", missing]).stdout
        return [x.split("(")[0] for x in out.splitlines() if " -> " in x]
    assert errors("--errors") == ["fopen_missing", "plain_fail"]  # the C library's -1, NULL
    assert errors("--errors=-1") == ["plain_fail"]
    assert errors("--errors=null") == ["fopen_missing"]
    assert errors("--errors=-1,negative") == ["plain_fail", "neg_fail"]
    # a --filter on $retval says what an error is: every exit it lets through
    out = _run([*TOOL, "--errors", "--filter", "count: $retval >= 7", str(target), "count",
                "--", missing]).stdout
    assert [re.sub(r" \(\d+\.\d{3} us\)$", "", x) for x in out.splitlines() if " -> " in x] \
        == ["count(x=7) -> 7"]


@pytest.mark.parametrize("what", ["bogus", "", "-1,nul", "-2"])
def test_a_what_that_makes_no_sense_is_one_line_exit_2(target, tmp_path, what):
    proc = _run([*TOOL, f"--errors={what}", str(target), "count"], status=2)
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"btfgen trace: --errors={what}: ")
    rec = tmp_path / "none.btfrec"
    rec.write_bytes(b"")
    proc = _run([*DECODE, f"--errors={what}", str(rec)], status=2)
    assert len(proc.stderr.splitlines()) == 1 and f"--errors={what}: " in proc.stderr
