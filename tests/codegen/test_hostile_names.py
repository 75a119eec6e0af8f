"""A hostile BTF cannot change the meaning of generated code: names with quotes, newlines, `*/`,
keywords, `foo.isra.0`, and names that collide once sanitised. The generated C must compile with
exactly the decoders expected; the generated Python must import without running anything but its
own code, keeping every name as data."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
from handmade import Table, arch_layout, func, reg, stack, value

from btfgen.codegen import bpf
from btfgen.codegen.names import Namespace, c_comment, c_ident, c_string, py_ident
from btfgen.codegen.outputs import generate

PWNED = "/tmp/btfgen-hostile-pwned"
EVIL = [
    'x */ #include "/etc/passwd" /*',
    "a\nb",
    "int",
    "class",
    "__import__('os').system('touch " + PWNED + "')",
    '"""; import os; os.system("touch ' + PWNED + '"); """',
    "foo.isra.0",
    "foo_isra_0",
    "9lives",
    "",
    "\\",
    "a??/",
    "__pad0",
    "btfgen_retptr",
    "é",
]


def hostile():
    t = Table(8)
    i32 = t.int_("int", 4)
    bad_int = t.int_("unsigned */ int", 4, signed=False)
    t.int_("int\nunsigned", 8)  # base-type words that would mean another size
    members = tuple((n, i32, 32 * k) for k, n in enumerate(EVIL[:6])) + (("pad0", bad_int, 192),)
    s = t.struct(EVIL[0], 28, members)
    u = t.struct("int", 8, (("int", i32, 0), ("long", i32, 0)), union=True)
    td = t.typedef("struct */", s)
    e = t.enum("class", 4, tuple((n, k) for k, n in enumerate(EVIL)))
    ptr = t.ptr(t.struct("a\nb */", 4, (("x", i32, 0),)))
    funcs = []
    for k, name in enumerate(EVIL):
        args = [
            value(t, name, i32, [reg("di", "rdi", 0, 4)]),
            value(t, EVIL[(k + 1) % len(EVIL)], td, [stack(8, 0, 8), stack(16, 8, 8),
                                                       stack(24, 16, 8), stack(32, 24, 4)]),
            value(t, EVIL[(k + 2) % len(EVIL)], u, [reg("si", "rsi", 0, 8)]),
            value(t, EVIL[(k + 3) % len(EVIL)], e, [reg("dx", "rdx", 0, 4)]),
            value(t, EVIL[(k + 4) % len(EVIL)], ptr, [reg("cx", "rcx", 0, 8)]),
            value(t, "btfgen_retptr", i32, [], unavailable="a reason with */ and\nnewline"),
        ]
        ret = value(t, "", s, [reg("di", "rdi", 0, 8)], by_ref=True, at_exit=False)
        funcs.append(func(name, 500 + k, args, ret))
    funcs.append(func(EVIL[6], 600, [value(t, "x", i32, [reg("di", "rdi", 0, 4)])]))
    return t, arch_layout(funcs)


def test_sanitisers():
    assert c_ident("foo.isra.0") == "foo_isra_0"
    assert c_ident("int") == "int_"
    assert c_ident("9lives") == "_9lives"
    assert c_ident("") == "anon"
    assert py_ident("class") == "class_"
    assert py_ident("__init__") == "n__init__"
    ns = Namespace()
    assert [ns.take("a.b"), ns.take("a_b"), ns.take("a b", "7")] == ["a_b", "a_b_2", "a_b__7"]
    for text in EVIL:
        comment = c_comment(text)
        assert "*/" not in comment and "\n" not in comment and "\\" not in comment
        assert "??" not in comment
        assert re.fullmatch(r'"(?:[ !#-\[\]-~]|\\["\\?]|\\[0-7]{3})*"', c_string(text))


@pytest.fixture(scope="module")
def outputs():
    table, arch = hostile()
    return table, arch, generate(arch, table, self_contained=True)


def test_c_compiles_with_exactly_the_expected_decoders(outputs, tmp_path):
    table, arch, out = outputs
    (tmp_path / "btfgen.bpf.h").write_text(out["btfgen.bpf.h"])
    (tmp_path / "btfgen_specs.h").write_text(out["btfgen_specs.h"])
    names = bpf.function_names(arch.functions)
    assert len(set(names)) == len(names) == len(arch.functions)
    calls = "\n".join(
        f'SEC("syscall") int run_{n}(void *ctx) {{ struct btfgen_args_{n} a; '
        f"struct btfgen_ret_{n} r; int e = btfgen_entry_{n}(ctx, &a); "
        f"return e | btfgen_exit_{n}(ctx, &a, &r) | btfgen_specs[BTFGEN_SPEC_{n}].nentry; }}"
        if arch.functions[i].ret else
        f'SEC("syscall") int run_{n}(void *ctx) {{ struct btfgen_args_{n} a; '
        f"return btfgen_entry_{n}(ctx, &a); }}"
        for i, n in enumerate(names))
    src = tmp_path / "t.c"
    src.write_text('#include "btfgen.bpf.h"\n#include "btfgen_specs.h"\n' + calls + "\n")
    proc = subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c",
                           str(src), "-o", str(tmp_path / "t.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # Preprocessed, nothing from /etc/passwd and no stray tokens from the names.
    pre = subprocess.run(["clang-19", "-target", "bpf", "-E", "-P", str(src)],
                         capture_output=True, text=True, check=True).stdout
    assert "root:" not in pre
    assert "isra.0" not in pre and "os.system" not in pre
    for line in out["btfgen.bpf.h"].splitlines():  # every comment closes on its own line
        assert line.count("/*") <= line.count("*/") or line.startswith(("/*", " *"))


def test_user_space_table_keeps_names_as_data(outputs, tmp_path):
    """btfgen_specs.h in a C loader: every function and parameter name is a string, exactly."""
    table, arch, out = outputs
    (tmp_path / "btfgen_specs.h").write_text(out["btfgen_specs.h"])
    src = tmp_path / "names.c"
    src.write_text('#include <stdio.h>\n#include "btfgen_specs.h"\nint main(void) {\n'
                   "\tfor (unsigned i = 0; i < BTFGEN_NSPECS; i++) {\n"
                   '\t\tprintf("%s\\n", btfgen_funcs[i].name);\n'
                   "\t\tfor (unsigned a = 0; a < btfgen_funcs[i].nargs; a++)\n"
                   '\t\t\tprintf("%s\\n", btfgen_funcs[i].args[a].name);\n\t}\n}\n')
    exe = tmp_path / "names"
    proc = subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}", str(src),
                           "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = subprocess.run([str(exe)], capture_output=True, check=True).stdout
    want = "".join(f"{f.name}\n" + "".join(f"{a.name}\n" for a in f.args)
                   for f in arch.functions)
    assert sorted(got.decode("utf-8", "replace").splitlines(keepends=True)) == \
        sorted(want.encode("utf-8", "replace").decode("utf-8", "replace")
               .splitlines(keepends=True))


def test_python_imports_and_keeps_names_as_data(outputs, tmp_path):
    table, arch, out = outputs
    import os

    if os.path.exists(PWNED):
        os.unlink(PWNED)
    path = tmp_path / "hostile_mod.py"
    path.write_text(out["btfgen_x86_64.py"])
    compile(path.read_text(), str(path), "exec")
    spec = importlib.util.spec_from_file_location("hostile_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not os.path.exists(PWNED)
    keys = mod.names()
    assert len(keys) == len(arch.functions)
    assert {mod.function(k).name for k in keys} == {f.name for f in arch.functions}
    f = mod.function(EVIL[4])
    assert f.names[0] == EVIL[4]  # parameter names too
    enum = [d for d in f.args if d.type.tag == "enum"][0].type
    assert set(enum.names.values()) == set(EVIL)
    # The descriptors are evaluated on first use: after every function and spec was asked for.
    assert all(mod.spec(k) for k in keys)
    assert not os.path.exists(PWNED)


def test_vmlinux_mode_prints_no_hostile_name_as_code():
    """Without self-contained definitions, names are printed as vmlinux.h spells them, but only
    names that are plain identifiers of one type; everything else falls back."""
    t, arch = hostile()
    wide = [i for i, x in t.items() if x.name == "int\nunsigned"][0]
    f = arch.functions[0]
    extra = value(t, "w", wide, [reg("r8", "r8", 0, 8)])
    arch = arch_layout([func(f.name, f.btf_id, f.args + (extra,), f.ret)])
    header = generate(arch, t, ("bpf",))["btfgen.bpf.h"]
    code = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    assert "__s64 w;" in code
    for name in EVIL + ["int\nunsigned", "unsigned */ int", "struct */"]:
        if len(name) > 3 and not re.fullmatch(r"\w+", name):  # (short ones occur anyway)
            assert name not in code, name
    assert "struct int " not in code and "union int " not in code


def test_kernel_c_keeps_names_as_data_and_compiles(tmp_path):
    """Kernel C (--lang kernel) from the same hostile BTF: every name is a comment, a string or
    a sanitised identifier; the header compiles (gcc -Wall -Werror, over the stand-ins of the
    kernel's headers tests/codegen/test_kernel_c.py runs on) with one decoder a function."""
    t, arch = hostile()
    header = generate(arch, t, ("kernel",))["btfgen.kernel.h"]
    code = re.sub(r'/\*.*?\*/|"(?:[^"\\\n]|\\.)*"',  # comments and strings, in one pass
                  lambda m: '""' if m[0].startswith('"') else "", header, flags=re.S)
    assert "/etc/passwd" not in code and "os.system" not in code and "isra.0" not in code
    for line in header.splitlines():  # every comment closes on its own line
        assert line.count("/*") <= line.count("*/") or line.startswith(("/*", " *"))
    names = bpf.function_names(arch.functions)
    calls = "\n".join(f"void *use_{n} = (void *)btfgen_entry_{n};" for n in names)
    (tmp_path / "btfgen.kernel.h").write_text(header)
    src = tmp_path / "t.c"
    src.write_text('#include "btfgen.kernel.h"\n' + calls + "\n"
                   "const char *shim_symbol_of(unsigned long ip) { return \"\"; }\n"
                   "uintptr_t shim_mapped_lo, shim_mapped_hi;\n")
    shim = Path(__file__).resolve().parent / "kernel_shim"
    proc = subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Werror", "-Wno-unused-function",
                           "-fsyntax-only", "-I", str(shim), "-I", str(tmp_path), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
