"""The columnar path (numpy dtypes from the layout, Arrow, Parquet) gives the values the
per-record path gives, event for event, on every arch's byte order and pointer size."""

from __future__ import annotations

import math

import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btfgen.decoder import runtime
from btfgen.decoder.runtime import Function
from btfgen.probe import event, output

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
columnar = pytest.importorskip("btfgen.recordings.columnar")

ARCHES = ["x86_64", "s390x", "i386", "arm", "ppc64le", "riscv64"]
MODULES = {a: synth.module(a) for a in ARCHES}


def _same(x):
    """NaN equal to NaN; floats by their bits otherwise would not be needed."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, dict):
        return {k: _same(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_same(v) for v in x]
    return x


def _per_record(mod, evs, name: str, kind: int) -> list[dict]:
    fn = Function(mod._descriptor(name)[0])
    rows = []
    for e in evs:
        _, tid, _, ns, cpu, flags = event.HEADS[mod.BYTE_ORDER].unpack_from(e)
        btf_id, k, _failed = runtime.RECORD_HEADERS[mod.BYTE_ORDER].unpack_from(
            e, event.EVENT_HEADER)
        if btf_id != fn.btf_id or k != kind:
            continue
        v = fn.decode_record(e[event.EVENT_HEADER:])
        values = zip(fn.args, v) if kind == 0 else ([(fn.ret.value, v)] if fn.ret else [])
        row = {"timestamp": ns, "cpu": cpu, "pid": 42, "tid": tid}
        row.update({("return" if kind else d.name): columnar.plain(x, d.type) for d, x in values})
        if kind:  # what the printer names beside the return (a user trace's: by the flags)
            err = (flags & output.EVENT_ERRNO_MASK) >> output.EVENT_ERRNO_SHIFT
            row["errno"] = output.errno_of(fn, v, err, False) or None
        rows.append(_same(row))
    return rows


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=st.sampled_from(ARCHES), n=st.integers(0, 400), seed=st.integers(0, 2**32),
       batch=st.sampled_from([None, 5, 64]), failed=st.sampled_from([0.0, 0.5]))
def test_columnar_equals_per_record(tmp_path, arch, n, seed, batch, failed):
    mod = MODULES[arch]
    evs = synth.events(synth.descriptors(mod), n, seed, mod.BYTE_ORDER, failed)
    path = tmp_path / "r.btfrec"
    synth.write(path, mod, evs, batch=batch)
    for name in mod.names():
        for kind, kname in ((0, "entry"), (1, "exit")):
            want = _per_record(mod, evs, name, kind)
            got = [_same(r) for r in columnar.table(str(path), name, kname).to_pylist()]
            assert got == want, (arch, name, kname)


def test_arrays_are_structured_views(tmp_path):
    mod = MODULES["s390x"]
    evs = synth.events(synth.descriptors(mod), 200, 3, mod.BYTE_ORDER)
    path = tmp_path / "r.btfrec"
    synth.write(path, mod, evs)
    (a,) = list(columnar.arrays(str(path), "scalars", "entry"))
    assert a.dtype.names[:4] == ("timestamp", "cpu", "pid", "tid")
    assert a.dtype.fields["timestamp"][0].byteorder == ">"  # the target's, read in place
    assert len(a) == len(_per_record(mod, evs, "scalars", 0))


def test_parquet_files(tmp_path):
    mod = MODULES["x86_64"]
    evs = synth.events(synth.descriptors(mod), 300, 9, mod.BYTE_ORDER, 0.2)
    path = tmp_path / "r.btfrec"
    synth.write(path, mod, evs, batch=50)
    out = tmp_path / "pq"
    assert columnar.write_parquet(str(path), str(out)) == 0
    files = sorted(p.name for p in out.iterdir())
    assert "scalars.entry.parquet" in files and not any(f.endswith(".part") for f in files)
    for f in files:
        name, kind, _ = f.split(".")
        got = pq.read_table(out / f).to_pylist()
        assert [_same(r) for r in got] == _per_record(mod, evs, name, 0 if kind == "entry" else 1)


def test_unknown_function_is_one_line(tmp_path):
    from btfgen.errors import BtfgenError

    mod = MODULES["x86_64"]
    path = tmp_path / "r.btfrec"
    synth.write(path, mod, synth.events(synth.descriptors(mod), 4, 1, mod.BYTE_ORDER))
    with pytest.raises(BtfgenError, match="no function 'nope' recorded"):
        columnar.table(str(path), "nope")
