"""Debian bookworm's i386 kernel (6.1.0-50-686-pae): its -dbg vmlinux's DWARF against btfgen's
placement from the kernel's BTF (made by pahole, as tests/live_kernel makes it). The functions
compiled asmlinkage (regparm(0): every argument on the stack) are found and nothing else
disagrees, on a seeded sample of 2,000 functions read through .debug_aranges. Marked `live`
(the -dbg package is ~400 MB); BTFGEN_DWARF_WHOLE_KERNEL=1 checks every function."""

from __future__ import annotations

import os
import random

import pytest

from btfgen.abi.arches import load_arch
from btfgen.btf.reader import open_btf
from btfgen.commands.check import check, summarize
from btfgen.dwarf.compare import AGREE, DISAGREE

pytestmark = pytest.mark.live

# Found by `btfgen check` on the whole kernel: each is declared asmlinkage.
ASMLINKAGE = {"vprintk_emit", "vprintk", "schedule_tail", "dump_stack_lvl",
              "x86_acpi_enter_sleep_state"}
SAMPLE = 2000


@pytest.fixture(scope="module")
def i386_kernel():
    from live_kernel import btf as kbtf  # tests/ is on sys.path (conftest.py)
    from live_kernel import debian
    from live_kernel import kernel as kernels
    from live_kernel.targets import TARGETS

    try:
        k = kernels.fetch(TARGETS["bookworm-i386"])
        return kernels.debug_vmlinux(k), kbtf.vmlinux_btf(k)
    except (debian.PackageError, RuntimeError) as e:
        pytest.skip(f"bookworm i386 -dbg kernel not available: {e}")


def test_asmlinkage_functions_disagree(i386_kernel):
    vmlinux, btf_path = i386_kernel
    btf = open_btf(str(btf_path))
    verdicts = {v.name: v for v in check(str(vmlinux), btf, load_arch("i386"), sorted(ASMLINKAGE))}
    for name in ASMLINKAGE:
        v = verdicts[name]
        assert v.verdict == DISAGREE, v
        # btfgen puts the first arguments in eax/edx/ecx; DWARF on the stack from sp+4 on.
        first = v.params[0]
        assert first.btfgen.startswith("eax[") and first.dwarf.startswith("sp+4["), first


def test_seeded_sample_agrees(i386_kernel):
    vmlinux, btf_path = i386_kernel
    btf = open_btf(str(btf_path))
    names = sorted({f.name for f in btf.funcs()})
    if os.environ.get("BTFGEN_DWARF_WHOLE_KERNEL") != "1":
        names = random.Random(12).sample(names, SAMPLE)
    verdicts = check(str(vmlinux), btf, load_arch("i386"), names)
    bad = [v for v in verdicts if v.verdict == DISAGREE and v.name not in ASMLINKAGE]
    assert not bad, "\n".join(f"{v.name}: {v.params}" for v in bad[:10])
    s = summarize(verdicts)
    assert s["agree"] >= 0.85 * len(names), s
    assert any(v.verdict == AGREE for v in verdicts)
