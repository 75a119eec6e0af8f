"""The capture harness checked against public ABI facts, independently of btfgen.

If these fail, the ground truth itself is wrong (emulator set-up, breakpoints, pattern bytes),
and the placement comparison would be meaningless.
"""

from __future__ import annotations

import os

import pytest

from .capture import captures
from .check import low_bytes
from .cmodel import INT, Record
from .conftest import ARCHES, available
from .corpus import MIN_TOTAL

pytestmark = pytest.mark.usefixtures("built")


def _captures(arch: str):
    if not available(arch):
        pytest.skip(f"no toolchain for {arch}")
    return captures(arch)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_target_captured(arch):
    cs = _captures(arch)
    if "BTFGEN_CONFORMANCE_N" not in os.environ:
        assert len(cs) >= MIN_TOTAL
    assert len({c.func for c in cs}) == len(cs)
    for c in cs:
        assert len(c.args) == len(c.proto.params)
        assert all(0 < len(a) <= 64 for a in c.args), c.proto.describe()


@pytest.mark.parametrize("arch", ARCHES)
def test_exit_is_the_return_of_the_same_call(arch):
    # At the return address the callee's frame is gone: SP is back at its entry value (plus the
    # popped return address where the call pushed one).
    cs = _captures(arch)
    m = cs[0].machine
    popped = m.ptr if m.ret_addr == "[sp]" else 0
    for c in cs:
        assert c.exit.sp == c.entry.sp + popped, (c.func, hex(c.entry.sp), hex(c.exit.sp))


@pytest.mark.parametrize("arch", ARCHES)
def test_first_int_argument_in_first_argument_register(arch):
    cs = _captures(arch)
    m = cs[0].machine
    checked = 0
    for c in cs:
        # A struct (or s390x __int128) return may take the first register for its hidden
        # pointer: skip those.
        ret = c.proto.ret
        if (c.proto.params[:1] != (INT,) or isinstance(ret, Record) or c.proto.variadic
                or (ret is not None and "__int128" in ret.spell())):
            continue
        got = low_bytes(c.entry_reg(m.first_arg), m.ptr, 4, m.byte_order)
        assert got == c.args[0], f"{arch} {c.func}: {m.first_arg} has {got.hex()}, " \
                                 f"passed {c.args[0].hex()}\n{c.proto.describe()}"
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("arch", ARCHES)
def test_int_return_in_return_register(arch):
    cs = _captures(arch)
    m = cs[0].machine
    checked = 0
    for c in cs:
        if c.proto.ret != INT:
            continue
        got = low_bytes(c.exit_reg(m.ret_reg), m.ptr, 4, m.byte_order)
        assert got == c.ret, f"{arch} {c.func}: {m.ret_reg} has {got.hex()}, returned " \
                             f"{c.ret.hex()}\n{c.proto.describe()}"
        checked += 1
    assert checked >= 5
