"""btfgen's placement (BTF reader + ABI description + engine) against the real compilers."""

from __future__ import annotations

import pytest

from btfgen.btf import measure
from btfgen.btf import types as T

from .capture import captures
from .check import check_arch, layouts
from .conftest import ARCHES, available

pytestmark = pytest.mark.usefixtures("built")
SHOWN = 25  # findings printed in full per arch


def _captures(arch: str):
    if not available(arch):
        pytest.skip(f"no toolchain for {arch}")
    return captures(arch)


@pytest.mark.parametrize("arch", ARCHES)
def test_btf_sizes_match_the_compiler(arch):
    """The reader's sizes of every parameter and return type are the compiler's sizeof."""
    wrong = []
    for c, layout in layouts(_captures(arch)):
        for i, (vl, expected) in enumerate(zip(layout.args, c.args)):
            if measure.size_of(vl.type) != len(expected):
                wrong.append(f"{c.func} p{i} {vl.type_name}: BTF {measure.size_of(vl.type)}, "
                             f"sizeof {len(expected)}")
        if c.ret is not None and measure.size_of(layout.ret.type) != len(c.ret):
            wrong.append(f"{c.func} ret: BTF {measure.size_of(layout.ret.type)}, sizeof {len(c.ret)}")
    assert not wrong, "\n".join(wrong[:SHOWN])


@pytest.mark.parametrize("ctx", ["pt_regs", "ftrace_regs"])
@pytest.mark.parametrize("arch", ARCHES)
def test_placement_matches_the_compiler(arch, ctx, conformance_row):
    tally = check_arch(_captures(arch), ctx)
    conformance_row(f"{arch} {ctx}", tally.functions, tally.values, tally.agreed,
                    tally.unavailable, len(tally.findings))
    if tally.findings:
        shown = "\n".join(f.report() for f in tally.findings[:SHOWN])
        more = len(tally.findings) - SHOWN
        pytest.fail(f"{arch} ({ctx}): {len(tally.findings)} of {tally.values} values disagree with "
                    f"{tally.functions} compiled functions\n{shown}"
                    + (f"\n... and {more} more" if more > 0 else ""), pytrace=False)
