"""Recordings without BPF: events as trace.bpf.c lays them out (struct trace_event), their
value bytes random, for the functions of a generated module (the goldens in
generated/examples: every arch's byte order and pointer size)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

from btfgen.probe import recording, ringspan, spec_format
from btfgen.probe.event import HEADS, RECORD_HEADS  # the event's and the record's heads
from btfgen.recordings import reader

ROOT = Path(__file__).resolve().parents[2]


def module(arch: str):
    path = ROOT / "generated" / "examples" / arch / f"btfgen_{arch}.py"
    spec = importlib.util.spec_from_file_location(f"golden_{arch}", path)
    mod = importlib.util.module_from_spec(spec)
    # No __pycache__ beside the goldens: test_golden.py checks that directory holds the outputs
    # and nothing else.
    sys.dont_write_bytecode, before = True, sys.dont_write_bytecode
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = before
    return mod


def descriptors(mod) -> list:
    return [mod._descriptor(n)[0] for n in mod.names()]


def event(desc, kind: int, rng: random.Random, ns: int, tid: int = 100, cpu: int = 0,
          failed: int = 0, order: str = "little", flags: int = 0) -> bytes:
    head = HEADS[order].pack(42, tid, b"synth", ns, cpu, flags)
    rec = RECORD_HEADS[order].pack(desc.btf_id, kind, failed)
    # As long as the BPF side sends it: the heads and the data its decoder writes.
    return head + rec + rng.randbytes(spec_format.event_size(desc, kind) - len(head) - len(rec))


def events(descs, n: int, seed: int, order: str, failed_rate: float = 0.0) -> list[bytes]:
    """n events: calls of random functions, each an entry then its exit, on a few threads."""
    rng = random.Random(seed)
    out, ns = [], 1000
    while len(out) < n:
        d = rng.choice(descs)
        tid = rng.choice((100, 101, 102))
        for kind in (0, 1):
            if len(out) == n:
                break
            ns += rng.randrange(1, 5000)
            failed = rng.getrandbits(64) if rng.random() < failed_rate else 0
            out.append(event(d, kind, rng, ns, tid, rng.randrange(4), failed, order))
    return out


def header(mod) -> dict:
    """A recording's header as the tracer writes it, but for its functions."""
    return {"format": "btfgen trace recording", "arch": mod.ARCH, "who": False,
            "byte_order": mod.BYTE_ORDER, "pointer_size": mod.POINTER_SIZE,
            "kernel_release": "synthetic", "kind": "user", "host": "synthetic-host"}


def write(path: Path, mod, evs: list[bytes], lost: int = 0, batch: int | None = None,
          version: int = recording.VERSION, head: dict | None = None) -> None:
    """A recording of `evs`: version 4 (today's: every second span raw, its runs left to the
    reader, as the tracer writes a span handed over on the BPF side's count), 3 (every span with
    its runs: version 4's writer, as version 3's wrote them) or 2 (recording_v2.py), a span of
    `batch` events at a time (all in one without), or version 1 (recording_v1.py, a batch
    flushed every `batch` events)."""
    head = head or header(mod)
    descs = descriptors(mod)
    if version == 1:
        import recording_v1

        w = recording_v1.Writer(str(path), head, descs, mod.BYTE_ORDER)
        for i, e in enumerate(evs):
            w.record(e)
            if batch and (i + 1) % batch == 0:
                w.flush()
        w.close(lost)
        return
    if version == 2:
        import recording_v2

        w = recording_v2.Writer(str(path), head, descs, mod.BYTE_ORDER)
    else:
        w = recording.Writer(str(path), head, descs, mod.BYTE_ORDER)
    step = batch or max(len(evs), 1)
    for k, i in enumerate(range(0, len(evs), step)):
        if version >= 4 and k % 2:
            span = ringspan.Span.of(evs[i:i + step], mod.BYTE_ORDER)
            w.span(ringspan.Span(span.data, None, span.records))
        else:
            w.records(evs[i:i + step])
    w.close(lost)
    if version == 3:  # version 4 with every span's runs is version 3 but for this word
        with open(path, "r+b") as f:
            f.seek(8)
            f.write((3).to_bytes(4, "little"))



def reseal(path: Path, header=None, sections=None, runs=None) -> None:
    """Damage a recording past its checksums: `header(dict)` changes the parsed JSON header,
    `sections(list)` the batches' section tables ([function, kind, count, pad] each, batch by
    batch: version 1), `runs(list, data)` a span's runs ([repeats, period, w0..w3] each) and
    its bytes (a bytearray), span by span (versions 2 and 3); every CRC and sum is recomputed, so
    only the reader's own checks can catch it."""
    import json
    import zlib

    data = Path(path).read_bytes()
    magic, version, size, _crc, pad = recording.FILE_HEAD.unpack_from(data)
    text = data[recording.FILE_HEAD.size:recording.FILE_HEAD.size + size]
    head = json.loads(text)
    strides = [f["stride"] for f in head["functions"]]  # the framing as written
    if header:
        header(head)
    new = json.dumps(head, sort_keys=True).encode()
    out = bytearray(recording.FILE_HEAD.pack(magic, version, len(new), zlib.crc32(new), pad))
    out += new
    at = recording.FILE_HEAD.size + size
    while data[at:at + 4] == b"BATC":
        _, n, nsec, _crc, total = reader.BATCH_HEAD.unpack_from(data, at)
        at += reader.BATCH_HEAD.size
        table = [list(reader.SECTION.unpack_from(data, at + i * reader.SECTION.size))
                 for i in range(nsec)]
        at += nsec * reader.SECTION.size
        olen = n * 2 + (-n * 2) % 8
        order = data[at:at + olen]
        at += olen
        plen = sum(count * strides[fn] for fn, _kind, count, _pad in table)
        payload = data[at:at + plen]
        at += plen
        if sections:
            sections(table)
        body = b"".join(reader.SECTION.pack(*s) for s in table) + order
        out += reader.BATCH_HEAD.pack(b"BATC", n, len(table), zlib.crc32(body), total)
        out += body + payload
    while data[at:at + 4] == b"SPAN":
        _, n, nruns, nbytes, _crc, _hcrc = recording.SPAN_HEAD.unpack_from(data, at)
        at += recording.SPAN_HEAD.size
        table = [list(r) for r in recording.RUN.iter_unpack(
            data[at:at + nruns * recording.RUN.size])]
        at += nruns * recording.RUN.size
        body = bytearray(data[at:at + nbytes])
        at += nbytes
        if version >= 3:
            at += recording.checks_size(nbytes)
        if runs:
            runs(table, body)
        packed = b"".join(recording.RUN.pack(*r) for r in table)
        crc = zlib.crc32(packed) if version >= 3 else zlib.crc32(body, zlib.crc32(packed))
        head = recording.SPAN_HEAD.pack(b"SPAN", n, len(table), len(body), crc, 0)
        out += head[:-4] + zlib.crc32(head[:-4]).to_bytes(4, "little") + packed + body
        if version >= 3:
            out += recording.checks(body)
    out += data[at:]
    Path(path).write_bytes(bytes(out))
