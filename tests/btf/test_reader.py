"""The reader's API on real compiled BTF and hand-built BTF; C spellings checked by the compiler."""

from __future__ import annotations

from pathlib import Path

import csrc
import pytest
import rawbtf
import toolchains

from btfgen.btf.cnames import c_declaration, c_spelling
from btfgen.btf.dump import dump_raw
from btfgen.btf.reader import load_btf, open_btf
from btfgen.btf.types import (
    Composite,
    Enum,
    Func,
    FuncProto,
    Fwd,
    Kind,
    Linkage,
    Ptr,
    Struct,
    TypeWalkError,
)
from btfgen.btf.walk import strip
from btfgen.errors import BtfError

VMLINUX = Path("/sys/kernel/btf/vmlinux")
POINTER_SIZE = {"x86_64": 8, "i386": 4, "arm64": 8, "riscv64": 8, "riscv32": 4,
                "loongarch64": 8, "s390x": 8, "ppc64le": 8, "arm": 4, "mips64el": 8}
MACHINE = {"x86_64": "EM_X86_64", "i386": "EM_386", "arm64": "EM_AARCH64", "s390x": "EM_S390",
           "ppc64le": "EM_PPC64", "arm": "EM_ARM", "riscv64": "EM_RISCV", "riscv32": "EM_RISCV",
           "mips64el": "EM_MIPS"}

pytestmark = pytest.mark.skipif(not toolchains.have("pahole"), reason="needs pahole")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("reader")
    cache = {}

    def build(arch: str):
        if arch not in cache:
            if not toolchains.TOOLCHAINS[arch].available():
                pytest.skip(f"no compiler for {arch}")
            obj = csrc.object_copy(csrc.a_source(), arch, root / f"a-{arch}.o")
            # Without FLOAT kinds, pahole 1.24 names i386's 12-byte long double
            # __SANITIZED_FAKE_INT__.
            csrc.pahole(obj, flags=("--btf_gen_floats",))
            cache[arch] = obj
        return cache[arch]

    return build


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_table_facts(compiled, arch):
    btf = open_btf(str(compiled(arch)))
    assert btf.pointer_size == POINTER_SIZE[arch]
    assert btf.byte_order == ("big" if arch == "s390x" else "little")
    if arch in MACHINE:
        assert btf.elf_machine == MACHINE[arch]
    assert btf.first_id == 1 and btf.base is None
    assert btf[0].kind == Kind.UNKN and btf[0] is btf[0]
    assert btf[len(btf) - 1] is btf[len(btf) - 1]  # decoded once, then cached
    with pytest.raises(BtfError, match="out of range"):
        btf[len(btf)]


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_functions(compiled, arch):
    btf = open_btf(str(compiled(arch)))
    names = [f.name for f in btf.funcs()]
    for name in ("takes_all", "vsum", "helper", "ret_fp", "by_value", "no_args", "pred"):
        assert name in names
    ids = [f.id for f in btf.funcs()]
    assert ids == sorted(ids)
    (vsum,) = btf.find_funcs("vsum")
    assert vsum.proto.variadic and [p.name for p in vsum.proto.params] == ["n"]
    (takes_all,) = btf.find_funcs("takes_all")
    proto = takes_all.proto
    assert not proto.variadic
    assert [p.name for p in proto.params] == ["b", "e", "n", "s", "x", "str", "cp", "vp", "cb",
                                              "f", "uv", "nm"]
    spelled = [c_spelling(p.type) for p in proto.params]
    assert spelled == ["struct bits *", "enum big64", "enum negbig", "enum small", "float",
                       "const char *", "char *const", "volatile int *", "callback_t",
                       "struct fwd_only *", "union u", "char *"]  # arrays decay
    assert isinstance(strip(proto.params[9].type).type, Fwd)
    (no_args,) = btf.find_funcs("no_args")
    assert no_args.proto.params == () and c_spelling(no_args.proto) == "void (void)"
    assert btf.find_funcs("no_such_function") == []


@pytest.mark.parametrize("arch", ["x86_64", "s390x", "arm"])
def test_member_spellings(compiled, arch):
    btf = open_btf(str(compiled(arch)))
    (ptrs,) = btf.find_types("ptrs", Kind.STRUCT)
    spelled = {m.name: c_spelling(m.type) for m in ptrs.members}
    assert spelled == {
        "next": "struct ptrs *", "p": "volatile const int *restrict",
        "f": "struct fwd_only *", "fu": "union fwd_u *", "cb": "callback_t",
        "cb2": "int (*)(const char *, ...)", "arrp": "int (*)[4]",
        "ret_fp": "void *(*)(void *)", "name": "name_t",
        "matrix": "int [12]",  # pahole 1.24 flattens multi-dimensional arrays
        "cpc": "char *const", "argv": "const char *const *", "fl": "float", "db": "double",
        "flag": "_Bool", "u2": "ulong2_t",
    }
    (td,) = btf.find_types("name_t")
    assert c_spelling(td.type) == "char [16]"
    (e,) = btf.find_types("uns", "enum")
    assert isinstance(e, Enum) and not e.signed and c_spelling(e) == "enum uns"
    assert [v.value for v in e.values] == [1, 0x80000000]
    (small,) = btf.find_types("small", "enum")
    assert small.signed and [v.value for v in small.values] == [-5, 0, 7]
    (negbig,) = btf.find_types("negbig", "enum")  # ENUM finds both encodings
    assert negbig.kind == Kind.ENUM64 and negbig.values[0].value == -0x100000000
    assert btf.find_types("negbig", Kind.ENUM64) == [negbig]
    assert btf.find_types("small", Kind.ENUM64) == []


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_spellings_compile(compiled, arch, tmp_path):
    """Redeclare every function and state every member's type with the spellings: the compiler
    rejects a conflicting redeclaration and a false static assertion."""
    btf = open_btf(str(compiled(arch)))
    checks = []
    for f in btf.funcs():
        checks.append(c_declaration(f.proto, f.name) + ";")
    for t in btf:
        # The compiler's own __va_list_tag is not declared in C; pahole flattened the matrix.
        if isinstance(t, Composite) and t.name and not t.name.startswith("__"):
            tag = "struct" if isinstance(t, Struct) else "union"
            for m in t.members:
                if m.name and not m.bitfield_size and m.name != "matrix":
                    checks.append(
                        f"_Static_assert(__builtin_types_compatible_p(__typeof__((("
                        f"{tag} {t.name} *)0)->{m.name}), {c_spelling(m.type)}), "
                        f"\"{t.name}.{m.name}\");")
    assert len(checks) > 30
    source = csrc.a_source() + "\n".join(checks) + "\n"
    obj = toolchains.compile_c(source, arch, extra=("-Werror=incompatible-pointer-types",),
                               btf=False)
    assert obj.exists()


def test_static_functions_sharing_a_name():
    """Two static functions called `helper` (as from two files; pahole 1.24 keeps only one of
    them, so the BTF is hand-built)."""
    w = rawbtf.BtfWriter()
    i32 = w.int_("int", 4, 1)
    long_ = w.int_("long", 8, 1)
    w.func("helper", w.func_proto(i32, [("x", i32)]), 0)
    w.func("other", w.func_proto(0, []), 1)
    w.func("helper", w.func_proto(long_, [("a", long_), ("b", long_)]), 0)
    w.ref("TYPEDEF", i32, "helper")
    btf = load_btf("dup.btf", w.bytes())
    first, second = btf.find_funcs("helper")
    assert (first.id, second.id) == (4, 8)
    assert first.linkage == Linkage.STATIC and second.linkage == Linkage.STATIC
    assert c_declaration(first.proto, "helper") == "int helper(int)"
    assert c_declaration(second.proto, "helper") == "long helper(long, long)"
    assert [t.id for t in btf.find_types("helper")] == [4, 8, 9]
    assert [t.id for t in btf.find_types("helper", "typedef")] == [9]
    assert [f.name for f in btf.funcs()] == ["helper", "other", "helper"]
    assert btf.pointer_size == 8  # from the INT called "long"
    dump_raw(btf)  # the dump's "(anon)" for offset 0 is its own, not the table's
    assert btf.find_types("(anon)") == [] and btf.string(0) == ""
    assert btf[3].name == "" and btf[3].kind == Kind.FUNC_PROTO


def test_pointer_size_fallbacks():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    silent = load_btf("raw.btf", w.bytes())  # no long, no ELF: the BTF does not say
    assert silent.declared_pointer_size is None
    with pytest.raises(BtfError, match="does not say how large a pointer is"):
        silent.pointer_size
    silent.assume_pointer_size(4)  # what placing it for an arch does
    assert silent.pointer_size == 4
    w.int_("long unsigned int", 4, 0)
    assert load_btf("raw.btf", w.bytes()).pointer_size == 4
    if toolchains.TOOLCHAINS["i386"].available():
        obj = toolchains.compile_c("int f(int x) { return x + 1; }\n", "i386")
        btf = open_btf(str(obj))
        assert not btf.find_types("long int") and btf.pointer_size == 4  # the ELF class


def test_kind_flag_meanings():
    btf = load_btf("every.btf", rawbtf.every_kind("big", odd=False))
    (bits,) = btf.find_types("bits", "struct")
    assert [(m.name, m.bit_offset, m.bitfield_size) for m in bits.members] == [
        ("x", 0, 3), ("y", 3, 5), ("z", 8, 0), ("w", 0xFFFFFF, 255)]
    (plain,) = btf.find_types("plain")
    assert not plain.kind_flag and plain.members[2].bit_offset == 128
    assert btf.find_types("fwd_union")[0].is_union and not btf.find_types("fwd_struct")[0].is_union
    (e64s,) = btf.find_types("e64s")
    assert e64s.signed and [v.value for v in e64s.values] == [-0x100000000, -(1 << 63)]
    (e64u,) = btf.find_types("e64u")
    assert not e64u.signed and e64u.values[0].value == (1 << 64) - 1
    tags = {t.name: t.component_idx for t in btf if t.kind == Kind.DECL_TAG}
    assert tags == {"tag_fn": -1, "tag_param": 1, "tag_member": 2}
    (variadic,) = btf.find_funcs("variadic")
    assert variadic.linkage == Linkage.GLOBAL and variadic.proto.variadic
    assert c_spelling(variadic.proto) == "int (int *, long int, ...)"
    (ext,) = btf.find_funcs("ext")
    assert ext.linkage == Linkage.EXTERN
    user_ptr = next(t for t in btf if isinstance(t, Ptr) and t.type.kind == Kind.TYPE_TAG)
    assert c_spelling(user_ptr) == "int *"
    datasec = next(t for t in btf if t.kind == Kind.DATASEC)
    assert [(v.offset, v.size, v.type_id) for v in datasec.vars] == [(0, 4, 30), (8, 24, 31),
                                                                     (32, 8, 32)]


def test_split_tables(tmp_path):
    if not toolchains.TOOLCHAINS["x86_64"].available():
        pytest.skip("no gcc")
    a = csrc.pahole(csrc.object_copy(csrc.a_source(), "x86_64", tmp_path / "a.o"))
    b = csrc.pahole(csrc.object_copy(csrc.b_source(), "x86_64", tmp_path / "b.o"), base=a)
    base = open_btf(str(a))
    split = open_btf(str(b), base=base)
    assert split.base is base and split.first_id == len(base)
    assert len(split) > len(base)
    assert split[1] is base[1]
    (use_b,) = split.find_funcs("use_helper_b")
    assert use_b.id >= split.first_id
    assert [f.name for f in split.funcs()] == [f.name for f in split if isinstance(f, Func)]
    assert all(f.id >= split.first_id for f in split.funcs())
    # Lookups reach the base: a module's functions use vmlinux's types.
    assert split.find_types("bits", "struct")[0] is base.find_types("bits", "struct")[0]
    assert c_spelling(use_b.proto) == "long int (struct other *)"
    assert split.pointer_size == 8


@pytest.mark.skipif(not VMLINUX.exists(), reason="no /sys/kernel/btf/vmlinux")
def test_running_kernel_spellings_terminate():
    btf = open_btf(str(VMLINUX))
    (vfs_read,) = btf.find_funcs("vfs_read")
    assert c_declaration(vfs_read.proto, "vfs_read") == \
        "ssize_t vfs_read(struct file *, char *, size_t, loff_t *)"
    spelled = 0
    for f in btf.funcs():
        try:
            c_spelling(f.proto)
            spelled += 1
        except TypeWalkError:
            pass
    assert spelled == sum(1 for _ in btf.funcs())
    assert isinstance(btf.find_types("task_struct", "struct")[0], Struct)
    assert all(isinstance(f.proto, FuncProto) for f in btf.find_funcs("vfs_write"))


def test_btf_that_does_not_say_its_pointer_size_is_placed_for_the_arch_named(tmp_path):
    """No `long`, no ELF: 4-byte pointers for i386, 8 for x86_64 (it used to be 8 always, and
    i386 was refused as a mismatch)."""
    import btfgen

    w = rawbtf.BtfWriter()
    i = w.int_("int", 4, 1)
    p = w.ref("PTR", i)
    w.func("f", w.func_proto(i, [("p", p), ("n", i)]))
    path = tmp_path / "raw.btf"
    path.write_bytes(w.bytes())
    for arch, size in (("i386", 4), ("x86_64", 8)):
        target = btfgen.open(str(path), arch=arch)
        (f,) = target.place().functions
        assert f.args[0].size == size and target.types.pointer_size == size
