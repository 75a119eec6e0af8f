"""A small set of x86_64 functions covering every kind of value the generators handle, with the
locations the x86_64 kernel ABI gives them (hand-placed; see NOTES-ABI), and argument values to
run them with."""

from __future__ import annotations

from handmade import Table, arch_layout, func, reg, stack, value


def build():
    t = Table(8)
    i8 = t.int_("signed char", 1)
    u8 = t.int_("unsigned char", 1, signed=False)
    i16 = t.int_("short", 2)
    i32 = t.int_("int", 4)
    u32 = t.int_("unsigned int", 4, signed=False)
    i64 = t.int_("long", 8)
    u64 = t.int_("long long unsigned int", 8, signed=False)
    b = t.int_("_Bool", 1, signed=False, bool_=True)
    char = t.int_("char", 1, signed=False)
    void_p = t.ptr(0)
    cchar_p = t.ptr(t.const(char))
    u32_t = t.typedef("u32", u32)
    color = t.enum("color", 4, (("RED", 0), ("GREEN", 1), ("BLUE", 7)))
    pair = t.struct("pair", 16, (("x", i64, 0), ("y", i32, 64), ("tag", t.array(char, 4), 96)))
    flags = t.struct("flags", 4, (("a", u32, 0, 3), ("b", i32, 3, 5), ("c", u32, 8, 1),
                                  ("mode", color, 9, 4), ("rest", u8, 16)))
    big = t.struct("big", 40, (("v", t.array(u64, 4), 0), ("n", i32, 256), ("s", i16, 288)))
    big_p = t.ptr(big)
    inner = t.struct("", 8, (("lo", u32, 0), ("hi", u32, 32)))
    word = t.struct("word", 8, (("", inner, 0),), union=True)
    dbl = t.float_("double", 8)
    fn_t = t.ptr(t.fwd("opaque"))
    small = t.struct("small", 12, (("a", i32, 0), ("b", i32, 32), ("c", i8, 64)))

    def v(name, tid, pieces, **kw):
        return value(t, name, tid, pieces, **kw)

    R = reg
    fs = [
        func("scalars", 101, [
            v("a", i32, [R("di", "rdi", 0, 4)]),
            v("b", u8, [R("si", "rsi", 0, 1)]),
            v("c", b, [R("dx", "rdx", 0, 1)]),
            v("d", void_p, [R("cx", "rcx", 0, 8)]),
            v("e", i64, [R("r8", "r8", 0, 8)]),
            v("f", i16, [R("r9", "r9", 0, 2)]),
            v("g", i64, [stack(8, 0, 8)]),
            v("h", u32_t, [stack(16, 0, 4)]),
        ], v("", i64, [R("ax", "rax", 0, 8)], at_exit=True)),
        func("regs_only", 102, [
            v("x", u64, [R("di", "rdi", 0, 8)]),
            v("y", i32, [R("si", "rsi", 0, 4)]),
            v("p", cchar_p, [R("dx", "rdx", 0, 8)]),
            v("ok", b, [R("cx", "rcx", 0, 1)]),
        ], v("", i32, [R("ax", "rax", 0, 4)], at_exit=True)),
        func("aggregates", 103, [
            v("p", pair, [R("di", "rdi", 0, 8), R("si", "rsi", 8, 8)]),
            v("fl", flags, [R("dx", "rdx", 0, 4)]),
            v("w", word, [R("cx", "rcx", 0, 8)]),
            v("c", color, [R("r8", "r8", 0, 4)]),
            v("bp", big_p, [R("r9", "r9", 0, 8)]),
            v("onstack", pair, [stack(8, 0, 8), stack(16, 8, 8)]),
        ], v("", small, [R("ax", "rax", 0, 8), R("dx", "rdx", 8, 4)], at_exit=True)),
        func("by_ref", 104, [
            v("big", big, [R("di", "rdi", 0, 8)], by_ref=True),
            v("d", dbl, [], unavailable="float in an FP register"),
            v("n", i32, [R("si", "rsi", 0, 4)]),
        ], v("", big, [R("ax", "rax", 0, 8)], by_ref=True, at_exit=True)),
        func("sret_saved", 105, [
            v("n", i32, [R("si", "rsi", 0, 4)]),
        ], v("", big, [R("di", "rdi", 0, 8)], by_ref=True, at_exit=False)),
        func("dup", 106, [v("a", i32, [R("di", "rdi", 0, 4)])]),
        func("dup", 107, [v("fp", fn_t, [R("di", "rdi", 0, 8)])], None, True),
    ]
    return t, arch_layout(fs)
