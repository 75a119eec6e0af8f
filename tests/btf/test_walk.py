"""The one type walk: dispatch by kind with group fallbacks, the one depth limit for every
computation over types, and members as C names them."""

from __future__ import annotations

import pytest
import rawbtf

from btfgen.abi.classify import Classifier
from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.btf.cnames import c_spelling
from btfgen.btf.reader import load_btf
from btfgen.codegen.cdecl import CTypes
from btfgen.decoder.describe import type_desc


def _table(build) -> tuple:
    w = rawbtf.BtfWriter()
    ids = build(w)
    return load_btf("walk.btf", w.bytes()), ids


class _Kinds(walk.TypeWalk):
    """Names the method each kind reached."""

    def visit_int(self, t, depth):
        return "int"

    def visit_composite(self, t, depth):
        return "composite"

    def visit_qualifier(self, t, depth):
        return "qualifier:" + self.visit(t.type, depth)


def test_a_kind_without_a_method_goes_to_its_group_then_to_visit_other():
    def build(w):
        i = w.int_("int", 4, 1)
        return dict(i=i, s=w.composite("STRUCT", "s", 4, [("a", i, 0, 0)]),
                    u=w.composite("UNION", "u", 4, [("a", i, 0, 0)]),
                    c=w.ref("CONST", i), td=w.ref("TYPEDEF", i, "myint"),
                    tag=w.ref("TYPE_TAG", i, "user"), f=w.float_("float", 4))
    table, ids = _table(build)
    kinds = _Kinds()
    assert kinds.visit(table[ids["s"]]) == kinds.visit(table[ids["u"]]) == "composite"
    assert kinds.visit(table[ids["c"]]) == "qualifier:int"
    # typedefs and type tags are seen through by default, as every modifier is
    assert kinds.visit(table[ids["td"]]) == kinds.visit(table[ids["tag"]]) == "int"
    with pytest.raises(T.TypeWalkError, match="has no meaning here"):
        kinds.visit(table[ids["f"]])


def test_every_computation_stops_at_the_one_depth_limit():
    """A struct nested in itself (hostile BTF the reader cannot refuse: a loop through
    members) is a TypeWalkError or an opaque value in every walk, never a RecursionError."""
    def build(w):
        # struct a { struct a x; } through an array, so that no size is taken from a field
        arr = w.array(2, 0, 1)  # the struct below is id 2
        return dict(a=w.composite("STRUCT", "a", 8, [("x", arr, 0, 0)]))
    table, ids = _table(build)
    a = table[ids["a"]]
    assert ids["a"] == 2
    with pytest.raises(T.TypeWalkError, match="deeper than"):
        measure.align_of(a, 8)
    shape = Classifier(8, hfa_max_members=4, sysv_max_size=16).shape(a)
    assert shape.cls == "opaque" and "deeper than" in shape.reason
    with pytest.raises(T.TypeWalkError, match="deeper than"):
        type_desc(a)  # no descriptor: the value that has it says why (test_decode.py)
    assert c_spelling(a) == "struct a"
    ctypes = CTypes(table, 8, "self")
    assert ctypes.declare(a, "v").startswith("struct ")  # the cycle falls back to bytes inside


def test_a_chain_of_modifiers_past_the_limit_is_refused():
    def build(w):
        prev = w.int_("int", 4, 1)
        for _ in range(walk.MAX_DEPTH + 1):
            prev = w.ref("CONST", prev)
        return dict(top=prev)
    table, ids = _table(build)
    top = table[ids["top"]]
    for compute in (measure.size_of, c_spelling, walk.strip):
        with pytest.raises(T.TypeWalkError):
            compute(top)


def test_named_members_lift_anonymous_members_with_their_offsets():
    def build(w):
        i = w.int_("int", 4, 1)
        inner = w.composite("UNION", "", 4, [("lo", i, 0, 0), ("hi", i, 0, 0)])
        return dict(s=w.composite("STRUCT", "s", 12, [
            ("a", i, 0, 0), ("", inner, 32, 0), ("", i, 64, 3), ("b", i, 67, 5)], kflag=True))
    table, ids = _table(build)
    got = [(m.name, off) for m, off in walk.named_members(table[ids["s"]])]
    assert got == [("a", 0), ("lo", 32), ("hi", 32), ("b", 67)]  # the unnamed bitfield is padding
