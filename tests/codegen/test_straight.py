"""The straight-line decoders' table (btfgen/codegen/straight.py): the register image for
every list of register copies it covers, one decoder per other distinct op list, exit lists
keyed with their first failed bit, captures as calls on the spec's own op, out-of-window
registers left to the interpreter with the reason."""

from __future__ import annotations

from btfgen.codegen.straight import CtxWindow, Step, plan_table
from btfgen.decoder.generic import CAP_ROOT, CAP_STR, FROM_CTX, FROM_PTR, FROM_STACK, GenericPlan, Op

WIN = CtxWindow(64, 120, 8)  # x86_64's argument and return registers


def _plan(entry, exit_=()) -> GenericPlan:
    return GenericPlan(tuple(entry), tuple(exit_), (), (), ())


def test_functions_sharing_op_lists_share_a_decoder():
    a = _plan([Op(FROM_STACK, 8, 0, 8)], [Op(FROM_PTR, 0, 8, 16)])
    b = _plan([Op(FROM_STACK, 8, 0, 8)], [Op(FROM_PTR, 0, 8, 16)])
    c = _plan([Op(FROM_STACK, 8, 0, 4)], [Op(FROM_PTR, 0, 8, 16)])
    t = plan_table([a, b, c, a], WIN)
    assert t.ids(a) == t.ids(b) == (2, 2)  # 1 is the register image's, and there is none
    assert t.ids(c) == (3, 2)  # its own entry list; its exit list follows one entry op, as a's
    assert [s.users for s in t.entry] == [2, 1]
    assert not any(s.image for s in t.entry + t.exit)  # no list copies registers only
    assert t.interpreted == ()


def test_the_register_image_serves_every_list_of_register_copies_it_covers():
    two = _plan([Op(FROM_CTX, 112, 0, 8), Op(FROM_CTX, 104, 8, 4)], [Op(FROM_CTX, 80, 0, 8)])
    three = _plan([Op(FROM_CTX, 112, 0, 1), Op(FROM_CTX, 104, 8, 8), Op(FROM_CTX, 96, 16, 2)],
                  [Op(FROM_CTX, 80, 0, 4)])
    none = _plan([], [])
    # rdx at record offset 8: the image has rsi there (used more), so this list keeps its own
    odd = _plan([Op(FROM_CTX, 96, 8, 8)], [Op(FROM_CTX, 80, 0, 8)])
    stack = _plan([Op(FROM_CTX, 112, 0, 8), Op(FROM_STACK, 8, 8, 8)])
    t = plan_table([two, three, two, none, odd, stack], WIN)
    image = t.entry[0]
    assert image.image and image.number == 1 and image.users == 3
    assert image.steps == (Step(FROM_CTX, 112, 0, 0, 8, 0), Step(FROM_CTX, 104, 0, 8, 8, 0),
                           Step(FROM_CTX, 96, 0, 16, 8, 0))  # whole words, by record offset
    assert [t.ids(p)[0] for p in (two, three, none, odd, stack)] == [1, 1, 1, 2, 3]
    assert t.exit[0].image and t.exit[0].steps == (Step(FROM_CTX, 80, 0, 0, 8, 0),)
    assert {t.ids(p)[1] for p in (two, three, none, odd)} == {1}
    assert [s.number for s in t.entry] == [1, 2, 3]
    assert t.on_image(two) == (True, True) and t.on_image(odd) == (False, True)
    assert t.on_image(stack) == (False, True)  # no exit op: the image serves the empty list


def test_the_register_image_takes_no_bytes_before_a_value():
    # A big-endian int: its bytes are the word's last four, at record offset 0. A whole-word
    # copy at offset -4 cannot be, so the list keeps its own decoder.
    be = _plan([Op(FROM_CTX, 116, 0, 4)])
    t = plan_table([be], WIN)
    assert not t.entry[0].image and t.ids(be)[0] == 2
    assert t.entry[0].steps == (Step(FROM_CTX, 112, 4, 0, 4, 0),)


def test_an_exit_list_is_numbered_with_its_first_failed_bit():
    one = _plan([Op(FROM_CTX, 112, 0, 8)], [Op(FROM_PTR, 0, 8, 16)])
    two = _plan([Op(FROM_CTX, 112, 0, 8), Op(FROM_CTX, 104, 8, 8)], [Op(FROM_PTR, 0, 8, 16)])
    t = plan_table([one, two], WIN)
    assert t.ids(one)[1] != t.ids(two)[1]
    assert [s.steps[0].bit for s in t.exit] == [1, 2]


def test_ctx_steps_load_the_word_holding_the_bytes():
    big_endian_int = _plan([Op(FROM_CTX, 116, 0, 4), Op(FROM_STACK, 8, 8, 24)])
    (lst,) = plan_table([big_endian_int], WIN).entry
    assert [(s.source, s.src, s.skip, s.size, s.bit) for s in lst.steps] == [
        (FROM_CTX, 112, 4, 4, 0), (FROM_STACK, 8, 0, 24, 1)]


def test_captures_are_steps_on_the_spec_s_own_op():
    cap = _plan([Op(FROM_CTX, 112, 0, 8), Op(CAP_ROOT, 0, 8, 0), Op(CAP_STR, 0, 24, 64, 2)],
                [Op(FROM_CTX, 80, 0, 8), Op(CAP_ROOT, 0, 96, 0)])
    t = plan_table([cap], WIN)
    assert t.ids(cap) == (2, 2) and t.interpreted == ()
    assert [(s.capture, s.bit) for s in t.entry[0].steps] == [(False, 0), (True, 1), (True, 2)]
    # the first and last ops inline (constants), a hop through the capture subprogram
    assert [(s.root, s.load, s.string) for s in t.entry[0].steps] == [
        (False, False, False), (True, False, False), (False, True, True)]
    assert t.entry[0].steps[2].space == 2  # the memory the load reads, as the op says
    # an exit's capture runs spec->ops[nentry + i]: its bit is that index
    assert [(s.capture, s.bit) for s in t.exit[0].steps] == [(False, 3), (True, 4)]


def test_registers_outside_the_window_stay_on_the_interpreter():
    far = _plan([Op(FROM_CTX, 152, 0, 8)])  # past the registers the decoder loads
    t = plan_table([far], WIN)
    assert t.ids(far)[0] == 0
    assert t.interpreted == ("a register outside the ctx words the decoder loads",)
    assert plan_table([far], None).ids(far) == (0, 2)  # no window: no ctx op; the empty exit runs


def test_past_the_limit_the_least_used_lists_stay_on_the_interpreter():
    # A whole kernel's 900-odd entry decoders in one program: arm64 7.2's verifier said E2BIG.
    rare = _plan([Op(FROM_STACK, 8, 0, 1)])
    common = _plan([Op(FROM_STACK, 8, 0, 8)])
    also = _plan([Op(FROM_STACK, 16, 0, 8)])
    twin = _plan([Op(FROM_STACK, 8, 0, 8)])
    t = plan_table([rare, common, also, twin, _plan([Op(FROM_STACK, 16, 0, 8)])], WIN, limit=2)
    # No register image here: 1 stays the image's (a cookie names it by the number alone).
    assert [len(s.steps) for s in t.entry] == [1, 1] and [s.number for s in t.entry] == [2, 3]
    assert t.ids(rare) == (0, 2) and t.ids(common) == (2, 2) and t.ids(also) == (3, 2)
    assert t.interpreted == ("past the 2 straight-line decoders one program holds (the "
                             "verifier's limit)",)
    # The register image is one of them, whatever its use.
    regs = _plan([Op(FROM_CTX, 112, 0, 8)])
    t = plan_table([common, twin, also, regs], WIN, limit=2)
    assert t.ids(regs)[0] == 1 and t.ids(common)[0] == 2 and t.ids(also)[0] == 0


def test_past_the_limit_a_header_s_own_functions_come_first():
    # bench_generic's two functions beside a whole kernel's decoders: theirs must be kept.
    mine = _plan([Op(FROM_STACK, 8, 0, 1)])
    others = [_plan([Op(FROM_STACK, 16, 0, 8)]) for _ in range(3)]
    t = plan_table([mine, *others], WIN, limit=1, own=1)
    assert t.ids(mine) == (2, 2) and t.ids(others[0])[0] == 0
    assert plan_table([mine, *others], WIN, limit=1).ids(mine)[0] == 0  # by use alone


def test_an_empty_exit_list_is_not_the_empty_entry_list():
    # void f(void): no op at entry nor at exit, each list from bit 0. Keyed alike, its exit took
    # the entry list's number, which in the exit switch is another list's decoder.
    other = _plan([Op(FROM_STACK, 8, 0, 8)], [Op(FROM_PTR, 0, 8, 16)])
    void = _plan([], [])
    t = plan_table([other, void], WIN)
    entry, exit_ = t.ids(void)
    assert [s.steps for s in t.entry if s.number == entry] == [()]
    assert [s.steps for s in t.exit if s.number == exit_] == [()]


def test_each_kind_sends_what_the_decoder_that_runs_it_writes():
    """PlanTable.sizes (a spec's entry_size and exit_size): the furthest byte its ops write,
    rounded up to 8; the register image's bytes where the image decodes the kind."""
    two = _plan([Op(FROM_CTX, 112, 0, 8), Op(FROM_CTX, 104, 8, 4)], [Op(FROM_CTX, 80, 0, 8)])
    three = _plan([Op(FROM_CTX, 112, 0, 8), Op(FROM_CTX, 104, 8, 8), Op(FROM_CTX, 96, 16, 2)])
    none = _plan([], [])
    stack = _plan([Op(FROM_CTX, 112, 0, 8), Op(FROM_STACK, 8, 8, 20)])
    # A string capture: its head (16 bytes) at 8, then up to 66 bytes.
    caps = _plan([Op(FROM_CTX, 112, 0, 8), Op(CAP_ROOT, 0, 8, 0), Op(CAP_STR, 0, 24, 66)])
    carry = GenericPlan((Op(FROM_CTX, 112, 0, 8),), (), (), (), (), carry=0)
    t = plan_table([two, three, none, stack, caps, carry], WIN)
    assert t.image_size(0) == 24 and t.image_size(1) == 8
    assert two.sizes == (16, 8) and t.sizes(two) == (24, 8)  # the image writes three words
    assert t.sizes(three) == (24, 8)  # an empty exit list is the image's too
    assert none.sizes == (0, 0) and t.sizes(none) == (24, 8)
    assert t.ids(stack)[0] != 1 and t.sizes(stack) == (32, 8)  # its own: bytes 8 to 28
    assert t.sizes(caps) == (96, 8)  # 24 + 66 = 90, to 96
    # The exit of a function carrying a pointer holds it at offset 0: 8 bytes, however many
    # the pointer has, with no op of its own.
    assert carry.sizes == (8, 8)
