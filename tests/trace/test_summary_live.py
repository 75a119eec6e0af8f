"""`btfgen trace --count / --latency / --by` live on this machine's kernel (uprobes on
summary_target.c, whose calls are known): exact counts, keyed and unkeyed, the 20 ms sleeps in
their histogram slot or later (a loaded machine only adds time), text and JSON, on every attach
mode; bad keys are one line and exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_filter_live import _require_live

from btfgen.probe import summary

HERE = Path(__file__).parent
FUNCS = ["nap", "quick", "work"]
# 20 ms is 20,000,000 ns: slot 24 (2^24 = 16,777,216 to 2^25 - 1). Load can only lengthen a
# sleep (and a quick call: a preempted one took 2^27 ns under a load of 20, so nothing here
# bounds a duration by how busy the machine is); past slot 32 (8.6 s, the test's own time) would
# be a wrong clock or unit, not a busy machine.
NAP_SLOT = 24
TOP_SLOT = 32


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    _require_live()
    out = tmp_path_factory.mktemp("summary") / "summary_target"
    proc = subprocess.run(["gcc", "-O2", "-g", str(HERE / "summary_target.c"), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def trace(exe: Path, *args: str, status: int = 0) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-m", "btfgen", "trace", *args, str(exe), *FUNCS],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == status, proc.stderr
    return proc.stdout, proc.stderr


def hists(text: str) -> dict[str, dict[int, int]]:
    """funclatency's sections: {'Function = ...' title: {slot: count}} (slots by their low)."""
    out: dict[str, dict[int, int]] = {}
    title = None
    for line in text.splitlines():
        if line.startswith("Function = "):
            title = line[len("Function = "):]
            out[title] = {}
        elif m := re.fullmatch(r"\s*(\d+) -> (\d+)\s*: (\d+)\s*\|[* ]*\|", line):
            low, high, count = map(int, m.groups())
            slot = 0 if low == 0 else low.bit_length() - 1
            assert high == (2 << slot) - 1
            if count:
                out[title][slot] = count
    return out


def assert_naps(slots: dict[int, int], calls: int) -> None:
    assert sum(slots.values()) == calls
    assert all(NAP_SLOT <= s <= TOP_SLOT for s in slots), slots


def totals(text: str) -> dict[str, tuple[int, int]]:
    """funclatency's `avg = A nsecs, total: T nsecs, count: N` line of each section: (T, N)."""
    out, title = {}, None
    for line in text.splitlines():
        if line.startswith("Function = "):
            title = line[len("Function = "):]
        elif m := re.fullmatch(r"avg = (\d+) nsecs, total: (\d+) nsecs, count: (\d+)", line):
            avg, total, count = map(int, m.groups())
            assert avg == total // count
            out[title] = (total, count)
    return out


def assert_buckets_hold(slots: dict[int, int], total: int) -> None:
    """The durations' total lies within what their buckets say (slot b: 2^b to 2^(b+1)-1 ns,
    slot 0: 0 and 1): the buckets are the durations', whatever they were."""
    assert sum(c * (0 if b == 0 else 1 << b) for b, c in slots.items()) <= total
    assert total <= sum(c * ((2 << b) - 1) for b, c in slots.items())


@pytest.mark.parametrize("attach", ["session", "multi", "single"])
def test_count_exact_on_every_attach_mode(exe, attach):
    out, err = trace(exe, "--count", "--attach", attach)
    assert out == "FUNC   COUNT\nnap    3\nwork   7\nquick  1000\n"
    assert err.endswith("0 records lost (ring buffer full)\n"), err


@pytest.mark.parametrize("attach", ["session", "multi", "single"])
def test_latency_slots_on_every_attach_mode(exe, attach):
    out, _ = trace(exe, "--latency", "--attach", attach)
    got = hists(out)
    assert set(got) == {"nap", "quick", "work"}
    assert_naps(got["nap"], 3)
    assert sum(got["quick"].values()) == 1000
    assert sum(got["work"].values()) == 7
    said = totals(out)
    assert {f: n for f, (_, n) in said.items()} == {"nap": 3, "quick": 1000, "work": 7}
    for f in said:
        assert max(got[f]) <= TOP_SLOT
        assert_buckets_hold(got[f], said[f][0])


def test_keyed_by_enum_argument_and_string_path(exe):
    out, _ = trace(exe, "--count", "--by", "nap: c", "--by", "work: j->name")
    assert out == ("FUNC   KEY              COUNT\n"
                   "nap    c=BLUE(7)        1\n"
                   "nap    c=RED(1)         2\n"
                   'work   j->name="beta"   2\n'
                   'work   j->name="alpha"  5\n'
                   "quick                   1000\n")


@pytest.mark.parametrize("attach", ["session", "multi"])
def test_latency_keyed_json(exe, attach):
    out, _ = trace(exe, "--json", "--latency", "--count", "--attach", attach,
                   "--by", "nap: c", "--by", "work: j->name")
    doc = json.loads(out)
    counts = {(c["function"], json.dumps(c.get("key"))): c["count"] for c in doc["counts"]}
    assert counts == {
        ("nap", '{"c": {"value": 1, "name": "RED"}}'): 2,
        ("nap", '{"c": {"value": 7, "name": "BLUE"}}'): 1,
        ("quick", "null"): 1000,
        ("work", '{"j->name": "alpha"}'): 5,
        ("work", '{"j->name": "beta"}'): 2,
    }
    lat = {(h["function"], json.dumps(h.get("key"))): h for h in doc["latencies"]}
    assert set(lat) == set(counts)
    for (func, _), h in lat.items():
        assert h["count"] == counts[func, _]
        assert sum(b["count"] for b in h["buckets"]) == h["count"]
        for b in h["buckets"]:
            assert b["high"] == 2 * max(b["low"], 1) - 1
        if func == "nap":
            assert all(NAP_SLOT <= b["low"].bit_length() - 1 <= TOP_SLOT
                       for b in h["buckets"])
            assert h["total_ns"] >= 20_000_000 * h["count"]
    assert doc["not_counted"] == 0
    assert doc["missed_by_kernel"] == 0
    assert doc["not_timed"] == {"map_full": 0, "no_entry": 0, "no_room": 0}


def test_by_comm_and_text_sections(exe):
    out, _ = trace(exe, "--latency", "--by", "comm")
    got = hists(out)
    assert set(got) == {f"{f}, comm=summary_target" for f in ("nap", "quick", "work")}
    assert_naps(got["nap, comm=summary_target"], 3)


def test_filter_applies(exe):
    out, _ = trace(exe, "--count", "--latency", "--filter", "nap: c == BLUE",
                   "--filter", "quick: x < 10")
    assert out.startswith("FUNC   COUNT\nnap    1\nwork   7\nquick  10\n")
    got = hists(out)
    assert_naps(got["nap"], 1)
    assert sum(got["quick"].values()) == 10


def test_retval_filter_times_the_calls_it_keeps(exe):
    # decided at exit: the pair of links pops the entry's time of every call, kept or not
    out, _ = trace(exe, "--latency", "--attach", "multi", "--filter", "nap: $retval == 7")
    assert_naps(hists(out)["nap"], 1)


def test_record_too(exe, tmp_path):
    rec = tmp_path / "rec.btr"
    out, err = trace(exe, "--count", "--record", str(rec))
    assert out == "FUNC   COUNT\nnap    3\nwork   7\nquick  1000\n"
    assert "recorded 2020 events" in err
    decoded = subprocess.run([sys.executable, "-m", "btfgen", "decode", str(rec)],
                             capture_output=True, text=True, check=True).stdout
    assert decoded.count("quick(") == 1000


def test_interval_prints_add_up(exe):
    out, _ = trace(exe, "--json", "--count", "--interval", "0.01")
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["interval"] for d in docs] == list(range(1, len(docs) + 1))
    total: dict[str, int] = {}
    for d in docs:
        for c in d["counts"]:
            total[c["function"]] = total.get(c["function"], 0) + c["count"]
    assert total == {"nap": 3, "quick": 1000, "work": 7}


def test_full_map_is_said(exe):
    out, _ = trace(exe, "--json", "--count", "--map-size", "8", "--by", "quick: x")
    doc = json.loads(out)
    counted = sum(c["count"] for c in doc["counts"])
    assert doc["not_counted"] > 0
    assert counted + doc["not_counted"] == 1010
    assert len(doc["counts"]) <= 8


def test_full_map_is_said_in_the_table(exe):
    out, _ = trace(exe, "--count", "--latency", "--map-size", "8", "--by", "quick: x")
    lines = out.splitlines()
    said = [line for line in lines if "did not fit" in line]
    m = re.fullmatch(r"(\d+) calls not counted: their key did not fit the map \(8 keys; "
                     r"--map-size\)", said[0])
    t = re.fullmatch(r"(\d+) calls not timed: their key did not fit the map \(8 keys; "
                     r"--map-size\)", said[1])
    assert m and t and len(said) == 2, out
    assert lines[-2:] == said  # the table's last lines
    table = lines[1:lines.index("")]
    counted = sum(int(row.split()[-1]) for row in table)
    assert counted + int(m.group(1)) == 1010 and len(table) <= 8
    timed = sum(sum(s.values()) for s in hists(out).values())
    assert timed + int(t.group(1)) == 1010


@pytest.mark.parametrize("by, line", [
    ("nap: zz", "--by 'nap: zz': column 6: no argument 'zz' in nap (its arguments: ms, c)"),
    ("nope: c", "--by 'nope: c': column 1: no traced function 'nope'"),
    ("nap: c->x", "--by 'nap: c->x': column 9: enum colour is not a pointer"),
    ("work: **j", "--by 'work: **j': column 7: **j is more than one value of work: a key is "
                  "one (a path, or `*PATH` for one pointee)"),
    ("nap: $retval->x", "--by 'nap: $retval->x': column 6: a key from the return value is "
                        "`$retval`, the value itself (a path from it is no key: it is made at "
                        "entry)"),
    ("comm x", "--by 'comm x': column 1: expected `comm` or `FUNC: KEY, KEY` (an argument, a "
               "member of one, a capture path or $retval)"),
])
def test_bad_keys(exe, by, line):
    out, err = trace(exe, "--count", "--by", by, status=2)
    assert out == ""
    assert err == f"btfgen trace: {line}\n"


@pytest.mark.parametrize("attach", ["session", "multi", "single"])
def test_count_alone_attaches_the_entry_only(exe, attach):
    _, err = trace(exe, "--count", "--by", "comm", "--attach", attach)
    first = err.splitlines()[0]
    if attach == "session":
        # one link: its entry returns 1, and the kernel skips the exit
        assert re.search(r"one uprobe\.session link(, sleepable)? \(as asked\)$", first), err
    else:
        assert "(entry only: a count needs no exit)" in first, err
    _, err = trace(exe, "--count", "--latency", "--attach", attach)
    assert "entry only" not in err


# quick(x) returns x + 1 for x = 0..999; nap returns its colour (RED 1 twice, BLUE 7 once);
# work returns its job's id: 1, 2, 3, 1, 2, 3, 1 (alpha is ids 1 and 3, beta 2).
@pytest.mark.parametrize("attach", ["session", "multi", "single"])
def test_count_with_a_retval_filter_counts_at_exit(exe, attach):
    out, err = trace(exe, "--count", "--attach", attach, "--filter", "nap: $retval == 7",
                     "--filter", "quick: $retval > 990")
    assert out == "FUNC   COUNT\nnap    1\nwork   7\nquick  10\n"
    assert "entry only" not in err


@pytest.mark.parametrize("attach", ["session", "multi"])
def test_count_with_entry_and_exit_filters_and_keys(exe, attach):
    # the entry's condition at entry (x >= 500), the exit's at exit ($retval <= 600), the key
    # (made at entry) carried to the exit that counts
    out, _ = trace(exe, "--count", "--attach", attach,
                   "--filter", "quick: x >= 500 && $retval <= 600",
                   "--filter", "work: $retval == 1", "--by", "work: j->name",
                   "--by", "nap: c", "--filter", "nap: $retval != 7")
    assert out == ("FUNC   KEY              COUNT\n"
                   "nap    c=RED(1)         2\n"
                   'work   j->name="alpha"  3\n'
                   "quick                   100\n")
    out, _ = trace(exe, "--json", "--count", "--latency", "--attach", attach, "--by", "comm",
                   "--filter", "quick: $retval > 500")
    doc = json.loads(out)
    counts = {c["function"]: c["count"] for c in doc["counts"]}
    assert counts == {"nap": 3, "quick": 500, "work": 7}  # x = 500..999
    assert {h["function"]: h["count"] for h in doc["latencies"]} == counts
    assert doc["not_counted"] == 0
    assert doc["not_timed"] == {"map_full": 0, "no_entry": 0, "no_room": 0}
    assert doc["not_counted_at_exit"] == {"no_entry": 0, "no_room": 0}


def test_log2_hist_as_funclatency():
    text = summary.log2_hist([0, 1, 0, 4] + [0] * 60, "nsecs")
    bar = "|{:<40}|\n".format
    assert text == ("     nsecs               : count     distribution\n"
                    "         0 -> 1          : 0        " + bar("")
                    + "         2 -> 3          : 1        " + bar("*" * 10)
                    + "         4 -> 7          : 0        " + bar("")
                    + "         8 -> 15         : 4        " + bar("*" * 40))


def test_built_here_run_there(exe, tmp_path):
    directory = tmp_path / "dir"
    subprocess.run([sys.executable, "-m", "btfgen", "trace", "--build", str(directory), "--count",
                    "--by", "nap: c", str(exe), "nap"], check=True, capture_output=True)
    run = [sys.executable, str(directory / "btfgen_trace.py"), "--run", str(directory)]
    proc = subprocess.run([*run, "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["counts"] == [
        {"function": "nap", "key": {"c": {"value": 7, "name": "BLUE"}}, "count": 1},
        {"function": "nap", "key": {"c": {"value": 1, "name": "RED"}}, "count": 2}]
    proc = subprocess.run([*run, "--count"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "chosen at --build" in proc.stderr
