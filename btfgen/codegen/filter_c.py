"""Checked filters as BPF C: one predicate per function over the per-function decoder's
structs (`struct btfgen_args_F` at entry, `struct btfgen_ret_F` at exit).

Every value is read lazily, where the expression needs it (so `p == 0 || p->x > 3` never reads
through a NULL `p`): a C statement expression per path, its hops read with the probe-read
helper its memory needs. A read that faults (a NULL or bad pointer on the way) sets `bad`, and
a predicate that needed such a value is false. Strings are read with the bounded `_str`
helpers into a buffer one or two bytes longer than the literal, then compared byte by byte
(the literal is known here, so the comparison is unrolled: no loop for the verifier to walk).

The filters come checked from the front end (btfgen/typed/filter.py: syntax, types, which
functions a FUNC glob means); everything here is their C: `header` writes btfgen_filter.h
(`btfgen --filter`), and filter_trace.py the trace's switch over the same predicates.
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.codegen import bpf
from btfgen.codegen.names import c_comment
from btfgen.typed import filter_check as C

HEADER = "btfgen_filter.h"  # what `btfgen --filter` writes beside btfgen.bpf.h
TRACE_HEADER = "trace_filter.h"  # what `btfgen trace --filter` compiles into trace.bpf.o

# Read helpers by where the memory is (typed/path.Read.user): user programs read everything
# from user memory (a sleepable one through the decoders' btfgen_user_read, which faults a page
# in); for the kernel, an untagged pointer is tried as kernel memory, then user.
PRELUDE = """\
#ifndef BTFGEN_FILTER_READS
#define BTFGEN_FILTER_READS
#ifdef BTFGEN_SLEEPABLE
#define BTFGEN_F_READ_K(d, n, s) btfgen_user_read((d), (n), (const void *)(unsigned long)(s), 0)
#define BTFGEN_F_READ_U BTFGEN_F_READ_K
#define BTFGEN_F_READ_A BTFGEN_F_READ_K
#define BTFGEN_F_STR_K(d, n, s) btfgen_user_read((d), (n), (const void *)(unsigned long)(s), 1)
#define BTFGEN_F_STR_U BTFGEN_F_STR_K
#define BTFGEN_F_STR_A BTFGEN_F_STR_K
#elif defined(BTFGEN_USER)
#define BTFGEN_F_READ_K(d, n, s) bpf_probe_read_user((d), (n), (const void *)(unsigned long)(s))
#define BTFGEN_F_READ_U BTFGEN_F_READ_K
#define BTFGEN_F_READ_A BTFGEN_F_READ_K
#define BTFGEN_F_STR_K(d, n, s) bpf_probe_read_user_str((d), (n), (const void *)(unsigned long)(s))
#define BTFGEN_F_STR_U BTFGEN_F_STR_K
#define BTFGEN_F_STR_A BTFGEN_F_STR_K
#else
#define BTFGEN_F_READ_K(d, n, s) bpf_probe_read_kernel((d), (n), (const void *)(unsigned long)(s))
#define BTFGEN_F_READ_U(d, n, s) bpf_probe_read_user((d), (n), (const void *)(unsigned long)(s))
#define BTFGEN_F_READ_A(d, n, s) (BTFGEN_F_READ_K(d, n, s) && BTFGEN_F_READ_U(d, n, s))
#define BTFGEN_F_STR_K(d, n, s) bpf_probe_read_kernel_str((d), (n), (const void *)(unsigned long)(s))
#define BTFGEN_F_STR_U(d, n, s) bpf_probe_read_user_str((d), (n), (const void *)(unsigned long)(s))
#define BTFGEN_F_STR_A(d, n, s) \\
	({ long __btfgen_n = BTFGEN_F_STR_K(d, n, s); \\
	   __btfgen_n < 0 ? BTFGEN_F_STR_U(d, n, s) : __btfgen_n; })
#endif
#endif
"""


@dataclass(frozen=True, slots=True)
class Where:
    """How the emitted code reaches a function's values: the args struct member of each
    parameter (None: the placement could not read it), the pointer width and byte order."""

    fields: tuple[str | None, ...]
    ptr_type: str  # __u32 or __u64
    pointer_size: int
    big_endian: bool


def _helper(user: bool | None, string: bool = False) -> str:
    kind = "K" if user is False else "U" if user else "A"
    return f"BTFGEN_F_{'STR' if string else 'READ'}_{kind}"


class _Emit:
    def __init__(self, where: Where):
        self.where = where
        self.n = 0

    def fresh(self) -> str:
        self.n += 1
        return f"v{self.n}"

    # conditions -> C int expressions
    def cond(self, c: C.Cond) -> str:
        if isinstance(c, C.Both):
            return f"({self.cond(c.left)} && {self.cond(c.right)})"
        if isinstance(c, C.Either):
            return f"({self.cond(c.left)} || {self.cond(c.right)})"
        if isinstance(c, C.Neg):
            return f"!{self.cond(c.operand)}"
        if isinstance(c, C.Truth):
            return f"({self.value(c.value, False)} != 0)"
        if isinstance(c, C.Cmp):
            return (f"({self.value(c.left, c.signed)} {c.op} "
                    f"{self.value(c.right, c.signed)})")
        return self.string(c)

    # values -> C expressions of type __s64 / __u64
    def value(self, v: C.Value, signed: bool) -> str:
        cast = "__s64" if signed else "__u64"
        if isinstance(v, C.Const):
            if signed:
                return f"((__s64){v.value}LL)" if v.value >= 0 else \
                    f"((__s64)({v.value + 1}LL - 1))"
            return f"((__u64){v.value & ((1 << 64) - 1):#x}ULL)"
        if isinstance(v, C.Masked):
            return (f"(({cast})({self.value(v.left, False)} & "
                    f"{self.value(v.right, False)}))")
        return f"(({cast}){self.load(v)})"

    def _start(self, path) -> tuple[list[str], str]:
        """Statements that leave the address of the path's final bytes in `p`, or of its
        value in the struct when no pointer is followed; `p`'s name."""
        w = self.where
        root = "r->value" if path.param is None else f"a->{self._field(path)}"
        base = f"(const char *)&{root} + {path.within}"
        if not path.reads:
            return [], base
        p = self.fresh()
        lines = [f"{w.ptr_type} {p} = 0;", f"__builtin_memcpy(&{p}, {base}, {w.pointer_size});"]
        for read in path.reads[:-1]:
            lines.append(f"if ({_helper(read.user)}(&{p}, {w.pointer_size}, "
                         f"{p} + {read.offset})) {{ bad = 1; {p} = 0; }}")
        return lines, f"{p} + {path.reads[-1].offset}"

    def _field(self, path) -> str:
        field = self.where.fields[path.param]
        assert field is not None, "checked: unavailable parameters are refused"
        return field

    def load(self, v: C.Load) -> str:
        """A statement expression giving the value, its type's width and signedness."""
        path = v.path
        lines, addr = self._start(path)
        out = self.fresh()
        size = path.size
        if path.bit_size:
            ctype = "__u64"
        elif v.pointer:
            ctype = self.where.ptr_type
        else:
            ctype = f"__{'s' if v.signed else 'u'}{size * 8}"
        lines.append(f"{ctype} {out} = 0;")
        if path.reads:
            last = path.reads[-1]
            # A read after a failed hop reads from a small address: it faults, as it should.
            lines.append(f"if ({_helper(last.user)}(&{out}, {size}, {addr})) bad = 1;")
        else:
            lines.append(f"__builtin_memcpy(&{out}, {addr}, {size});")
        if path.bit_size:
            lines.append(self._bits(out, path, v.signed))
        return "({ " + " ".join(lines) + f" {out}; }})"

    def _bits(self, raw: str, path, signed: bool) -> str:
        # The bytes were copied to the start of a 64-bit word: on a little-endian target they
        # are its low bytes and bit 0 is the first; big-endian: its high bytes, first bit on top.
        bits = path.bit_size
        if self.where.big_endian:
            up = path.bit_offset
        else:
            up = 64 - path.bit_offset - bits
        shift = "(__u64)((__s64)" if signed else "("
        return f"{raw} = {shift}({raw} << {up}) >> {64 - bits});"

    def string(self, t: C.StrTest) -> str:
        lines, addr = self._start(t.path)
        n = len(t.literal)
        buf = self.fresh()
        got = self.fresh()
        if t.array:
            # The array's bytes are here: exactly the ones the test needs.
            size = min(n + 1, t.array)
            lines += [f"char {buf}[{max(size, 1)}] = {{}};",
                      f"if ({_helper(t.user)}({buf}, {size}, {addr})) bad = 1;"]
            match = [f"{buf}[{i}] == {_char(b)}" for i, b in enumerate(t.literal)]
            if not t.prefix and n < t.array:
                match.append(f"{buf}[{n}] == 0")
        elif t.raw:
            # A buffer's first bytes, as many as the literal's: equal, byte for byte.
            sp = self.fresh()
            if t.path.reads:
                lines += [f"{self.where.ptr_type} {sp} = 0;",
                          f"if ({_helper(t.path.reads[-1].user)}(&{sp}, "
                          f"{self.where.pointer_size}, {addr})) bad = 1;"]
            else:
                lines += [f"{self.where.ptr_type} {sp} = 0;",
                          f"__builtin_memcpy(&{sp}, {addr}, {self.where.pointer_size});"]
            lines += [f"char {buf}[{max(n, 1)}] = {{}};",
                      f"if ({n} && {_helper(t.user)}({buf}, {max(n, 1)}, {sp})) bad = 1;"]
            match = [f"{buf}[{i}] == {_char(b)}" for i, b in enumerate(t.literal)]
        else:
            # `p` is where the char * is: read it, then the string; one byte more than the
            # literal tells equal from longer, the literal's length + 1 says "at least as long".
            size = n + 1 if t.prefix else n + 2
            sp = self.fresh()
            if t.path.reads:
                lines += [f"{self.where.ptr_type} {sp} = 0;",
                          f"if ({_helper(t.path.reads[-1].user)}(&{sp}, "
                          f"{self.where.pointer_size}, {addr})) bad = 1;"]
            else:
                lines += [f"{self.where.ptr_type} {sp} = 0;",
                          f"__builtin_memcpy(&{sp}, {addr}, {self.where.pointer_size});"]
            lines += [f"char {buf}[{size}] = {{}};",
                      f"long {got} = {_helper(t.user, string=True)}({buf}, {size}, {sp});",
                      f"if ({got} < 0) bad = 1;"]
            match = [f"{got} == {n + 1}"] + [f"{buf}[{i}] == {_char(b)}"
                                             for i, b in enumerate(t.literal)]
        return "({ " + " ".join(lines) + f" ({' && '.join(match) or '1'}); }})"


def _char(b: int) -> str:
    return f"(char){b:#04x}"


@dataclass(frozen=True, slots=True)
class Predicates:
    """One function's predicates as C: each a function of its decoded struct."""

    entry: str
    exit: str | None  # None: the function returns nothing


def predicates(checked: C.Checked, cname: str, where: Where, has_ret: bool) -> Predicates:
    """`btfgen_filter_F(const struct btfgen_args_F *a)` (1: the entry passes) and, for a
    function that returns a value, `btfgen_filter_exit_F(const struct btfgen_ret_F *r)` (1: the
    exit passes; it does not know whether the entry did)."""
    comment = c_comment(checked.text)
    entry = _function(f"btfgen_filter_{cname}", f"const struct btfgen_args_{cname} *a",
                      checked.entry, where, f"at entry: {comment}")
    exit_ = None
    if has_ret:
        exit_ = _function(f"btfgen_filter_exit_{cname}", f"const struct btfgen_ret_{cname} *r",
                          checked.exit, where, f"at exit: {comment}")
    return Predicates(entry, exit_)


def _function(name: str, param: str, cond: C.Cond | None, where: Where, comment: str) -> str:
    head = f"/* {comment} */\nstatic __always_inline int {name}({param})\n{{\n"
    if cond is None:
        return head + "\treturn 1; /* no condition at this point */\n}\n"
    expr = _Emit(where).cond(cond)
    return head + f"\tint bad = 0;\n\tint ok = {expr};\n\n\treturn ok && !bad;\n}}\n"


def function_predicates(bound, layout, table, *, self_contained: bool
                        ) -> list[tuple[object, str, Predicates]]:
    """Each bound filter (btfgen.typed.filter.Bound) with the function's C name (the decoders'
    own) and its C predicates."""
    cnames = bpf.function_names(layout.functions)
    ctypes = bpf.c_types(layout, table, self_contained)
    big = layout.byte_order == "big"
    where_common = dict(ptr_type=bpf.reg_type(layout.pointer_size),
                        pointer_size=layout.pointer_size, big_endian=big)
    out = []
    for b in bound:
        fl = layout.functions[b.index]
        view = bpf.function_view(fl, ctypes, big)
        where = Where(tuple(a.field if a.decl else None for a in view.args), **where_common)
        cname = cnames[b.index]
        out.append((b, cname, predicates(b.checked, cname, where, fl.ret is not None)))
    return out


def filtered_names(bound, layout) -> list[str]:
    """The C names of the functions the bound filters decode with their own decoders."""
    if not bound:
        return []
    cnames = bpf.function_names(layout.functions)
    return sorted({cnames[b.index] for b in bound})


def header(bound, layout, table, *, self_contained: bool, decoders: str) -> str:
    """btfgen_filter.h: the predicates over the decoders' structs (`decoders` is the header
    that defines them, included first)."""
    parts = [f"/* Generated by btfgen: the --filter predicates for {layout.arch}. DO NOT EDIT.\n"
             " *\n"
             " * Per filtered function NAME:\n"
             " *   btfgen_filter_NAME(a)       1 when the arguments decoded at entry\n"
             " *                               (btfgen_entry_NAME) pass the filter;\n"
             " *   btfgen_filter_exit_NAME(r)  1 when the return value decoded at exit\n"
             " *                               (btfgen_exit_NAME) passes it.\n"
             " * A filter's conditions on $retval are the exit's, the others the entry's; an\n"
             " * exit whose entry was rejected is the caller's to drop (it saved the entry).\n"
             " * A value behind a NULL or faulting pointer, when the condition needed it, makes\n"
             " * the predicate false. */\n",
             "#ifndef BTFGEN_FILTER_H\n#define BTFGEN_FILTER_H\n",
             f'#include "{decoders}"\n\n', PRELUDE]
    for _, _, preds in function_predicates(bound, layout, table, self_contained=self_contained):
        parts.append("\n" + preds.entry)
        if preds.exit:
            parts.append("\n" + preds.exit)
    parts.append("#endif /* BTFGEN_FILTER_H */\n")
    return "".join(parts)
