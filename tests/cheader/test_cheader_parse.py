"""The header front end on its own: errors, determinism, target dependence, the TypeSource API."""

from __future__ import annotations

import pytest

from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.cheader import load_headers
from btfgen.errors import ArchError, HeaderError


def _write(tmp_path, text, name="api.h"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _param_types(table, func_name):
    [func] = table.find_funcs(func_name)
    return [walk.strip(p.type) for p in func.proto.params]


def test_syntax_error_is_one_line_with_place_and_count(tmp_path):
    path = _write(tmp_path, "int ok(int);\nint broken(int x y);\nstruct s { nope t; };\n")
    with pytest.raises(HeaderError) as e:
        load_headers([path], arch="x86_64")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:2:")
    assert msg.endswith("(1 more)")


def test_missing_header_and_unknown_arch(tmp_path):
    with pytest.raises(HeaderError, match="nosuch.h: no such header file"):
        load_headers([str(tmp_path / "nosuch.h")], arch="x86_64")
    path = _write(tmp_path, "int f(int);\n")
    with pytest.raises(ArchError, match="vax"):
        load_headers([path], arch="vax")


def test_unknown_include_is_reported(tmp_path):
    path = _write(tmp_path, '#include "nowhere.h"\nint f(int);\n')
    with pytest.raises(HeaderError, match=r"api\.h:1:10: 'nowhere\.h' file not found"):
        load_headers([path], arch="arm64")


def test_include_dirs_and_defines(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "types.h").write_text("typedef WIDE_T wide_t;\n")
    path = _write(tmp_path, '#include "types.h"\nwide_t widen(wide_t x);\n')
    table = load_headers([path], arch="riscv64", include_dirs=[str(inc)],
                         defines=["WIDE_T=long long"])
    [func] = table.find_funcs("widen")
    assert func.proto.params[0].type.name == "wide_t"
    assert measure.size_of(func.proto.ret) == 8
    # Functions come from the headers given and what they include, not from system headers.
    sys_path = _write(tmp_path, "#include <stddef.h>\n#include <stdint.h>\n"
                      "size_t count(const uint8_t *p, size_t n);\n", "sys.h")
    assert [f.name for f in load_headers([sys_path], arch="x86_64").funcs()] == ["count"]


def test_types_follow_the_target(tmp_path):
    path = _write(tmp_path, "struct s { char c; long long ll; };\n"
                  "long f(long a, void *p, struct s s, char c);\n")
    sizes = {}
    for arch in ("x86_64", "i386", "arm", "riscv32", "s390x"):
        table = load_headers([path], arch=arch)
        a, p, s, c = _param_types(table, "f")
        sizes[arch] = (measure.size_of(a), measure.size_of(p), s.size, s.members[1].offset, c.signed)
    assert sizes == {
        "x86_64": (8, 8, 16, 8, True),
        "i386": (4, 4, 12, 4, True),  # long long aligned to 4 inside structs
        "arm": (4, 4, 16, 8, False),  # EABI: 8; char is unsigned
        "riscv32": (4, 4, 16, 8, False),
        "s390x": (8, 8, 16, 8, False),
    }
    assert load_headers([path], arch="s390x").byte_order == "big"


def test_same_headers_same_ids(tmp_path):
    path = _write(tmp_path, "struct n { struct n *next; int v; };\n"
                  "typedef struct n node_t;\nint walk(node_t *head, int (*visit)(node_t *));\n"
                  "enum e { A = -1 } pick(enum e x, ...);\n")
    one, two = (load_headers([path], arch="arm64") for _ in range(2))
    assert len(one) == len(two)
    assert [repr(t) for t in one] == [repr(t) for t in two]
    # The self-reference resolves through the table without a placeholder.
    [n] = one.find_types("n", "struct")
    assert walk.strip(n.members[0].type.type) is n
    [pick] = one.find_funcs("pick")
    assert pick.proto.variadic and walk.strip(pick.proto.ret).signed


def test_unsupported_type_names_the_function_and_leaves_the_rest(tmp_path):
    path = _write(tmp_path, "typedef int v4si __attribute__((vector_size(16)));\n"
                  "int vec(v4si v);\nint plain(int x);\ndouble _Complex cplx(int x);\n")
    table = load_headers([path], arch="x86_64")
    assert [f.name for f in table.funcs()] == ["plain"]
    with pytest.raises(HeaderError, match=r"api\.h:2:5: vec: type .*vector.* no BTF equivalent"):
        table.find_funcs("vec")
    with pytest.raises(HeaderError, match="cplx: type '_Complex double'"):
        table.find_funcs("cplx")
    assert table.find_funcs("absent") == []
    # Ids stay dense: the rolled-back declarations left no holes.
    assert all(table[i].id == i for i in range(len(table)))


def test_parameter_adjustment_and_anonymous_members(tmp_path):
    path = _write(tmp_path, "typedef int row_t[4];\ntypedef int fn_t(int);\n"
                  "struct o { union { int a; char b; }; struct { int c; } named; int :3; };\n"
                  "void adj(row_t r, int m[][3], fn_t f, const struct o o);\n"
                  "fn_t by_typedef;\n")
    table = load_headers([path], arch="x86_64")
    [adj] = table.find_funcs("adj")
    kinds = [walk.strip(p.type).kind for p in adj.proto.params]
    assert kinds == [T.Kind.PTR, T.Kind.PTR, T.Kind.PTR, T.Kind.STRUCT]
    assert isinstance(adj.proto.params[3].type, T.Const)
    o = walk.strip(adj.proto.params[3].type)
    assert [(m.name, m.bit_offset) for m in o.members] == [("", 0), ("named", 32)]
    [by_typedef] = table.find_funcs("by_typedef")
    assert [p.name for p in by_typedef.proto.params] == [""]


@pytest.mark.parametrize("arch", ["x86_64", "i386", "arm64", "riscv64", "riscv32",
                                  "loongarch64", "s390x", "ppc64le", "arm", "mips64el"])
def test_standard_headers_are_the_targets(arch, tmp_path):
    """Clang's own headers serve every target; a libc's only where it is the target's (the host
    x86_64's /usr/include never stands in for another arch's)."""
    path = _write(tmp_path, "#include <stdint.h>\n#include <stddef.h>\n"
                  "uintptr_t f(uint64_t a, size_t n, ptrdiff_t d, int8_t c);\n")
    table = load_headers([path], arch=arch)
    ptr = table.pointer_size
    assert [measure.size_of(t) for t in _param_types(table, "f")] == [8, ptr, ptr, 1]
    assert measure.size_of(table.find_funcs("f")[0].proto.ret) == ptr
    libc = _write(tmp_path, "#include <sys/types.h>\nint g(off_t o, ssize_t s);\n", "libc.h")
    try:
        table = load_headers([libc], arch=arch)
    except HeaderError as e:
        assert "file not found" in str(e)
        return
    # off_t is long: 4 bytes on 32-bit targets without _FILE_OFFSET_BITS=64.
    assert [measure.size_of(t) for t in _param_types(table, "g")] == [ptr, ptr]


def test_command_line_options(tmp_path):
    import argparse

    from btfgen.cheader import HeaderTypes
    from btfgen.commands.options import add_header_arguments
    from btfgen.target import open_options

    parser = argparse.ArgumentParser()
    parser.add_argument("--arch")
    add_header_arguments(parser)
    path = _write(tmp_path, "#ifdef WIDE\ntypedef long long n_t;\n#else\ntypedef int n_t;\n"
                  "#endif\nn_t f(n_t x);\n")
    args = parser.parse_args(["--header", path, "--arch", "arm", "-D", "WIDE", "-I", "/none"])
    target = open_options(args)
    table = target.types
    assert isinstance(table, HeaderTypes) and target.arch == "arm"
    assert table.arch == "arm" and measure.size_of(table.find_funcs("f")[0].proto.ret) == 8
    with pytest.raises(HeaderError, match="only meaningful with --header"):
        open_options(parser.parse_args(["-D", "X"]))


def test_kernel_style_annotations_are_seen_through(tmp_path):
    # clang turns the kernel's __user into a btf_type_tag; gcc (and so pahole's BTF) drops it.
    path = _write(tmp_path, '#define __user __attribute__((btf_type_tag("user")))\n'
                  "struct s { _Atomic int n; } __attribute__((aligned(8)));\n"
                  "long copy(void __user *to, const char __user *from, struct s *s,\n"
                  "          _Atomic(long) counter) __attribute__((nonnull(3)));\n")
    table = load_headers([path], arch="arm64")
    to, frm, s, counter = _param_types(table, "copy")
    assert isinstance(to, T.Ptr) and isinstance(to.type, T.Void)
    assert isinstance(frm.type, T.Const) and frm.type.type.name == "char"
    assert s.type.size == 8 and walk.strip(s.type.members[0].type).name == "int"
    assert counter.name == "long int"


def test_error_in_an_included_header_names_that_header(tmp_path):
    inner = _write(tmp_path, "struct a { int x; };\nstruct a { int y; };\n", "inner.h")
    outer = _write(tmp_path, '#include "inner.h"\nint f(struct a *p);\n', "outer.h")
    with pytest.raises(HeaderError) as e:
        load_headers([outer], arch="x86_64")
    assert str(e.value).startswith(f"{inner}:2:8: redefinition of 'a'")
