"""Captures in the generated BPF header (struct btfgen_captures_F, btfgen_capture_F): member
names made unique C identifiers from the paths, names from a hostile BTF kept out of the code,
bit-fields extracted for each byte order, and a header with captures and filters compiling with
-Wall -Werror for every arch (kernel and BTFGEN_USER builds). Without --capture the header is
the golden one (test_golden.py)."""

from __future__ import annotations

import re
import subprocess

import golden
import pytest
from handmade import Table, arch_layout, func, reg, value
from toolchains import ARCHES, TOOLCHAINS

from btfgen.abi.arches import load_arch
from btfgen.btf import types as T
from btfgen.codegen import bpf_captures, filter_c
from btfgen.codegen.outputs import file_name, generate
from btfgen.typed import capture
from btfgen.typed import filter as typed_filter

CAPTURES = ["tiny: *n, n->name, n->next->next->u.i, n->next->name",
            # buffers: a length from an argument, a constant, and one read at exit (which
            # the header's exit function cannot: said in its struct, by btfgen trace read)
            "scalars: d[g], d[8], d[retval]"]
FILTERS = ['tiny: n->next->name == "tail" && c > 0', 'with_enum: prefix(s, "/etc/")']
# Where kernel and user addresses overlap (s390x), a kernel probe's paths name their memory.
NAMED = ['tiny: n->next->name:kernel == "tail" && c > 0', 'with_enum: prefix(s:user, "/etc/")']

PROGRAM = """%(user)s
#include "btfgen_filter.h"
char LICENSE[] SEC("license") = "GPL";
struct btfgen_captures_tiny caps_tiny;
struct btfgen_captures_with_enum caps_enum;
struct btfgen_captures_scalars caps_scalars;
SEC("kprobe") int run_scalars(void *ctx)
{
	struct btfgen_args_scalars a;

	if (btfgen_entry_scalars(ctx, &a))
		return 0;
	return btfgen_capture_scalars(&a, &caps_scalars);
}
SEC("kprobe") int run_tiny(void *ctx)
{
	struct btfgen_args_tiny a;

	if (btfgen_entry_tiny(ctx, &a) || !btfgen_filter_tiny(&a))
		return 0;
	return btfgen_capture_tiny(&a, &caps_tiny);
}
SEC("kprobe") int run_enum(void *ctx)
{
	struct btfgen_args_with_enum a;

	if (btfgen_entry_with_enum(ctx, &a) || !btfgen_filter_with_enum(&a))
		return 0;
	return btfgen_capture_with_enum(&a, &caps_enum);
}
"""


def _clang(arch: str, src, out, *flags) -> subprocess.CompletedProcess:
    target = load_arch(arch).target_arch
    return subprocess.run(["clang-19", "-target", "bpfeb" if arch == "s390x" else "bpfel",
                           "-O2", "-g", "-Wall", "-Werror", f"-D__TARGET_ARCH_{target}", *flags,
                           "-c", str(src), "-o", str(out)], capture_output=True, text=True)


@pytest.mark.parametrize("arch", ARCHES)
def test_captures_and_filters_compile(arch, tmp_path):
    if not TOOLCHAINS[arch].available():
        pytest.skip(f"{TOOLCHAINS[arch].compiler} not installed")
    btf, layout = golden.build(arch)
    if len(layout.functions) != len(golden.FUNCTIONS):
        pytest.skip(f"{arch}: pahole's BTF lacks the functions")
    funcs = [btf[f.btf_id] for f in layout.functions]
    caps = capture.for_functions(funcs, [capture.parse(c) for c in CAPTURES], 32, strings=True)
    files = generate(layout, btf, ("bpf",), self_contained=True, captures=caps)
    named = NAMED if layout.address_spaces == "separate" else FILTERS
    bound = typed_filter.bind(typed_filter.parse_options(named), layout, btf)
    files[filter_c.HEADER] = filter_c.header(bound, layout, btf, self_contained=True,
                                             decoders=file_name("header", arch))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    header = files[file_name("header", arch)]
    struct = re.search(r"struct btfgen_captures_tiny \{\n(.*?)\n\};", header, re.S).group(1)
    members = re.findall(r"(\w+)(?:\[\d+\])?; /\*", struct)
    assert members == ["n_pointee", "n__name", "n__next__next__u_i", "n__next__name"]
    assert "char n__name[34];" in struct  # 32 characters kept, one more to tell truncation
    scalars = re.search(r"struct btfgen_captures_scalars \{\n(.*?)\n\};", header, re.S).group(1)
    assert "__u8 d_g[32]; /* d[g]: a buffer of up to 32 bytes, as many as g says" in scalars
    assert "__u8 d_8[8];" in scalars
    assert "d[retval]: unavailable: read at exit through an argument" in header
    assert "__s64 n = (__s64)(a->g);" in header
    for user in ("", "#define BTFGEN_USER"):
        src = tmp_path / "t.bpf.c"
        src.write_text(PROGRAM % {"user": user})
        proc = _clang(arch, src, tmp_path / "t.o")
        assert proc.returncode == 0 and proc.stderr == "", (user, proc.stderr)


def test_member_names():
    name = bpf_captures.member_name
    assert name("file->f_path.dentry->d_name.name") == "file__f_path_dentry__d_name_name"
    assert name("*how") == "how_pointee"
    assert name("*file->f_path.dentry") == "file__f_path_dentry_pointee"
    assert name("argv[1]") == "argv_1"
    assert name("$retval->f_mode") == "retval__f_mode"


# -- a hostile BTF ----------------------------------------------------------------------------

EVIL = 'x */ #include "/etc/passwd" /*'


class _Types(Table):
    __hash__ = object.__hash__  # path.py caches per type table, as for a BTF file's


def _func(t: Table, name: str, params, ret: int = 0) -> int:
    proto = t._add(T.FuncProto, "", ret, tuple(T.Param(n, tid, t) for n, tid in params), False)
    return t._add(T.Func, name, proto, T.Linkage.GLOBAL)


def _hostile():
    """f(struct EVIL *int, char *EVIL2, struct EVIL *p): a struct whose name and members are
    hostile or C keywords, two paths whose names collide once made identifiers (`p->a_b`,
    `p->a.b`), and a `char *` parameter named so no path can name it."""
    t = _Types(8)
    i32 = t.int_("int", 4)
    char = t.int_("char", 1)
    cptr = t.ptr(char)
    inner = t.struct("b */ evil", 4, (("b", i32, 0),))
    s = t.struct(EVIL, 24, (("class", i32, 0), ("a", inner, 32), ("a_b", i32, 64),
                            ("int", cptr, 128)))
    sp = t.ptr(s)
    params = [("int", sp), ("a\n*/b", cptr), ("p", sp)]
    fid = _func(t, "f", params, i32)
    args = [value(t, n, tid, [reg(r, r, 0, 8)]) for (n, tid), r in zip(params, ("di", "si", "dx"))]
    ret = value(t, "", i32, [reg("ax", "rax", 0, 4)])
    return t, t[fid], arch_layout([func("f", fid, args, ret)])


def test_hostile_names_stay_out_of_the_code(tmp_path):
    t, f, layout = _hostile()
    caps = capture.for_functions(
        [f], [capture.parse("f: *int, int->class, int->int, p->a_b, p->a.b")], 16, strings=True)
    # The hostile `char *` parameter cannot be named by a path: no default string for it.
    assert [c.text for c in caps["f"]] == ["*int", "int->class", "int->int", "p->a_b", "p->a.b"]
    header = generate(layout, t, ("bpf",), self_contained=True, captures=caps)["btfgen.bpf.h"]
    struct = re.search(r"struct btfgen_captures_f \{\n(.*?)\n\};", header, re.S).group(1)
    members = re.findall(r"(\w+)(?:\[\d+\])?; /\*", struct)
    assert members == ["int_pointee", "int__class", "int__int", "p__a_b", "p__a_b_2"]
    assert EVIL not in header and "b */ evil" not in header
    src = tmp_path / "t.bpf.c"
    (tmp_path / "btfgen.bpf.h").write_text(header)
    src.write_text('#include "btfgen.bpf.h"\nchar LICENSE[] SEC("license") = "GPL";\n'
                   "struct btfgen_captures_f c;\n"
                   'SEC("kprobe") int run(void *ctx) { struct btfgen_args_f a; '
                   "btfgen_entry_f(ctx, &a); return btfgen_capture_f(&a, &c); }\n")
    proc = _clang("x86_64", src, tmp_path / "t.o")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    # Exactly the functions expected: nothing a name could have added.
    funcs = set(re.findall(r"static __always_inline \w+ (\w+)\(", header))
    assert {n for n in funcs if n.endswith("_f")} == {"btfgen_entry_f", "btfgen_exit_f",
                                                        "btfgen_capture_f"}


def test_more_stars_over_hostile_member_names_leave_them_out_and_say_so(tmp_path):
    """`**p` follows the pointers in *p by their member names: one no path can spell (a broken
    or hostile BTF) is left out, said, and never reaches the code."""
    t = _Types(8)
    i32 = t.int_("int", 4)
    char = t.int_("char", 1)
    cptr = t.ptr(char)
    s = t.struct("node", 16, (("x */ evil", cptr, 0), ("ok", cptr, 64)))
    sp = t.ptr(s)
    fid = _func(t, "g", [("p", sp)], i32)
    args = [value(t, "p", sp, [reg("di", "di", 0, 8)])]
    layout = arch_layout([func("g", fid, args, value(t, "", i32, [reg("ax", "rax", 0, 4)]))])
    notes: list[str] = []
    caps = capture.for_functions([t[fid]], [capture.parse("g: **p")], 16, notes=notes)
    assert [c.text for c in caps["g"]] == ["*p", "p->ok"]
    assert notes == ["g: **p leaves out p->'x */ evil': not a name a path can spell"]
    header = generate(layout, t, ("bpf",), self_contained=True, captures=caps)["btfgen.bpf.h"]
    assert "x */ evil" not in header


def test_more_stars_over_a_struct_nested_in_itself_say_so():
    """Hostile BTF: a struct that holds itself by value. `**p` stops at walk's depth rule and
    says so, instead of recursing until Python gives up."""
    t = _Types(8)
    i32 = t.int_("int", 4)
    loop = len(t)
    assert t.struct("loop", 16, (("again", loop, 0),)) == loop
    holder = t.struct("holder", 16, (("inner", loop, 0),))
    fid = _func(t, "h", [("p", t.ptr(holder))], i32)
    notes: list[str] = []
    caps = capture.for_functions([t[fid]], [capture.parse("h: **p")], 16, notes=notes)
    assert [c.text for c in caps["h"]] == ["*p"]
    assert len(notes) == 1 and notes[0].startswith("h: **p leaves out *p: type ")
    assert "nested deeper than" in notes[0]


# -- bit-fields --------------------------------------------------------------------------------

def _bitfield_views(big: bool):
    t = _Types(8)
    i32 = t.int_("int", 4)
    u32 = t.int_("unsigned int", 4, signed=False)
    s = t.struct("s", 8, (("lo", u32, 3, 3), ("mid", i32, 6, 9), ("x", i32, 32)))
    sp = t.ptr(s)
    fid = _func(t, "g", [("p", sp)])
    caps = capture.for_functions([t[fid]], [capture.parse("g: p->lo, p->mid")])["g"]
    from btfgen.codegen.bpf import c_types

    layout = arch_layout([], byte_order="big" if big else "little")
    views, _ = bpf_captures.capture_views(caps, ("p",), None, {}, c_types(layout, t, True), big)
    return views


@pytest.mark.parametrize("big", [False, True], ids=["little", "big"])
def test_bitfields_are_extracted_for_the_byte_order(big):
    lo, mid = _bitfield_views(big)
    assert (lo.kind, lo.signed, mid.kind, mid.signed) == ("bits", False, "bits", True)
    # lo: bits 3..5 of the first byte; mid: bits 6..14, its bytes 0..1 (BTF bit numbering).
    for v, first, bits, value in ((lo, 3, 3, 5), (mid, 6, 9, -7)):
        raw = (value & ((1 << bits) - 1)) << first
        nbytes = v.size
        if big:  # the BTF's bit offsets count from the most significant bit of the bytes
            raw = (value & ((1 << bits) - 1)) << (nbytes * 8 - first - bits)
            word = int.from_bytes(raw.to_bytes(nbytes, "big") + bytes(8 - nbytes), "big")
        else:
            word = int.from_bytes(raw.to_bytes(nbytes, "little") + bytes(8 - nbytes), "little")
        got = ((word << v.shift_up) & (2**64 - 1)) >> v.shift_down
        if v.signed and got >> (bits - 1):
            got -= 1 << bits
        assert got == value, (v.field, big)
