"""The dataset's `errno` and `errno_name` columns (issue 48, item 2) mean what `btfgen decode`
prints beside a return: a user function's -1 or NULL named by the error its exit's flags carry
(the last system call's inside the call), never by the kernel's guess; a kernel function's
negative return by the kernel's convention; null where nothing is attributed. Recordings of
crafted exits (returns of -1, 0, -2, 1, random; flags with a named errno, one without a name, or
none; some returns failed to read), in each recording version the reader reads, little and
big-endian; checked row by row against the printer's own rule (output.errno_of) and, for user
code, against `btfgen decode --format jsonl`'s `errno`; columnar's exit tables have the same
numbers."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import synth

from btfgen.probe import output
from btfgen.probe.event import HEADS, RECORD_HEADS
from btfgen.recordings import replay

np = pytest.importorskip("numpy")
pq = pytest.importorskip("pyarrow.parquet")
columnar = pytest.importorskip("btfgen.recordings.columnar")
dataset = pytest.importorskip("btfgen.recordings.dataset")

RETURNS = (-1, 0, -2, 1, None)  # None: the random bytes synth writes
ERRNOS = (0, 2, 22, 300, 511)  # 300 and 511: numbers with no name


def _exit(desc, layout, rng, ns: int, tid: int, order: str) -> bytes:
    flags = rng.choice(ERRNOS) << output.EVENT_ERRNO_SHIFT
    failed = rng.getrandbits(64) if rng.random() < 0.2 else 0
    raw = bytearray(synth.event(desc, 1, rng, ns, tid, 0, failed, order, flags))
    want = rng.choice(RETURNS)
    if want is not None and "return" in layout.dtype.names:
        dt, at = layout.dtype.fields["return"][:2]
        raw[at:at + dt.itemsize] = np.array([want % (1 << 8 * dt.itemsize)], np.uint64
                                            ).astype(dt.newbyteorder("=")).astype(dt).tobytes() \
            if dt.kind == "u" else np.array([want]).astype(dt).tobytes()
    return bytes(raw)


def _layouts(path: Path, mod, head: dict) -> list:
    """The exits' column layouts of the module's functions, as the dataset reads them: from a
    recording of no events (its decoders are the file's, rebuilt from its header)."""
    from btfgen.recordings import grouping
    from btfgen.recordings.reader import Reader

    synth.write(path, mod, [], head=head)
    with Reader(str(path), replay.word_sum(), grouping=grouping.fastest()) as r:
        return [columnar.Layout(fn, 1, stride, r.order)
                for fn, stride in zip(replay.functions(r), r.strides)]


def _recording(path: Path, arch: str, kind: str, version: int, seed: int) -> None:
    mod = synth.module(arch)
    head = dict(datasets.header(mod, "host-e", "6.1.0-test"), kind=kind)
    functions = list(zip(synth.descriptors(mod), _layouts(path, mod, head)))
    rng, evs, ns = random.Random(seed), [], 1000
    for _ in range(400):
        desc, layout = rng.choice(functions)
        tid = rng.choice((100, 101))
        ns += rng.randrange(1, 500)
        evs.append(synth.event(desc, 0, rng, ns, tid, 0, 0, mod.BYTE_ORDER))
        ns += rng.randrange(1, 500)
        evs.append(_exit(desc, layout, rng, ns, tid, mod.BYTE_ORDER))
    synth.write(path, mod, evs, batch=90, version=version, head=head)


def _expected(path: Path, kernel: bool) -> dict:
    """timestamp -> the errno the printer names at that exit (0: none), by its own rule."""
    from btfgen.recordings import grouping
    from btfgen.recordings.reader import Reader

    out = {}
    with Reader(str(path), replay.word_sum(), grouping=grouping.fastest()) as r:
        fns = replay.functions(r)
        for batch in r.batches():
            for raw in batch.events(r.strides):
                raw = bytes(raw)
                _, _, _, ns, _, flags = HEADS[r.order].unpack_from(raw)
                btf_id, kind, _ = RECORD_HEADS[r.order].unpack_from(raw, HEADS[r.order].size)
                if kind != 1:
                    continue
                fn = next(f for f in fns if f.btf_id == btf_id)
                value = fn.decode_record(raw[HEADS[r.order].size:])
                err = (flags & output.EVENT_ERRNO_MASK) >> output.EVENT_ERRNO_SHIFT
                out[ns] = output.errno_of(fn, value, err, kernel)
    return out


def _rows(root: Path) -> dict:
    got = {}
    for f in sorted(root.glob("host=*/kernel=*/function=*/*.parquet")):
        for row in pq.read_table(f, columns=["timestamp", "kind", "errno", "errno_name"]
                                 ).to_pylist():
            got[row["timestamp"], row["kind"]] = (row["errno"], row["errno_name"])
    return got


@pytest.mark.parametrize("arch,kind,version", [
    ("x86_64", "user", 4), ("x86_64", "kernel", 4), ("s390x", "user", 4),
    ("s390x", "kernel", 3), ("arm", "user", 2), ("x86_64", "user", 1)])
def test_errno_columns_are_what_is_printed(tmp_path, arch, kind, version):
    rec = tmp_path / "r.btfrec"
    _recording(rec, arch, kind, version, seed=version)
    (added,) = dataset.add_all([str(rec)], str(tmp_path / "ds"))
    assert added.error is None and added.rows == 800
    expected = _expected(rec, kind == "kernel")
    got = _rows(tmp_path / "ds")
    assert len(expected) == 400
    named = 0
    for (ns, row_kind), (number, name) in got.items():
        if row_kind == "entry":
            assert number is None and name is None
            continue
        want = expected[ns]
        assert (number, name) == ((want, output.errno.errorcode[want]) if want
                                  else (None, None)), ns
        named += bool(want)
    assert named >= 5, named  # the crafted -1s and NULLs were named, not only left bare
    # columnar's exit tables have the same numbers (the dataset's come from them)
    mod = synth.module(arch)
    from_columnar = {r["timestamp"]: r["errno"] for name in mod.names()
                     for r in columnar.table(str(rec), name, "exit").to_pylist()}
    assert from_columnar == {ns: v or None for ns, v in expected.items()}
    if kind == "user":
        jsonl = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "jsonl",
                                str(rec)], capture_output=True, text=True, check=True,
                               cwd=Path(__file__).resolve().parents[2]).stdout
        printed = {e["timestamp"]: e.get("errno") for e in map(json.loads, jsonl.splitlines())
                   if e["kind"] == "exit"}
        assert printed == {ns: ({"value": v, "name": output.errno.errorcode[v]} if v else None)
                           for ns, v in expected.items()}


def test_a_kernel_return_of_minus_1_is_eperm_a_user_ones_only_by_its_flags(tmp_path):
    """The two conventions side by side: the same events, recorded as a user trace and as a
    kernel trace."""
    got = {}
    for kind in ("user", "kernel"):
        rec = tmp_path / f"{kind}.btfrec"
        _recording(rec, "x86_64", kind, 4, seed=7)
        dataset.add_all([str(rec)], str(tmp_path / kind))
        got[kind] = _rows(tmp_path / kind)
    both = [(got["user"][k], got["kernel"][k]) for k in got["user"] if k[1] == "exit"]
    assert any(k == (1, "EPERM") and u != (1, "EPERM") for u, k in both)  # a kernel's -1
    assert any(u[1] == "ENOENT" for u, _ in both) and any(k[1] == "ENOENT" for _, k in both)
