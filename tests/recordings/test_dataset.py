"""`btfgen decode --format parquet -o DIR`: many recordings into one Hive-partitioned dataset.
The rows are columnar's values (renamed, enums as names) with the pairing `btfgen decode` does;
appending never rewrites; a recording lands once; damaged ones are named, one line each, and
leave nothing behind; a crash mid-write leaves no partial file."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from btfgen.probe.calls import OpenCalls

np = pytest.importorskip("numpy")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
columnar = pytest.importorskip("btfgen.recordings.columnar")
dataset = pytest.importorskip("btfgen.recordings.dataset")

DECODE = [sys.executable, "-m", "btfgen", "decode", "--format", "parquet"]


def _same(x):
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, dict):
        return {k: _same(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_same(v) for v in x]
    return x


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _rows(root: Path, function: str) -> list[dict]:
    rows = []
    for f in sorted(root.glob(f"host=*/kernel=*/function={function}/*.parquet")):
        t = pq.read_table(f)
        t = t.set_column(0, "time", t.column("time").cast(pa.int64()))  # no pandas needed
        rows += t.to_pylist()
    return rows


# -- the rows ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["x86_64", "s390x", "arm", "arm64"])
def test_rows_are_columnars_values(tmp_path, arch):
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, arch, 600, 5, failed=0.3, batch=70)
    out = tmp_path / "ds"
    (added,) = dataset.add_all([str(rec)], str(out))
    assert added.new and added.rows == 600 and added.error is None
    mod = synth.module(arch)
    for name in mod.names():
        desc = mod._descriptor(name)[0]
        rows = _rows(out, name)
        for kind, kname in ((0, "entry"), (1, "exit")):
            want = columnar.table(str(rec), name, kname).to_pylist()
            got = [r for r in rows if r["kind"] == kname]
            assert len(got) == len(want), (name, kname)
            values = desc[4] if kind == 0 else desc[5][:1]
            for g, w in zip(got, want):
                assert g["arch"] == arch and g["recording"] == added.recording
                assert g["time"] == (w["timestamp"] + datasets.CLOCK_OFFSET) // 1000
                for col in ("timestamp", "cpu", "pid", "tid"):
                    assert g[col] == w[col]
                for i, v in enumerate(values):
                    column = "ret" if kind else f"arg_{v[0]}"
                    expect = w["return" if kind else v[0]]
                    if v[1][0] == "enum" and expect is not None and v[1][1] <= 8:
                        expect = v[1][3].get(expect, str(expect))
                    assert _same(g[column]) == _same(expect), (name, column)
                other = [c for c in g if c.startswith("arg_")] if kind else ["ret"]
                assert all(g[c] is None for c in other if c in g)


def test_partitions_are_hive_paths(tmp_path):
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, "x86_64", 40, 1, host="web-1.example", kernel="6.1.0+deb/1")
    (added,) = dataset.add_all([str(rec)], str(tmp_path / "ds"))
    files = sorted(p.relative_to(tmp_path / "ds").as_posix()
                   for p in (tmp_path / "ds").rglob("*.parquet"))
    assert files and all(f.startswith("host=web-1.example/kernel=6.1.0%2Bdeb%2F1/function=")
                         and f.endswith(f"/{added.recording}.parquet") for f in files)


@pytest.mark.parametrize("kernel,segment", [("..", "%2E%2E"), (".", "%2E"),
                                            ("6.1%*[x]?", "6.1%25%2A%5Bx%5D%3F")])
def test_a_partition_value_is_one_segment_that_matches_only_itself(tmp_path, kernel, segment):
    """A kernel release named `..` (or `.`) stays a directory of its own inside the dataset, and
    one with `%` and glob characters is escaped so that a reader's glob matches only it; the
    path the writer makes is the one the readers ask for (partitions.segment)."""
    from btfgen.recordings import partitions

    assert partitions.segment("kernel", kernel) == f"kernel={segment}"
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, "x86_64", 40, 1, host="h", kernel=kernel)
    dataset.add_all([str(rec)], str(tmp_path / "ds"))
    files = [p.relative_to(tmp_path / "ds").as_posix()
             for p in (tmp_path / "ds").rglob("*.parquet")]
    assert files and all(f.startswith(f"host=h/kernel={segment}/function=") for f in files)
    assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob("function=*"))
    function = files[0].split("/")[2]
    assert sorted((tmp_path / "ds").glob(f"host=*/{partitions.segment('kernel', kernel)}/"
                                         f"{function}/*.parquet")) == \
        [tmp_path / "ds" / files[0]]


def test_partition_escaping_needs_the_standard_library_alone():
    """spark.py reads with pyspark alone: the escaping it shares with the writer imports nothing
    but the standard library (and nothing of btfgen)."""
    import ast

    from btfgen.recordings import partitions

    tree = ast.parse(Path(partitions.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_enums_are_their_names():
    t = ("enum", 4, True, {0: "RED", 1: "GREEN", -3: "NEG"})
    col = dataset._as_names(pa.array([1, 0, 7, None, -3, 1], pa.int32()), t)
    assert pa.types.is_dictionary(col.type)
    assert col.to_pylist() == ["GREEN", "RED", "7", None, "NEG", "GREEN"]


def _reference_pairs(events):
    """`btfgen decode`'s pairing (probe.calls.OpenCalls, as output.Printer runs it) for one
    function's events, taken in time order."""
    fn, open_calls, pairs = object(), OpenCalls(max_depth=None), []
    for i in sorted(range(len(events)), key=lambda i: events[i][0]):
        _ts, tid, kind = events[i]
        if kind == 0:
            open_calls.enter(tid, fn, i)
        elif (entry := open_calls.exit(tid, fn)) is not None:
            pairs.append((entry, i))
    return sorted(pairs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 1)), max_size=60), st.randoms())
def test_pairing_is_decodes(events, rnd):
    # Distinct, increasing times, then shuffled: the file's order is by section, not time.
    evs = [(10 * (i + 1), tid, kind) for i, (tid, kind) in enumerate(events)]
    rnd.shuffle(evs)
    ts, tid, kind = (np.array([e[j] for e in evs], dtype=t)
                     for j, t in ((0, np.int64), (1, np.int64), (2, np.int8)))
    call, took, n = dataset.pair_calls(ts, tid, kind, base=100)
    pairs = _reference_pairs(evs)
    got = {}
    for i, c in enumerate(call):
        if c >= 0:
            got.setdefault(int(c), []).append(i)
    assert n == len(pairs)
    assert sorted(tuple(sorted(v, key=lambda i: kind[i])) for v in got.values()) == pairs
    assert sorted(got) == list(range(100, 100 + n))
    for e, x in pairs:
        assert took[e] == took[x] == ts[x] - ts[e]
    assert all(took[i] == -1 for i in range(len(evs)) if call[i] < 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2), st.integers(0, 7)),
                max_size=60), st.randoms())
def test_pairing_across_losses_is_decodes(events, rnd):
    """Records marked with a loss (of this function or another one, kind 2 here) make the
    tracer forget the thread's open calls (or every thread's): the dataset's pairs are then
    the tracer's."""
    from btfgen.probe import spec_format

    flags = {0: spec_format.EVENT_THREAD_LOST, 1: spec_format.EVENT_SOME_LOST}
    evs = [(10 * (i + 1), tid, kind, flags.get(f, 0)) for i, (tid, kind, f) in enumerate(events)]
    some = min((e[0] for e in evs if e[3] & spec_format.EVENT_SOME_LOST), default=None)
    # As the BPF side marks them: every record after the first unnoted loss is marked too.
    evs = [(t, tid, k, f | (spec_format.EVENT_SOME_LOST if some and t > some else 0))
           for t, tid, k, f in evs]
    fn, open_calls, pairs = object(), OpenCalls(max_depth=None), []
    for i, (_ts, tid, kind, f) in enumerate(evs):
        if f & spec_format.EVENT_SOME_LOST:
            open_calls.forget_all()
        elif f:
            open_calls.forget(tid)
        if kind == 0:
            open_calls.enter(tid, fn, i)
        elif kind == 1 and (entry := open_calls.exit(tid, fn)) is not None:
            pairs.append((entry, i))
    mine = [i for i, e in enumerate(evs) if e[2] < 2]
    rnd.shuffle(mine)
    ts, tid, kind = (np.array([evs[i][j] for i in mine], dtype=t)
                     for j, t in ((0, np.int64), (1, np.int64), (2, np.int8)))
    call, took, _n = dataset.pair_calls(ts, tid, kind)
    losses = [tuple(np.array([e[j] for e in evs if e[3]], np.int64) for j in (0, 1, 3))]
    dataset.unpair_across_losses(call, took, ts, tid, kind, losses)
    got = sorted(tuple(sorted((mine[i] for i in np.flatnonzero(call == c)),
                              key=lambda i: evs[i][2]))
                 for c in set(call.tolist()) - {-1})
    assert got == sorted(pairs)
    assert all(took[i] == -1 for i in range(len(mine)) if call[i] < 0)


@pytest.mark.parametrize("rounds", [0, 1, dataset.PAIRING_ROUNDS])
def test_pairing_by_rounds_or_by_the_rule_alone_agree(monkeypatch, rounds):
    # Nesting, a lost exit, a lost entry, two threads: each round takes out a level of
    # calls with nothing inside them, and the rule pairs what is left.
    kinds = [0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1]
    evs = [(10 * (i + 1), 1 + i % 2 * (i > 9), k) for i, k in enumerate(kinds)]
    ts, tid, kind = (np.array([e[j] for e in evs], dtype=t)
                     for j, t in ((0, np.int64), (1, np.int64), (2, np.int8)))
    monkeypatch.setattr(dataset, "PAIRING_ROUNDS", rounds)
    call, took, n = dataset.pair_calls(ts, tid, kind)
    got = sorted(tuple(np.flatnonzero(call == c)) for c in range(n))
    assert got == _reference_pairs(evs)


def test_join_of_entries_and_exits(tmp_path):
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, "x86_64", 300, 2)
    dataset.add_all([str(rec)], str(tmp_path / "ds"))
    rows = _rows(tmp_path / "ds", "scalars")
    entries = {r["call"]: r for r in rows if r["kind"] == "entry"}
    exits = [r for r in rows if r["kind"] == "exit"]
    assert exits and all(x["call"] in entries for x in exits)  # synth loses nothing
    for x in exits:
        e = entries[x["call"]]
        assert (e["tid"], x["duration_ns"]) == (x["tid"], x["timestamp"] - e["timestamp"])


# -- appending, once ---------------------------------------------------------------------------

def test_append_adds_files_and_rewrites_none(tmp_path):
    a, b = tmp_path / "a.btfrec", tmp_path / "b.btfrec"
    datasets.write(a, "x86_64", 200, 1, host="a")
    datasets.write(b, "arm64", 200, 2, host="b")
    out = tmp_path / "ds"
    dataset.add_all([str(a)], str(out))
    before = _files(out)
    stats = {p: os.stat(out / p).st_ino for p in before}
    (added,) = dataset.add_all([str(b)], str(out))
    after = _files(out)
    assert added.new
    assert {k: after[k] for k in before} == before  # byte for byte
    assert all(os.stat(out / p).st_ino == ino for p, ino in stats.items())  # not replaced
    assert len(after) > len(before)


def test_a_recording_lands_once(tmp_path):
    a = tmp_path / "a.btfrec"
    datasets.write(a, "x86_64", 100, 1)
    copy = tmp_path / "copy-of-a.btfrec"
    copy.write_bytes(a.read_bytes())
    out = tmp_path / "ds"
    first = dataset.add_all([str(a), str(copy)], str(out), jobs=2)
    assert [x.new for x in first] == [True, False]
    snapshot = _files(out)
    proc = subprocess.run([*DECODE, "-o", str(out), str(copy)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"btfgen decode: {out}: 0 recordings added (0 rows), 1 already " \
                          "there, 0 refused\n"
    assert _files(out) == snapshot
    assert len(_rows(out, "scalars")) == len([r for r in _rows(out, "scalars")
                                              if r["recording"] == first[0].recording])


# -- bad input ---------------------------------------------------------------------------------

def _damaged(good: bytes) -> dict[str, bytes]:
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40
    return {"truncated.btfrec": good[:-9], "flipped.btfrec": bytes(flipped),
            "text.btfrec": b"hello\n", "empty.btfrec": b""}


def test_mixed_directory(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    datasets.write(src / "good1.btfrec", "x86_64", 300, 1, host="h1")
    datasets.write(src / "good2.btfrec", "riscv64", 300, 2, host="h2")
    good = (src / "good1.btfrec").read_bytes()
    for name, data in _damaged(good).items():
        (src / name).write_bytes(data)
    datasets.write(src / "nohost.btfrec", "x86_64", 10, 3, host=None)
    out = tmp_path / "ds"
    proc = subprocess.run([*DECODE, "-o", str(out), "-j", "2", str(src)], capture_output=True,
                          text=True)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    bad = ["empty", "flipped", "nohost", "text"]
    assert len(lines) == len(bad) + 2, proc.stderr
    for line, name in zip(lines, bad):
        assert line.startswith(f"btfgen decode: {src / name}.btfrec: "), line
    assert "no host in its header" in lines[2]
    # Cut in its end (its tracer killed as it wrote it): every event is there, and said.
    assert lines[4].startswith(f"btfgen decode: {src / 'truncated'}.btfrec: cut at byte "), lines
    assert lines[4].endswith(" after 300 events (the recording has no end: its tracer was "
                             "killed?): added up to there"), lines
    assert lines[-1] == f"btfgen decode: {out}: 3 recordings added (900 rows), 0 already " \
                        "there, 4 refused"
    hosts = sorted(p.name for p in out.iterdir() if p.name.startswith("host="))
    assert hosts == ["host=h1", "host=h2"]
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]
    assert len(list((out / "_recordings").iterdir())) == 3


def test_crash_mid_write_leaves_no_partial_file(tmp_path):
    """A writer killed (os._exit, no cleanup) after its first row group: no Parquet file of
    the recording and no index entry are visible; the next run adds it whole."""
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, "x86_64", 3000, 4)
    out = tmp_path / "ds"
    pid = os.fork()
    if pid == 0:  # the child: die inside the writer, as a crash or kill -9 would
        try:
            dataset.ROW_GROUP = 50
            real = dataset._Files._flush

            def flush_then_die(self, slot):
                real(self, slot)
                os._exit(9)
            dataset._Files._flush = flush_then_die
            dataset.add(str(rec), str(out))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 9
    left = [p for p in out.rglob("*") if p.is_file()]
    assert left and all(p.name.startswith(".") and p.name.endswith(".part") for p in left)
    assert not list(out.rglob("*.parquet")) and not (out / "_recordings").exists()
    (again,) = dataset.add_all([str(rec)], str(out))
    assert again.new and again.rows == 3000
    assert sum(pq.read_metadata(p).num_rows for p in out.rglob("*.parquet")) == 3000


def test_usage_errors_exit_2(tmp_path):
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, "x86_64", 10, 1)
    (tmp_path / "file").write_text("")
    (tmp_path / "empty-dir").mkdir()
    for args, says in [([str(rec)], "give its directory with -o DIR"),
                       (["-o", str(tmp_path / "file"), str(rec)], "not a directory"),
                       (["-o", str(tmp_path / "ds"), str(tmp_path / "empty-dir")],
                        "no recordings in")]:
        proc = subprocess.run([*DECODE, *args], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "btfgen", "decode", str(rec), str(rec)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "prints one recording" in proc.stderr


def test_quiet_and_not_a_terminal(tmp_path):
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, "x86_64", 10, 1)
    proc = subprocess.run([*DECODE, "-q", "-o", str(tmp_path / "ds"), str(rec)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == ""
    proc = subprocess.run([*DECODE, "-o", str(tmp_path / "ds2"), str(rec)],
                          capture_output=True, text=True)
    assert "\r" not in proc.stderr and proc.stderr.count("\n") == 1


def test_unreadable_recording_is_named(tmp_path):
    missing = tmp_path / "missing.btfrec"
    (added,) = dataset.add_all([str(missing)], str(tmp_path / "ds"))
    assert not added.new and added.error.startswith(f"{missing}: ")


def test_an_argument_named_like_an_event_column_keeps_its_values(tmp_path, monkeypatch):
    """find_get_pid(pid): the argument beside the event's pid (columnar.Layout used to fail
    with numpy's "name already used", and the recording was refused)."""
    real = synth.descriptors

    def rebuilt(old, fields):  # a plain tuple or a NamedTuple descriptor alike
        return type(old)(*fields) if hasattr(old, "_fields") else tuple(fields)

    def renamed(m):
        out = []
        for d in real(m):
            if d[0] == "scalars":
                args = (rebuilt(d[4][0], ["pid", *d[4][0][1:]]), *d[4][1:])
                d = rebuilt(d, [*d[:4], args, *d[5:]])
            out.append(d)
        return out
    monkeypatch.setattr(synth, "descriptors", renamed)
    rec = tmp_path / "r.btfrec"
    datasets.write(rec, "x86_64", 200, 1)
    out = tmp_path / "ds"
    (added,) = dataset.add_all([str(rec)], str(out))
    assert added.error is None and added.new
    want = [r for r in columnar.table(str(rec), "scalars", "entry").to_pylist()]
    got = [r for r in _rows(out, "scalars") if r["kind"] == "entry"]
    assert want and len(got) == len(want)
    assert "arg_pid" in want[0] and "pid" in want[0]  # columnar: the argument renamed
    for g, w in zip(got, want):
        assert (g["pid"], g["arg_pid"]) == (w["pid"], w["arg_pid"])
    assert any(w["pid"] != w["arg_pid"] for w in want)


def test_value_columns_are_unique():
    assert columnar.value_columns(["pid", "x", "", "x", "arg_pid", "arg_x"], 0) == [
        "arg_pid", "x", "arg2", "arg_x", "arg_arg_pid", "arg_arg_x"]
    assert columnar.value_columns(["r"], 1) == ["return"]
    assert dataset._arg_columns(["a", "", "a"]) == ["arg_a", "arg_1", "arg2_a"]


def test_a_record_not_to_be_paired_is_left_out_of_the_pairing():
    """An exit the BPF side flagged (an fsession exit whose entry the kernel skipped) pairs with
    nothing, and the thread's open call is closed by its own exit, as `btfgen decode` does."""
    from btfgen.probe import spec_format
    from btfgen.recordings import columnar

    keys = dataset._Keys(1)

    def events(ts, flags):
        return {"timestamp": np.array(ts, np.int64), "tid": np.array([7] * len(ts), np.int64),
                columnar.FLAGS: np.array(flags, np.uint32)}

    keys.add(0, 0, events([1000], [0]))
    keys.add(0, 1, events([5000, 9000], [spec_format.EVENT_NO_ENTRY, 0]))
    ((call, took),) = keys.pair()
    # in the order added: the entry, the flagged exit, the entry's own exit
    assert call.tolist()[1] == -1 and took.tolist()[1] == -1
    assert call[0] == call[2] >= 0 and took[0] == took[2] == 8000
