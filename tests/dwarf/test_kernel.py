"""Debian's kernels with their -dbg vmlinux: DWARF against btfgen's placement from the kernel's
BTF (made by pahole where the kernel has none, as tests/live_kernel makes it). On bookworm's
i386 6.1 the functions compiled asmlinkage (regparm(0): every argument on the stack) are found;
on unstable's armhf, amd64, arm64, riscv64 and ppc64el 7.2 nothing disagrees; in each, on a
seeded sample of 2,000 functions read through .debug_aranges, nearly every function with
parameters is compared: riscv64's patchable-entry no-ops and ppc64el's lie between a symbol and
DWARF's first instruction, and a check that did not tie them compared one function in nine
(docs/dwarf.md has the whole-kernel figures). Marked `live` (a -dbg package is 0.4-1.2 GB);
BTFGEN_DWARF_WHOLE_KERNEL=1 checks every function."""

from __future__ import annotations

import os
import random

import pytest

import btfgen
from btfgen.abi.arches import load_arch
from btfgen.btf.reader import open_btf
from btfgen.commands.check import summarize
from btfgen.dwarf.compare import AGREE, DISAGREE

pytestmark = pytest.mark.live

# Found by `btfgen check` on the whole kernel: each is declared asmlinkage.
ASMLINKAGE = {"vprintk_emit", "vprintk", "schedule_tail", "dump_stack_lvl",
              "x86_acpi_enter_sleep_state"}
SAMPLE = 2000
RUN = 100


# The kernels, each with the functions whose compiled convention differs from the prototype.
KERNELS = {"bookworm-i386": ("i386", ASMLINKAGE), "unstable-armhf": ("arm", set()),
           "unstable-amd64": ("x86_64", set()), "unstable-arm64": ("arm64", set()),
           "unstable-riscv64": ("riscv64", set()), "unstable-ppc64el": ("ppc64le", set())}
# Of the functions with parameters, the least share compared (whole kernels: 96.7-99.1%; the
# rest have no DWARF definition, only clones, nothing known at entry).
MIN_COVERAGE = 93.0


def _kernel(name: str):
    from live_kernel import btf as kbtf  # tests/ is on sys.path (conftest.py)
    from live_kernel import debian
    from live_kernel import kernel as kernels
    from live_kernel.conftest import unavailable
    from live_kernel.targets import TARGETS

    try:
        k = kernels.fetch(TARGETS[name])
        return kernels.debug_vmlinux(k), kbtf.vmlinux_btf(k)
    except (debian.PackageError, RuntimeError) as e:
        unavailable(f"{name} -dbg kernel not available: {e}")


def _sample(vmlinux: str, names: list[str], conv) -> list[str]:
    """At least SAMPLE functions, seeded: runs of RUN functions neighbouring in the text, where
    a compile unit's functions lie, so the sample reads a few hundred units, not nearly all."""
    from btfgen.dwarf.reader import DwarfFile

    wanted = set(names)
    with DwarfFile(vmlinux, conv) as dwarf:
        by_address = [n for _, ns in sorted(dwarf.symbols().items()) for n in ns if n in wanted]
    by_address = list(dict.fromkeys(by_address))
    rng, out = random.Random(12), set()
    while len(out) < SAMPLE:
        start = rng.randrange(max(1, len(by_address) - RUN))
        out.update(by_address[start:start + RUN])
    return sorted(out)


def _check(vmlinux, btf_path, arch: str, names: list[str]) -> list:
    """`btfgen check`'s verdicts on the functions named: the kernel's BTF, its vmlinux's DWARF."""
    target = btfgen.open(str(btf_path), arch=arch, dwarf=str(vmlinux))
    return target.check(target.select(names).functions)


@pytest.fixture(scope="module")
def i386_kernel():
    return _kernel("bookworm-i386")


def test_asmlinkage_functions_disagree(i386_kernel):
    vmlinux, btf_path = i386_kernel
    verdicts = {v.name: v for v in _check(vmlinux, btf_path, "i386", sorted(ASMLINKAGE))}
    for name in ASMLINKAGE:
        v = verdicts[name]
        assert v.verdict == DISAGREE, v
        # btfgen puts the first arguments in eax/edx/ecx; DWARF on the stack from sp+4 on.
        first = v.params[0]
        assert first.btfgen.startswith("eax[") and first.dwarf.startswith("sp+4["), first


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_seeded_sample_agrees(name):
    arch, divergent = KERNELS[name]
    vmlinux, btf_path = _kernel(name)
    btf = open_btf(str(btf_path))
    names = sorted({f.name for f in btf.funcs()})
    if os.environ.get("BTFGEN_DWARF_WHOLE_KERNEL") != "1":
        names = sorted(set(_sample(str(vmlinux), names, load_arch(arch))) | divergent)
    verdicts = _check(vmlinux, btf_path, arch, names)
    assert {v.name for v in verdicts if v.verdict == DISAGREE} >= divergent
    bad = [v for v in verdicts if v.verdict == DISAGREE and v.name not in divergent]
    assert not bad, "\n".join(f"{v.name}: {v.params}" for v in bad[:10])
    s = summarize(verdicts)
    assert s["coverage_percent"] >= MIN_COVERAGE, s
    # Each sampled function has a symbol: its DWARF definition is tied to it (a handful are
    # second definitions of the name whose code the symbol is not).
    assert s["not_comparable"].get("no ELF symbol", 0) <= 0.005 * len(names), s
    assert any(v.verdict == AGREE for v in verdicts)


def test_corrected_layout_of_asmlinkage_functions(i386_kernel):
    """Through DWARF, each asmlinkage function's arguments are 4-byte stack slots from sp+4 on
    (regparm(0)), in the layout and so in every generated decoder."""
    from btfgen.dwarf.correct import correct_layout
    from btfgen.layout import StackPiece
    from btfgen.place import place_functions

    vmlinux, btf_path = i386_kernel
    btf = open_btf(str(btf_path))
    conv = load_arch("i386")
    layout = place_functions(btf, conv, [btf.find_funcs(n)[0] for n in sorted(ASMLINKAGE)])
    fixed, corrections = correct_layout(layout, str(vmlinux), conv)
    assert {c.name for c in corrections} == ASMLINKAGE
    for f in fixed.functions:
        at = 4
        for a in f.args:
            assert a.source == "dwarf" and not a.unavailable, (f.name, a)
            assert a.pieces == (StackPiece(at, 0, a.size),), (f.name, a)
            at += max(4, a.size)
        assert f.ret is None or f.ret.source == "abi"
