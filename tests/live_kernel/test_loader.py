"""The loader, proven with a hand-written probe before generated code is involved: do_mmap()'s
register arguments at entry, its return value and the address saved at entry at exit."""

from __future__ import annotations

import struct

import pytest

from . import build, bundle, runner, scenario
from .conftest import btf_for, kernel_for
from .targets import TARGETS

pytestmark = pytest.mark.live


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_handwritten_probe(name):
    k = kernel_for(name)
    t = k.target
    psize = 4 if t.arch in ("i386", "arm") else 8
    include = [] if psize == 4 else [build.vmlinux_h(btf_for(k)).parent]
    defines = ("GUEST_32BIT",) if psize == 4 else ()
    obj = build.bpf_object(t, build.GUEST / "handwritten.bpf.c", include, defines)
    report = runner.run(k, bundle.make(obj), scenario.actions(psize)[:1])  # the mmap
    assert set(report.attached.values()) == {"ok"}, report.text
    order = ">" if t.big_endian else "<"
    recs = {
        struct.unpack(order + "I", key)[0]: struct.unpack(order + "4Q", value)
        for key, value in report.maps.get("results", {}).items()
    }

    def rec(phase, probe):
        got = recs.get(phase << 8 | probe)
        assert got, f"{name} {k.release}: probe {probe} did not fire in action {phase}"
        return got[1:]

    where = f"{t.arch} {k.release}"
    phase = scenario.PHASE["mmap"]
    addr, length, _ = rec(phase, 0)
    assert (addr, length) == (scenario.mmap_addr(psize), scenario.MMAP_LEN), (
        f"{where} do_mmap addr/len: decoded {addr:#x}/{length:#x}"
    )
    ret, saved, _ = rec(phase, 1)
    returned = int(report.calls["mmap"], 0)  # the kernel need not honour the address hint
    assert (ret, saved) == (returned, scenario.mmap_addr(psize)), (
        f"{where} do_mmap exit: returned {ret:#x} (mmap gave {returned:#x}), "
        f"addr saved at entry {saved:#x}"
    )
