"""Recordings damaged past their checksums: the header's descriptors (types, sizes, formats,
plans), strides and byte order, the batches' section functions, kinds and counts, every CRC and
sum recomputed (synth.reseal). `btfgen decode` (text, jsonl, parquet) then prints either what
the file's decoders say of the recorded bytes, or one line on stderr and exit 2: never a
traceback, never a value read from bytes the decoder did not describe.

"What the decoders say": the live tracer's printer (output.Printer) over the full events,
with the damaged file's own descriptors, as checked (a checked descriptor is the file's word;
misframing is the decoder's fault); for parquet, the columns of an honest recording written
with those descriptors."""

from __future__ import annotations

import contextlib
import io
import os

import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btfgen.cli import main
from btfgen.decoder.runtime import DecodeError, Function, FunctionDesc
from btfgen.probe import output, recording
from btfgen.recordings import replay
from btfgen.recordings.reader import Reader

ARCHES = ["x86_64", "s390x", "i386"]  # both byte orders, both pointer sizes
MODULES = {a: synth.module(a) for a in ARCHES}
EVENTS = {a: synth.events(synth.descriptors(m), 24, 5, m.BYTE_ORDER, 0.2)
          for a, m in MODULES.items()}
EXAMPLES = int(os.environ.get("BTFGEN_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
LEAVES = [None, True, False, 0, 1, -1, 3, 7, 8, 64, 1 << 20, 1 << 63, "int", "ptr", "struct",
          "chars", "<Q", "x", [], [0], {"map": []}]


def _decode(path, *args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["decode", str(path), *args])  # a traceback would fail the test here
    return rc, out.getvalue(), err.getvalue()


def _refused(rc: int, out: str, err: str) -> bool:
    """Exit 2, one line on stderr, nothing printed (a bad file is refused before a line)."""
    if rc == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("btfgen: error: "), err
        return True
    assert rc == 0, (rc, err)
    return False


def _live(descs, order: str, evs, **kw) -> str | None:
    """What the tracer prints with these decoders, or None where it would refuse an event."""
    out = io.StringIO()
    p = output.Printer([Function(d) for d in descs], order, out, flush=False, **kw)
    try:
        for e in evs:
            p.event(e)
    except (output.BadEvent, DecodeError):
        return None
    return out.getvalue()


def _checked(path) -> list[FunctionDesc] | None:
    """The file's descriptors as the decoder accepts them, or None when it refuses them."""
    try:
        with Reader(str(path)) as r:
            return [f.desc for f in replay.functions(r)]
    except recording.RecordError:
        return None


def _check_text(path, descs, order: str, evs) -> None:
    for args, kw in (((), {}), (("--format", "jsonl"), {"as_json": True})):
        rc, out, err = _decode(path, *args)
        if _refused(rc, out, err):
            continue
        want = _live(descs, order, evs, **kw)
        assert want is not None, "decoded events the tracer's printer refuses"
        assert out == want


def _parquet(path, directory) -> dict | None:
    """The dataset `btfgen decode --format parquet` makes of one recording: each partition's
    rows, without the column naming the recording (its content hash differs when damaged)."""
    pq = pytest.importorskip("pyarrow.parquet")
    rc, out, err = _decode(path, "--format", "parquet", "-o", str(directory))
    if rc == 1:
        # The dataset's word for a recording it refused: that one named on one line, then its
        # count of what was added and refused (issue 22), never a traceback.
        lines = err.splitlines()
        assert len(lines) == 2 and lines[0].startswith(f"btfgen decode: {path}: "), err
        assert lines[1].endswith(", 1 refused"), err
        assert not list(directory.rglob("*.parquet")) if directory.exists() else True
        return None
    if _refused(rc, out, err):
        assert not list(directory.rglob("*.parquet")) if directory.exists() else True
        return None
    return {str(p.parent.relative_to(directory)): pq.read_table(p).drop_columns(["recording"])
            for p in sorted(directory.rglob("*.parquet"))}


def _walk(data, node):
    """A random spot in a JSON descriptor: (container, key) of a node under `node`."""
    parent, key = None, None
    while True:
        children = node["map"] if isinstance(node, dict) else node
        if not isinstance(children, list) or not children:
            return parent, key
        parent, key = children, data.draw(st.integers(0, len(children) - 1))
        node = children[key]
        if data.draw(st.booleans()):
            return parent, key


def _damage_value(data, old):
    how = data.draw(st.sampled_from(["leaf", "nudge", "drop", "dup"]))
    if how == "nudge" and type(old) is int:
        return "set", old + data.draw(st.sampled_from([-9, -8, -1, 1, 2, 8, 1 << 16]))
    if how in ("drop", "dup"):
        return how, None
    return "set", data.draw(st.sampled_from(LEAVES))


@FUZZ
@given(arch=st.sampled_from(ARCHES), data=st.data())
def test_header_damage_is_refused_or_decoded_as_the_header_says(tmp_path_factory, arch, data):
    mod, evs = MODULES[arch], EVENTS[arch]
    path = tmp_path_factory.mktemp("fuzz") / "r.btfrec"
    synth.write(path, mod, evs, batch=9)
    target = data.draw(st.sampled_from(["descriptor", "descriptor", "descriptor", "stride",
                                        "byte_order", "event_header"]))

    def damage(head):
        fns = head["functions"]
        f = fns[data.draw(st.integers(0, len(fns) - 1))]
        if target == "stride":
            f["stride"] = f["stride"] + data.draw(st.sampled_from([-8, 8, -1, 1 << 30]))
        elif target == "byte_order":
            head["byte_order"] = "big" if head["byte_order"] == "little" else "little"
        elif target == "event_header":
            head["event_header"] = data.draw(st.sampled_from([0, 16, 48, "40"]))
        else:
            parent, key = _walk(data, f["descriptor"])
            if parent is None:
                f["descriptor"] = data.draw(st.sampled_from(LEAVES))
                return
            how, value = _damage_value(data, parent[key])
            if how == "drop":
                del parent[key]
            elif how == "dup":
                parent.insert(key, parent[key])
            else:
                parent[key] = value

    synth.reseal(path, header=damage)
    descs = _checked(path)
    if descs is None:
        for args in ((), ("--format", "jsonl")):
            assert _refused(*_decode(path, *args))
        return
    _check_text(path, descs, mod.BYTE_ORDER, evs)
    if data.draw(st.integers(0, 3)) == 0:  # parquet is slower: a quarter of the cases
        honest = path.with_name("honest.btfrec")
        # The same header but for the functions: the dataset refuses one without its host.
        writer = recording.Writer(str(honest), synth.header(mod), descs, mod.BYTE_ORDER)
        for i in range(0, len(evs), 9):  # batched as synth.write did: rows keep their order
            writer.records(evs[i:i + 9])
        writer.close(0)
        got = _parquet(path, path.with_name("damaged"))
        if got is not None:
            assert got == _parquet(honest, path.with_name("honest"))


@FUZZ
@given(arch=st.sampled_from(ARCHES), data=st.data())
def test_batch_damage_is_refused_or_changes_nothing(tmp_path_factory, arch, data):
    mod, evs = MODULES[arch], EVENTS[arch]
    path = tmp_path_factory.mktemp("fuzz") / "r.btfrec"
    synth.write(path, mod, evs, batch=9)
    before = {args: _decode(path, *args)[1] for args in ((), ("--format", "jsonl"))}
    assert all(before.values())
    nfns = len(synth.descriptors(mod))
    field = data.draw(st.sampled_from([0, 1, 2]))  # function, kind, count

    def damage(table):
        s = table[data.draw(st.integers(0, len(table) - 1))]
        if field == 0:
            s[0] = data.draw(st.integers(0, nfns))
        elif field == 1:
            s[1] = data.draw(st.integers(0, 2))
        else:
            s[2] = max(0, s[2] + data.draw(st.sampled_from([-1, 1, 2])))

    synth.reseal(path, sections=damage)
    for args, want in before.items():
        rc, out, err = _decode(path, *args)
        if not _refused(rc, out, err):
            assert out == want
    if data.draw(st.integers(0, 3)) == 0:
        got = _parquet(path, path.with_name("damaged"))
        if got is not None:
            clean = path.with_name("clean.btfrec")
            synth.write(clean, mod, evs, batch=9)
            assert got == _parquet(clean, path.with_name("clean"))


def test_the_reseal_gets_past_the_checksums(tmp_path):
    """The damage reaches the decoder's own checks: a no-op reseal decodes as before, and a
    reseal of a changed header is not refused for its checksum."""
    mod, evs = MODULES["x86_64"], EVENTS["x86_64"]
    path = tmp_path / "r.btfrec"
    synth.write(path, mod, evs, batch=9)
    before = _decode(path)
    synth.reseal(path)
    assert _decode(path) == before

    def rename(head):
        for f in head["functions"]:
            f["descriptor"][0] = "renamed_" + f["descriptor"][0]

    synth.reseal(path, header=rename)
    rc, out, err = _decode(path)
    assert rc == 0 and "checksum" not in err
    assert out == "".join(f"renamed_{line}\n" for line in before[1].splitlines())
