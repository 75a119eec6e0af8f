"""The fetcher comparison's own logic (fetcher.py) on made-up events: no guest."""

from __future__ import annotations

from btfgen.btf import types as T
from btfgen.btf.made import MadeTypes
from btfgen.layout import FunctionLayout, ProtoLayout, RegPiece, StackPiece, ValueLayout

from . import fetcher

LINE = ("         python3-102     [000] ...1.     3.452656: c7: (ksys_read+0x7b/0x110 <- vfs_read) "
        "file=0xff3a2751c22d5cc0 buf=0xb9b0530 count=4096 pos=0xff58166b805e3d30 retval_=1300")


def test_a_return_event_is_parsed_with_its_arguments():
    (e,) = fetcher.parse_trace("# tracer: nop\n" + LINE + "\n")
    assert (e.tid, e.index, e.ns) == (102, 7, 3_452_656_000)
    assert list(e.fields) == ["file", "buf", "count", "pos", "retval_"]
    assert e.fields["count"] == "4096"


def _event(kind, ns, fn="f", tid=5, **values):
    return {"kind": kind, "timestamp": ns, "function": fn, "tid": tid, **values}


def test_calls_carry_the_arguments_of_their_own_entry():
    events = [_event("entry", 10, args={"x": 1}), _event("entry", 20, args={"x": 2}),
              _event("exit", 30, **{"return": 2}), _event("exit", 40, **{"return": 1}),
              _event("exit", 50, fn="g", **{"return": 0})]
    got = [(c.args, c.ret) for c in fetcher.calls(events)]
    assert got == [({"x": 2}, 2), ({"x": 1}, 1), (None, 0)]


def _kernel(us, index=0, tid=5):
    return fetcher.KernelEvent(tid, index, us * 1000, {})


def _call(ns, fn="f", tid=5):
    return fetcher.Call(fn, tid, ns, {}, 0)


def test_a_return_only_one_side_saw_does_not_shift_the_others():
    names = ["f", "g", "h"]
    # The kernel saw f g h f h, btfgen f h f g h: the kernel's g is one btfgen missed, btfgen's g
    # one the kernel missed (30 ms apart: not one call), and an interrupt put a millisecond
    # between the two sides' returns of the last call.
    kernel = [_kernel(100, 0), _kernel(200, 1), _kernel(300, 2), _kernel(400, 0),
              _kernel(41_000, 2)]
    ours = [_call(100_300, "f"), _call(300_300, "h"), _call(400_300, "f"),
            _call(30_000_000, "g"), _call(40_000_000, "h")]
    pairs, lone_kernel, lone_ours, before = fetcher.pair(kernel, ours, names)
    assert [(k.ns, c.ns) for k, c in pairs] == [(100_000, 100_300), (300_000, 300_300),
                                               (400_000, 400_300), (41_000_000, 40_000_000)]
    assert [k.ns for k in lone_kernel] == [200_000]
    assert [c.ns for c in lone_ours] == [30_000_000]
    assert before == []


def test_returns_an_interrupt_put_in_another_order_are_paired():
    # btfgen returned from f before an interrupt whose g both saw; the kernel after it.
    kernel = [_kernel(100, 1), _kernel(200, 0)]
    ours = [_call(90_000, "f"), _call(120_000, "g")]
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel, ours, ["f", "g"])
    assert sorted((k.ns, c.ns) for k, c in pairs) == [(100_000, 120_000), (200_000, 90_000)]
    assert lone_kernel == lone_ours == []


def test_what_btfgen_saw_before_the_kernel_filtered_its_thread_in_is_set_apart():
    pairs, lone_kernel, lone_ours, before = fetcher.pair(
        [_kernel(100, tid=6), _kernel(5000, 1)], [_call(100_000, tid=7), _call(2_000_000, "g"),
                                                  _call(5_000_100, "g")], ["f", "g"])
    assert [(k.tid, c.ns) for k, c in pairs] == [(5, 5_000_100)]
    assert [k.tid for k in lone_kernel] == [6]
    assert [c.tid for c in lone_ours] == [7]
    assert [c.ns for c in before] == [2_000_000]


class _Types(MadeTypes):
    def add(self, cls, *args):
        i = len(self)
        self[i] = cls(i, args[0], self, *args[1:])
        return self[i]


def _reg(hwreg, size=8, value_offset=0):
    return RegPiece(hwreg, hwreg, 0, 8, value_offset, size)


def _layout():
    """long f(struct pair16 p, long a, int b, long c, long d, long e, long on_stack)"""
    types = _Types()
    long_ = types.add(T.Int, "long", 8, T.INT_SIGNED, 0, 64)
    int_ = types.add(T.Int, "int", 4, T.INT_SIGNED, 0, 32)
    pair16 = types.add(T.Struct, "pair16", 16, (T.Member("lo", long_.id, 0, 0, types),
                                                T.Member("hi", long_.id, 64, 0, types)), False)
    args = (ValueLayout("p", pair16, "struct pair16", 16, (_reg("rdi"), _reg("rsi", 8, 8))),
            ValueLayout("a", long_, "long", 8, (_reg("rdx"),), signed=True),
            ValueLayout("b", int_, "int", 4, (_reg("rcx", 4),), signed=True),
            ValueLayout("on_stack", long_, "long", 8, (StackPiece(8, 0, 8),), signed=True))
    ret = ValueLayout("", long_, "long", 8, (_reg("rax"),), signed=True)
    return FunctionLayout("f", 1, ProtoLayout(args, ret, False))


def test_where_the_kernel_is_right_a_disagreement_fails_elsewhere_it_is_counted():
    fn = _layout()
    kinds = [fetcher.kind_of(a, i, "x86_64") for i, a in enumerate(fn.args)]
    assert kinds == [fetcher.STRUCT, fetcher.SHIFTED, fetcher.SHIFTED, fetcher.STACK]
    assert fetcher.kind_of(fn.ret, None, "x86_64") == fetcher.RIGHT
    assert fetcher.kind_of(fn.args[0], None, "x86_64") == fetcher.STRUCT_RETURN

    def compared(ret_printed: str):
        k = fetcher.KernelEvent(5, 0, 0, {"p": "0x1", "a": "0x2", "b": "-1", "on_stack": "9",
                                          "retval_": ret_printed})
        call = fetcher.Call("f", 5, 0, {"p": {"lo": 1, "hi": 2}, "a": 3, "b": 4, "on_stack": 9},
                            -1)
        return fetcher.compare([(k, call)], {"f": fn}, "x86_64")

    right = compared("-1")
    assert not right.failures and right.kinds[fetcher.RIGHT].agree == 1
    assert right.kinds[fetcher.SHIFTED].disagree == 2 and right.kinds[fetcher.STACK].agree == 1
    assert right.kinds[fetcher.STRUCT].example["kernel"] == "0x1"
    # The same bits, printed unsigned: agree; another value: a failure naming both.
    assert not compared(str((1 << 64) - 1)).failures
    assert compared("7").failures == ["f return (long): kernel '7', btfgen -1"]


def test_the_tracers_own_functions_are_not_chosen():
    class F:
        def __init__(self, name):
            self.name = name

    funcs = [F(n) for n in ("vfs_read", "bpf_ringbuf_reserve", "__x64_sys_openat",
                            "__x64_sys_reboot", "copy_from_kernel_nofault", "tcp_sendmsg")]
    assert fetcher.select(funcs, "x86_64") == ["__x64_sys_openat", "tcp_sendmsg", "vfs_read"]


def test_a_burst_one_side_missed_does_not_shift_the_calls_after_it():
    # unstable-amd64: btfgen missed 41 calls in 7 ms (said: "missed"), a run of handle_mm_fault
    # returns; the name walk paired each of the kernel's with btfgen's of the next call.
    kernel = [_kernel(100), _kernel(200), _kernel(300), _kernel(400), _kernel(7_000),
              _kernel(7_100)]
    ours = [_call(100_300), _call(7_000_300), _call(7_100_300)]
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel, ours, ["f"])
    assert [(k.ns, c.ns) for k, c in pairs] == [(100_000, 100_300), (7_000_000, 7_000_300),
                                               (7_100_000, 7_100_300)]
    assert [k.ns for k in lone_kernel] == [200_000, 300_000, 400_000] and lone_ours == []
    # and the other way round: the kernel missed them
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(
        [_kernel(100), _kernel(7_000)], [_call(100_300), _call(200_000), _call(7_000_300)],
        ["f"])
    assert [(k.ns, c.ns) for k, c in pairs] == [(100_000, 100_300), (7_000_000, 7_000_300)]
    assert [c.ns for c in lone_ours] == [200_000] and lone_kernel == []


def test_a_call_one_side_missed_in_a_run_of_one_function_does_not_shift_the_run():
    # A fresh machine's unstable-amd64 run: the kernel saw four fput returns, btfgen the last
    # three; paired in order, each of btfgen's went with the kernel's call before it.
    kernel = [_kernel(100), _kernel(200), _kernel(300), _kernel(400), _kernel(500, 1)]
    ours = [_call(200_300), _call(300_300), _call(400_300), _call(500_300, "g")]
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel, ours, ["f", "g"])
    assert [(k.ns, c.ns) for k, c in pairs] == [(200_000, 200_300), (300_000, 300_300),
                                               (400_000, 400_300), (500_000, 500_300)]
    assert [k.ns for k in lone_kernel] == [100_000] and lone_ours == []
    # btfgen's extra return in the middle of a run
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(
        [_kernel(100), _kernel(300), _kernel(400)],
        [_call(100_300), _call(200_000), _call(300_300), _call(400_300)], ["f"])
    assert [(k.ns, c.ns) for k, c in pairs] == [(100_000, 100_300), (300_000, 300_300),
                                               (400_000, 400_300)]
    assert [c.ns for c in lone_ours] == [200_000] and lone_kernel == []


def test_where_one_side_lacks_a_call_only_pairs_each_others_nearest_are_kept():
    # f returns every 40 us; ours lacks the one at 80 and runs 15 us behind: which of ours is
    # the lacking one is a guess, and the pairs whose returns are not clearly each other's
    # nearest are set aside, never compared.
    kernel = [_kernel(us) for us in (0, 40, 80, 120, 160)]
    ours = [_call((us + 15) * 1000) for us in (0, 40, 120, 160)]
    lacking = set()
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel, ours, ["f"], lacking=lacking)
    kept, aside = fetcher.undecided(pairs, lone_kernel, lone_ours, ["f"], lacking)
    assert len(kept) + len(aside) == len(pairs)
    # 15 us from its own, 25 us from the next: not twice as near
    assert kept == [] and len(aside) == 4
    # 2 us behind: each pair's returns twice as near as any other, kept
    ours = [_call((us + 2) * 1000) for us in (0, 40, 120, 160)]
    lacking = set()
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel, ours, ["f"], lacking=lacking)
    kept, aside = fetcher.undecided(pairs, lone_kernel, lone_ours, ["f"], lacking)
    assert [(k.ns, c.ns) for k, c in kept] == [(us * 1000, (us + 2) * 1000)
                                               for us in (0, 40, 120, 160)]
    assert aside == [] and [k.ns for k in lone_kernel] == [80_000]


def test_where_neither_side_lacks_a_call_every_pair_is_kept():
    # the same 15 us behind, but no call lacking: the sequences pair in order
    kernel = [_kernel(us) for us in (0, 40, 80)] + [_kernel(0, index=1)]
    ours = [_call((us + 15) * 1000) for us in (0, 40, 80)]
    lacking = set()
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel, ours, ["f", "g"], lacking=lacking)
    kept, aside = fetcher.undecided(pairs, lone_kernel, lone_ours, ["f", "g"], lacking)
    assert len(kept) == 3 and aside == [] and len(lone_kernel) == 1  # g lacking is not f's


def test_a_pair_made_of_reordered_returns_is_examined_too():
    # f's return at 40 is lacking on our side and the one at 200 on the kernel's: the nearest
    # pairing of what the walk left pairs them (160 us apart, reordered by an interrupt as far
    # as it knows), its thread and function still ones a side lacked a call of
    kernel = [_kernel(us) for us in (0, 40, 80)] + [_kernel(100, index=1)]
    ours = [_call(us * 1000) for us in (0, 80)] + [_call(100_000, fn="g"), _call(200_000)]
    lacking = set()
    pairs, lone_kernel, lone_ours, _ = fetcher.pair(kernel, ours, ["f", "g"], lacking=lacking)
    kept, aside = fetcher.undecided(pairs, lone_kernel, lone_ours, ["f", "g"], lacking)
    assert (5, "f") in lacking
    assert [(k.ns, c.ns) for k, c in aside] == [(40_000, 200_000)]
    assert [(k.ns, c.ns) for k, c in kept] == [(0, 0), (80_000, 80_000), (100_000, 100_000)]
