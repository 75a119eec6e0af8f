"""Mutated and truncated real BTF: the reader either succeeds, and then dumping, decoding and
measuring every type ends in success or BtfError/TypeWalkError, or it raises BtfError. Never
another exception, never a hang."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import csrc
import pytest
import rawbtf
import toolchains
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btfgen.btf.cnames import c_spelling
from btfgen.btf.dump import dump_raw
from btfgen.btf.reader import Btf, load_btf, open_btf
from btfgen.btf.measure import align_of, size_of
from btfgen.btf.types import TypeWalkError
from btfgen.errors import BtfError

# The new-format seed's kinds unknown to btfgen are a warning on every load (checked in
# test_layout_section.py): here, noise.
pytestmark = pytest.mark.filterwarnings("ignore::btfgen.errors.BtfgenWarning")

VMLINUX = Path("/sys/kernel/btf/vmlinux")
KERNEL_SLICE = 400  # types


def btf_section(path: Path) -> bytes:
    """The raw .BTF bytes of an ELF file (mutations then hit BTF, not the ELF container)."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(".BTF").data()


def kernel_slice(btf: Btf, count: int) -> bytes:
    """The first `count` types of a kernel's BTF as a small blob of their own: names copied,
    references past the slice pointed at type 1 instead."""
    w = rawbtf.BtfWriter(btf.byte_order)

    def ref(type_id: int) -> int:
        return type_id if type_id <= count else 1

    for r in btf.records(1, count + 1):
        kind = r.kind.name
        name = btf.string(r.name_off)
        st_ = ref(r.size_type) if kind in ("PTR", "TYPEDEF", "VOLATILE", "CONST", "RESTRICT",
                                            "FUNC", "FUNC_PROTO", "VAR", "DECL_TAG",
                                            "TYPE_TAG") else r.size_type
        tail = b""
        if kind in ("INT", "VAR") or kind == "DECL_TAG":
            tail = w.u32(r.tail)
        elif kind == "ARRAY":
            tail = w.u32(ref(r.tail[0]), ref(r.tail[1]), r.tail[2])
        elif kind in ("STRUCT", "UNION"):
            tail = b"".join(w.u32(w.s(btf.string(n)), ref(t), o) for n, t, o in zip(*r.tail))
        elif kind == "FUNC_PROTO":
            tail = b"".join(w.u32(w.s(btf.string(n)), ref(t)) for n, t in zip(*r.tail))
        elif kind == "ENUM":
            tail = b"".join(w.u32(w.s(btf.string(n)), v) for n, v in zip(*r.tail))
        elif kind == "ENUM64":
            tail = b"".join(w.u32(w.s(btf.string(n)), lo, hi) for n, lo, hi in zip(*r.tail))
        elif kind == "DATASEC":
            tail = b"".join(w.u32(ref(t), o, s) for t, o, s in zip(*r.tail))
        w.add(kind, name, r.vlen, st_, tail, r.kflag)
    return w.bytes()


def seeds() -> list[tuple[str, bytes]]:
    found = [("every-kind-big", rawbtf.every_kind("big")),
             ("new-format", rawbtf.every_kind("little", odd=False, new_kinds=True))]
    if toolchains.TOOLCHAINS["x86_64"].available() and toolchains.have("pahole"):
        obj = toolchains.compile_c(csrc.a_source(), "x86_64")  # .BTF by pahole -J
        found.append(("pahole-x86_64", btf_section(obj)))
    if VMLINUX.exists():
        found.append(("kernel-slice", kernel_slice(open_btf(str(VMLINUX)), KERNEL_SLICE)))
    return found


SEEDS = seeds()


def exercise(data: bytes) -> None:
    try:
        btf = load_btf("fuzz.btf", data)
    except BtfError:
        return
    try:
        dump_raw(btf)
    except BtfError:
        pass
    for type_id in range(len(btf)):
        try:
            t = btf[type_id]
        except BtfError:
            continue
        for measure in (size_of, lambda t: align_of(t, 8), c_spelling):
            try:
                measure(t)
            except (BtfError, TypeWalkError):
                pass
    for lookup in (lambda: btf.find_funcs("f"), lambda: btf.find_types("int"),
                   lambda: list(btf.funcs()), lambda: btf.pointer_size):
        try:
            lookup()
        except BtfError:
            pass


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang("no result within 10 s")


INTERESTING = [0, 1, 2, 3, 0x7F, 0x80, 0xFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF, 0x0D000001, 0x04000000, 0x84000001, 0x13000002]


@pytest.mark.parametrize("name,seed", SEEDS, ids=[s[0] for s in SEEDS])
@settings(max_examples=int(os.environ.get("BTFGEN_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutations(name, seed, data):
    blob = bytearray(seed)
    for _ in range(data.draw(st.integers(0, 6), label="mutations")):
        pos = data.draw(st.integers(0, len(blob) - 1), label="pos")
        if data.draw(st.booleans(), label="word"):
            pos &= ~3
            value = data.draw(st.sampled_from(INTERESTING) | st.integers(0, 0xFFFFFFFF))
            blob[pos:pos + 4] = value.to_bytes(4, "little" if name != "every-kind-big" else "big")
        else:
            blob[pos] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        del blob[data.draw(st.integers(0, len(blob)), label="cut"):]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(10)
    try:
        exercise(bytes(blob))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_seeds_are_valid():
    """The seeds themselves load and dump: mutations start from good BTF. (The hand-built one
    has a FUNC linkage, 7, that only the dump accepts.)"""
    assert len(SEEDS) >= 2
    for name, seed in SEEDS:
        btf = load_btf(name, seed)
        assert dump_raw(btf).count("\n[") >= 40
        for type_id in range(len(btf)):
            if name != "every-kind-big":
                btf[type_id]
