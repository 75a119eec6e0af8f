"""`--by` keys as the trace prints them, live on uprobes (summary_target.c's hl_tick, whose
six calls are known): a `char *` argument keyed by its string, its pointer by `(void *)ARG`, a
member of a struct passed by value, the return value, several of them combined; each key compared
with the value the traced line shows for the same calls."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_filter_live import _require_live

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    _require_live()
    out = tmp_path_factory.mktemp("summary_keys") / "summary_target"
    proc = subprocess.run(["gcc", "-O2", "-g", str(HERE / "summary_target.c"), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def trace(exe: Path, *args: str, status: int = 0) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-m", "btfgen", "trace", *args, str(exe), "hl_tick"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == status, proc.stderr
    return proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def traced(exe) -> list[str]:
    """hl_tick's six entry lines as the trace prints them (`hl_tick(i=0, tag="kestrel", ...)`)."""
    out, _ = trace(exe)
    entries = [line for line in out.splitlines() if line.startswith("hl_tick(")]
    assert len(entries) == 6, out
    return entries


def shown_args(line: str) -> dict[str, str]:
    """An entry line's `name=value` texts (a struct's braces and a string's quotes kept)."""
    inner = line[line.index("(") + 1:line.rindex(")")]
    return {m.group(1): m.group(2) for m in
            re.finditer(r'(\w+)=("(?:[^"\\]|\\.)*"|\{[^}]*\}|[^,]+)', inner)}


def table(out: str) -> Counter:
    """A --count table's rows as {KEY text: count}."""
    lines = out.splitlines()
    assert lines[0].split() == ["FUNC", "KEY", "COUNT"], out
    got: Counter = Counter()
    for row in lines[1:]:
        func, rest = row.split(None, 1)
        key, count = rest.rsplit(None, 1)
        assert func == "hl_tick"
        got[key] += int(count)
    return got


def test_string_argument_keyed_as_printed(exe, traced):
    out, _ = trace(exe, "--count", "--by", "hl_tick: tag")
    assert table(out) == Counter(f"tag={shown_args(line)['tag']}" for line in traced)
    assert table(out) == {'tag="kestrel"': 3, 'tag="osprey"': 3}


def test_string_key_cut_is_said(exe):
    out, _ = trace(exe, "--json", "--count", "--string-size", "4", "--by", "hl_tick: tag")
    keys = {json.dumps(c["key"]): c["count"] for c in json.loads(out)["counts"]}
    assert keys == {'{"tag": {"string": "kest", "truncated": true}}': 3,
                    '{"tag": {"string": "ospr", "truncated": true}}': 3}
    out, _ = trace(exe, "--count", "--string-size", "4", "--by", "hl_tick: tag")
    assert table(out) == {'tag="kest"...': 3, 'tag="ospr"...': 3}


def test_string_argument_pointer_by_cast(exe):
    out, _ = trace(exe, "--count", "--by", "hl_tick: (void *)tag")
    got = table(out)
    assert sorted(got.values()) == [3, 3]
    assert all(re.fullmatch(r"\(void \*\)tag=0x[0-9a-f]+", k) for k in got), got
    out, _ = trace(exe, "--json", "--count", "--by", "hl_tick: (void *)tag")
    pointers = [c["key"]["(void *)tag"] for c in json.loads(out)["counts"]]
    assert all(type(p) is int for p in pointers)
    # another run, another address (ASLR): the same offsets in their page
    assert sorted(p & 0xfff for p in pointers) == sorted(int(k.split("=")[1], 16) & 0xfff
                                                         for k in got)


def members(shown: str) -> dict[str, str]:
    """A struct as the trace shows it (`{lo=0, hi=10}`) as {member: its text}."""
    return dict(part.split("=", 1) for part in shown.strip("{}").split(", "))


@pytest.mark.parametrize("member", ["lo", "hi"])
def test_by_value_member_keyed_as_printed(exe, traced, member):
    out, _ = trace(exe, "--count", "--by", f"hl_tick: p.{member}")
    assert table(out) == Counter(f"p.{member}={members(shown_args(line)['p'])[member]}"
                                 for line in traced)
    if member == "lo":
        assert table(out) == {"p.lo=0": 2, "p.lo=1": 2, "p.lo=2": 2}
    out, _ = trace(exe, "--json", "--latency", "--by", f"hl_tick: p.{member}")
    timed = Counter({c["key"][f"p.{member}"]: c["count"] for c in json.loads(out)["latencies"]})
    assert timed == Counter(int(members(shown_args(line)["p"])[member]) for line in traced)


def test_whole_struct_keyed_as_printed(exe, traced):
    out, _ = trace(exe, "--count", "--by", "hl_tick: p")
    assert table(out) == Counter(f"p={shown_args(line)['p']}" for line in traced)


@pytest.fixture(scope="module")
def returned(exe) -> list[str]:
    """hl_tick's six returns as the trace prints them (`hl_tick -> -1 (7.1 us)`: `-1`)."""
    out, _ = trace(exe)
    got = [m.group(1) for m in re.finditer(r"^hl_tick -> (.+?) \(", out, re.M)]
    assert len(got) == 6, out
    return got


@pytest.mark.parametrize("attach", ["session", "multi", "single"])
def test_retval_keyed_as_printed(exe, returned, attach):
    out, err = trace(exe, "--count", "--attach", attach, "--by", "hl_tick: $retval")
    # a user function's -1 is shown bare, as the trace shows it: no errno guessed
    assert table(out) == Counter(f"$retval={r}" for r in returned)
    assert table(out) == {"$retval=-1": 2, "$retval=11": 2, "$retval=12": 2}
    assert "entry only" not in err  # the key is made at the exit
    out, _ = trace(exe, "--json", "--count", "--latency", "--attach", attach,
                   "--by", "hl_tick: $retval")
    doc = json.loads(out)
    counted = Counter({c["key"]["$retval"]: c["count"] for c in doc["counts"]})
    timed = Counter({c["key"]["$retval"]: c["count"] for c in doc["latencies"]})
    assert counted == timed == Counter(int(r) for r in returned)
    assert doc["not_counted_at_exit"] == {"no_entry": 0, "no_room": 0}
    assert doc["not_timed"] == {"map_full": 0, "no_entry": 0, "no_room": 0}


def test_retval_key_under_a_filter_and_recorded(exe, tmp_path):
    rec = tmp_path / "rec.btr"
    out, err = trace(exe, "--count", "--record", str(rec), "--filter", "hl_tick: i >= 2",
                     "--by", "hl_tick: $retval")
    assert table(out) == {"$retval=-1": 1, "$retval=11": 1, "$retval=12": 2}
    assert "recorded 8 events" in err, err


@pytest.fixture(scope="module")
def calls(traced, returned) -> list[tuple[dict, str]]:
    """Each call's entry texts and its return text, paired (one thread: in order)."""
    return [(shown_args(line), r) for line, r in zip(traced, returned)]


@pytest.mark.parametrize("attach", ["session", "multi"])
def test_combined_key_as_printed(exe, calls, attach):
    out, _ = trace(exe, "--count", "--latency", "--attach", attach,
                   "--by", "hl_tick: tag, p.lo, $retval")
    want = Counter(f"tag={a['tag']}, p.lo={members(a['p'])['lo']}, $retval={r}"
                   for a, r in calls)
    assert table(out.split("\n\n")[0]) == want
    assert len(want) == 6  # (kestrel, 0, -1), (osprey, 1, 11), ...: each call its own key
    sections = [line[len("Function = hl_tick, "):] for line in out.splitlines()
                if line.startswith("Function = ")]
    assert Counter(sections) == Counter(want.keys())
    out, _ = trace(exe, "--json", "--count", "--attach", attach, "--by", "hl_tick: i, tag")
    got = Counter({json.dumps(c["key"]): c["count"] for c in json.loads(out)["counts"]})
    assert got == Counter(json.dumps({"i": int(a["i"]), "tag": json.loads(a["tag"])})
                          for a, _ in calls)


@pytest.mark.parametrize("by, line", [
    ("hl_tick: tag, p.zz", "--by 'hl_tick: tag, p.zz': column 17: struct hl_pair has no "
                           "member 'zz'"),
    ("hl_tick: tag,tag", "--by 'hl_tick: tag,tag': column 14: tag is in this key already"),
    ("hl_tick: i, i, i, i, i", "--by 'hl_tick: i, i, i, i, i': column 22: a key of at most 4 "
                               "parts"),
    ("hl_tick: x, tag", "--by 'hl_tick: x, tag': column 10: no argument 'x' in hl_tick (its "
                        "arguments: i, tag, p)"),
    ("hl_tick: p.zz", "--by 'hl_tick: p.zz': column 12: struct hl_pair has no member 'zz'"),
    ("hl_tick: p->lo", "--by 'hl_tick: p->lo': column 13: struct hl_pair is not a pointer"),
    ("hl_tick: (void *)i", "--by 'hl_tick: (void *)i': column 18: i of hl_tick is no pointer: "
                           "key it as `i`"),
    ("hl_tick: (void *)p.lo", "--by 'hl_tick: (void *)p.lo': column 18: (void *) keys an "
                              "argument's own value: `(void *)ARG`"),
])
def test_bad_keys(exe, by, line):
    out, err = trace(exe, "--count", "--by", by, status=2)
    assert out == ""
    assert err == f"btfgen trace: {line}\n"


@pytest.fixture(scope="module")
def built_retval(tmp_path_factory):
    """A trace directory keying hl_tick by $retval, built only (clang, no BPF loaded)."""
    from btfgen.probe import manifest as trace_manifest
    from btfgen.trace import build as trace_build

    tmp = tmp_path_factory.mktemp("summary_keys_built")
    exe = tmp / "summary_target"
    subprocess.run(["gcc", "-O2", "-g", str(HERE / "summary_target.c"), "-o", str(exe)],
                   check=True)
    req = trace_build.Request(functions=["hl_tick"], program=str(exe), count=True,
                              strings=False, by=["hl_tick: $retval"])
    manifest = trace_build.build(req, tmp / "dir")
    return manifest, trace_manifest.load_decoders(tmp / "dir", manifest)


@pytest.mark.parametrize("kind, value, shown, as_json", [
    ("kernel", -2, "$retval=-2 ENOENT", {"value": -2, "name": "ENOENT"}),
    ("kernel", 11, "$retval=11", 11),
    ("kernel", -5000, "$retval=-5000", -5000),  # past the errno range: no name
    ("user", -2, "$retval=-2", -2),  # a user function's return is never named by guess
])
def test_retval_key_named_as_errno_for_the_kernel_only(built_retval, kind, value, shown,
                                                       as_json):
    import dataclasses

    from btfgen.probe import output, summary

    manifest, decoders = built_retval
    s = summary.Summary(dataclasses.replace(manifest, kind=kind), decoders)
    body = value.to_bytes(8, sys.byteorder, signed=True).ljust(manifest.summary.key_size, b"\0")
    func, name, got = s.key((0).to_bytes(16, sys.byteorder) + body)
    assert (func, summary._shown(name, got)) == ("hl_tick", shown)
    assert output.typed(got) == as_json
