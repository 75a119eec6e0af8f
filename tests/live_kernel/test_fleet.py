"""A fleet's recordings as one dataset, all of them real: `btfgen trace --record` run in two
guest kernels of two arches (Debian unstable's amd64 and arm64 7.2, the recording carried out
over the console), beside a recording of a user program traced with uprobes on this machine;
`btfgen decode --format parquet -o DIR` puts them in one dataset, and DuckDB and Spark (local)
answer the same questions over it with the same answers.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.btf.reader import open_btf

from . import build, python_guest, scenario
from .conftest import btf_for, kernel_for, unavailable

pytestmark = pytest.mark.live

duckdb = pytest.importorskip("duckdb")

GUESTS = {"unstable-amd64": "x86_64", "unstable-arm64": "arm64"}
FUNCTIONS = sorted({e.function for e in scenario.expectations(8, 4096)})
EMPTY_BUNDLE = b"BTFGBNDL" + bytes(16)
TARGET_C = Path(__file__).resolve().parents[1] / "live_uprobe" / "target.c"
USER_FUNCTIONS = ["add7", "take_big", "make_big"]
BEGIN, END = "-----BEGIN RECORDING-----", "-----END RECORDING-----"


def _guest_recording(name: str, tmp: Path) -> Path:
    """`btfgen trace --record` of the scenario's calls, in the guest."""
    k = kernel_for(name)
    t = k.target
    btf_path = btf_for(k)
    table = open_btf(str(btf_path))
    present = [f for f in FUNCTIONS if table.find_funcs(f)]
    out = tmp / f"trace-{name}"
    proc = subprocess.run(
        [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", str(btf_path), "--arch",
         t.arch, "--build", str(out), *present], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    g, py = python_guest.trace_guest(t, out)
    g.file("loader", build.loader(t).read_bytes(), 0o755)
    g.file("empty.bundle", EMPTY_BUNDLE)
    actions = " ".join(" ".join(a) for a in scenario.actions(table.pointer_size))
    g.step("record", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                     f"{py.python} btfgen_trace.py --run /trace --record /tmp/r.btfrec -- sh -c "
                     f"'/loader /empty.bundle {actions} >/dev/null; true' 2>&1 && "
                     f"echo {BEGIN} && {py.python} -m base64 /tmp/r.btfrec && echo {END}")
    boot = g.run(k)
    text, rc = boot.section("record")
    assert rc == 0 and BEGIN in text, f"{name}: recording failed (exit {rc}):\n{text[-2000:]}"
    encoded = text.split(BEGIN, 1)[1].split(END, 1)[0]
    path = tmp / f"{name}.btfrec"
    path.write_bytes(base64.b64decode("".join(encoded.split())))
    return path


def _user_recording(tmp: Path) -> Path:
    """target.c traced with uprobes here (this machine's kernel traces user space)."""
    exe = tmp / "target"
    subprocess.run(["gcc", "-O2", "-g", str(TARGET_C), "-o", str(exe)], check=True)
    path = tmp / "user.btfrec"
    proc = subprocess.run([sys.executable, "-m", "btfgen", "trace", "--record", str(path),
                           str(exe), *USER_FUNCTIONS], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode:
        unavailable(f"uprobes here: {proc.stderr.strip()[-300:]}")
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("fleet")
    recordings = [_guest_recording(name, tmp) for name in GUESTS] + [_user_recording(tmp)]
    root = tmp / "dataset"
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "parquet",
                           "-o", str(root), *map(str, recordings)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return root


# The questions, in the SQL both engines speak; `t` is one function's rows.
QUESTIONS = [
    # Every arch and kernel, with the kinds of events each recorded.
    ("shmem_file_llseek", "select arch, kernel, kind, count(*) from t group by 1, 2, 3 "
                          "order by 1, 2, 3"),
    # A typed filter: the 64-bit loff_t the loader seeked to (past 32 bits), in both kernels.
    ("shmem_file_llseek", f"select arch, arg_offset, arg_whence, count(*) from t where "
                          f"kind = 'entry' and arg_offset = {scenario.SEEK_TO} "
                          f"group by 1, 2, 3 order by 1"),
    # Entries joined with their exits: the returned offset is the one asked for.
    ("shmem_file_llseek", "select e.arch, count(*), min(x.ret), bool_and(x.duration_ns >= 0) "
                          "from t e join t x on e.recording = x.recording and e.call = x.call "
                          "where e.kind = 'entry' and x.kind = 'exit' group by 1 order by 1"),
    # The user program beside the kernels: a struct by value and an enum by name.
    ("take_big", "select arch, arg_k, arg_b.y, arg_c, count(*) from t where kind = 'entry' "
                 "group by 1, 2, 3, 4 order by 1"),
]


def _duckdb(root: Path) -> list[list[tuple]]:
    con = duckdb.connect()
    answers = []
    for function, query in QUESTIONS:
        t = con.sql(f"select * from read_parquet('{root}/*/*/function={function}/*.parquet', "  # noqa: F841
                    f"hive_partitioning=true, union_by_name=true, hive_types_autocast=false)")
        answers.append([tuple(r) for r in con.sql(query).fetchall()])
    return answers


def test_duckdb_over_two_kernels_and_a_program(fleet):
    seek, filtered, joined, user = _duckdb(fleet)
    assert {r[0] for r in seek} == set(GUESTS.values())
    assert {r[2] for r in seek} == {"entry", "exit"}
    assert [(r[0], r[1], r[2]) for r in filtered] == [
        (arch, scenario.SEEK_TO, 0) for arch in sorted(GUESTS.values())]
    assert [(r[0], r[2], r[3]) for r in joined] == [
        (arch, scenario.SEEK_TO, True) for arch in sorted(GUESTS.values())]
    assert user == [("x86_64", -9, -22, "BLUE", 1)]


def test_spark_gives_duckdbs_answers(fleet):
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        unavailable("no Java runtime (.ci/install installs one)")
    from btfgen.recordings.spark import local_session, read_function

    spark = local_session("btfgen-fleet-test")
    try:
        got = []
        for function, query in QUESTIONS:
            read_function(spark, str(fleet), function).createOrReplaceTempView("t")
            got.append([tuple(r) for r in spark.sql(query).collect()])
    finally:
        spark.stop()
    assert got == _duckdb(fleet)
