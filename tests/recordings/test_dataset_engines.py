"""Recordings of two arches in one dataset, read back by DuckDB and by Spark (local mode): the
same counts, the same typed filter, the same join of entries and exits.

The x86_64 recording is real: target.c (tests/live_uprobe) traced with uprobes by `btfgen
trace --record` on this machine. The arm64 one is synthetic (tests/recordings/synth.py: the arm64
golden module's decoders, the byte layout the tracer writes): a real one needs a guest kernel
boot (tests/live_kernel, ~30-60 s) for what the file format already pins down. Where uprobes
are not available the x86_64 recording is synthetic too, and test_the_real_recording says so
by skipping.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from btfgen.recordings.partitions import segment

pytest.importorskip("pyarrow")
duckdb = pytest.importorskip("duckdb")

LIVE = Path(__file__).resolve().parents[1] / "live_uprobe"
FUNCS = ["add7", "take_pair", "take_big", "make_pair", "make_big", "many", "take_flags"]
RUNS = 2  # target.c calls each function once: two runs, two recordings of one host


def _real_x86_64(tmp: Path) -> list[Path]:
    sys.path.insert(0, str(LIVE))
    try:
        import live_harness as harness
    finally:
        sys.path.remove(str(LIVE))
    if harness.skip_reason():
        return []
    harness.tracefs.mount_tracefs()
    exe, _ = harness.build_target(tmp)
    recs = [tmp / f"x86_64-{i}.btfrec" for i in range(RUNS)]
    for rec in recs:
        proc = subprocess.run([sys.executable, "-m", "btfgen", "trace", "--record", str(rec),
                               str(exe), *FUNCS], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    return recs


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    recs = _real_x86_64(tmp)
    real = bool(recs)
    if not real:
        recs.append(tmp / "x86_64.btfrec")
        datasets.write(recs[-1], "x86_64", 800, 11, host="x86-host", kernel="6.1.0-amd64")
    recs.append(tmp / "arm64.btfrec")
    datasets.write(recs[-1], "arm64", 800, 12, host="arm-host", kernel="6.12.0-arm64")
    out = tmp / "ds"
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "parquet",
                           "-o", str(out), *map(str, recs)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out, real


def _function(con_or_spark, root: Path, function: str | None, engine: str):
    """One function's rows, or (None) every row's event columns."""
    from btfgen.recordings import spark as btfgen_spark

    if engine == "duckdb" and function is None:
        return con_or_spark.sql(
            f"select {', '.join(btfgen_spark.EVENT_COLUMNS)} from read_parquet("
            f"'{root}/*/*/*/*.parquet', hive_partitioning=true, union_by_name=true, "
            f"hive_types_autocast=false)")
    if engine == "duckdb":
        return con_or_spark.sql(
            f"select * from read_parquet("
            f"'{root}/*/*/{segment('function', function)}/*.parquet', "
            f"hive_partitioning=true, union_by_name=true, hive_types_autocast=false)")
    if function is None:
        return btfgen_spark.read_events(con_or_spark, str(root))
    return btfgen_spark.read_function(con_or_spark, str(root), function)


# The questions, in the SQL both engines speak; `t` is one function's rows.
FLEET = ("select host, kernel, arch, function, kind, count(*) as n, count(call) as paired, "
         "min(time) > timestamp '2020-01-01' as recent from t group by 1, 2, 3, 4, 5 "
         "order by 1, 2, 3, 4, 5")
COUNTS = "select host, kernel, arch, kind, count(*) as n from t group by 1, 2, 3, 4 order by 1, 2, 3, 4"
JOIN = ("select e.host, e.tid, count(*) as calls, sum(x.duration_ns) as took, "
        "min(x.duration_ns) as shortest from t e join t x on e.recording = x.recording "
        "and e.call = x.call and e.kind = 'entry' and x.kind = 'exit' group by 1, 2 "
        "order by 1, 2")


def _queries(root: Path, real: bool) -> list[tuple[str, str, str]]:
    """(function, query, what) triples: counts, a typed filter, a join."""
    if real:
        # add7(a=-1, ..., e=4000000000, ...): e is an unsigned 32-bit column.
        typed = ("add7", "select host, arg_a, arg_e, count(*) from t where arg_e > 3000000000 "
                         "and arg_a < 0 group by 1, 2, 3 order by 1, 2, 3")
        both = "take_pair"  # arm64's synthetic functions differ: a count of one arch
    else:
        typed = ("scalars", "select host, count(*), max(arg_e) from t where arg_e > 0 and "
                            "arg_h < 2147483648 group by 1 order by 1")
        both = "scalars"
    return [(None, FLEET, "the fleet"), ("scalars", COUNTS, "counts"), (both, COUNTS, "counts"),
            (typed[0], typed[1], "filter"), ("scalars", JOIN, "join"),
            (typed[0], JOIN, "join")]


def _rows(result) -> list[tuple]:
    return [tuple(int(v) if hasattr(v, "as_integer_ratio") and not isinstance(v, float)
                  else v for v in row) for row in result]


def _duckdb_answers(root: Path, real: bool) -> list:
    con = duckdb.connect()
    out = []
    for function, query, _what in _queries(root, real):
        t = _function(con, root, function, "duckdb")  # noqa: F841 (the view the query names)
        out.append(_rows(con.sql(query).fetchall()))
    return out


def test_duckdb_counts_filter_join(fleet):
    root, real = fleet
    fleet, counts, *_ = _duckdb_answers(root, real)
    assert {r[2] for r in fleet} == {"x86_64", "arm64"}
    assert all(r[-1] for r in fleet)  # wall-clock times
    hosts = {r[0] for r in counts}
    assert {r[2] for r in counts} == {"arm64"} if real else {"x86_64", "arm64"}
    assert len(hosts) == (1 if real else 2)
    con = duckdb.connect()
    every = con.sql(f"select arch, count(*) from read_parquet('{root}/*/*/*/*.parquet', "
                    f"hive_partitioning=true, union_by_name=true) group by 1 order by 1")
    arches = dict(every.fetchall())
    assert set(arches) == {"arm64", "x86_64"}


def test_the_real_recording(fleet):
    root, real = fleet
    if not real:
        pytest.skip("live uprobes unavailable: the x86_64 recording is synthetic")
    con = duckdb.connect()
    t = _function(con, root, "add7", "duckdb")  # noqa: F841
    rows = con.sql("select kind, arg_a, arg_b, arg_e, arg_f, ret, duration_ns > 0, typeof(arg_e),"
                   " typeof(arg_f), typeof(time) from t order by time").fetchall()
    assert len(rows) == 2 * RUNS
    entry = ("entry", -1, -2, 4000000000, 20015998343868, None, True, "UINTEGER", "BIGINT",
             "TIMESTAMP WITH TIME ZONE")
    exit_ = ("exit", None, None, None, None, 20019998343781, True, "UINTEGER", "BIGINT",
             "TIMESTAMP WITH TIME ZONE")
    assert sorted(rows, key=str) == sorted([entry, exit_] * RUNS, key=str)
    t = _function(con, root, "take_big", "duckdb")  # noqa: F841
    (c,) = {r[0] for r in con.sql("select arg_c from t where kind = 'entry'").fetchall()}
    assert c == "BLUE"  # an enum by its name
    structs = [r[0] for r in con.sql("select arg_b from t where kind = 'entry'").fetchall()]
    assert structs == [{"x": 11, "y": -22, "z": 33}] * RUNS  # a struct by value


# -- Spark -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime (.ci/install installs one)")
    from btfgen.recordings.spark import local_session

    session = local_session("btfgen-dataset-test")
    yield session
    session.stop()


def test_spark_gives_duckdbs_answers(fleet, spark):
    root, real = fleet
    want = _duckdb_answers(root, real)
    got = []
    for function, query, _what in _queries(root, real):
        _function(spark, root, function, "spark").createOrReplaceTempView("t")
        got.append(_rows(tuple(r) for r in spark.sql(query).collect()))
    assert got == want
    assert all(want), want  # every question has an answer


def test_spark_and_duckdb_read_odd_kernel_names(tmp_path, spark):
    """Kernel releases named `..` and with `%` and `*` (partitions.hive escapes them; the Spark
    reader used to leave `.` and `..` as they were, a path to the directory above): each
    reader gets each recording's rows back, under its own kernel name."""
    recs = []
    for i, kernel in enumerate(["..", "6.1%*"]):
        recs.append(tmp_path / f"r{i}.btfrec")
        datasets.write(recs[-1], "x86_64", 60, 20 + i, host="odd-host", kernel=kernel)
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "parquet",
                           "-o", str(out), *map(str, recs)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    function = sorted(p.name for p in out.glob("host=*/kernel=*/function=*"))[0]
    function = function.removeprefix("function=")
    from btfgen.recordings import spark as btfgen_spark

    got = btfgen_spark.read_function(spark, str(out), function)
    spark_kernels = {r.kernel for r in got.select("kernel").distinct().collect()}
    con = duckdb.connect()
    duck = _function(con, out, function, "duckdb")
    duck_kernels = {r[0] for r in con.sql("select distinct kernel from duck").fetchall()}
    assert spark_kernels == duck_kernels == {"..", "6.1%*"}
