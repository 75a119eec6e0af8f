"""Arch names: kernel ARCH, `uname -m`, libbpf __TARGET_ARCH_* and ELF e_machine."""

from __future__ import annotations

import pytest

from btfgen.abi.arches import arch_for_elf_machine, arch_names, load_arch
from btfgen.errors import ArchError


@pytest.mark.parametrize("name,pointer_size,canonical", [
    # uname -m
    ("x86_64", None, "x86_64"), ("i386", None, "i386"), ("i686", None, "i386"),
    ("aarch64", None, "arm64"), ("riscv64", None, "riscv64"), ("riscv32", None, "riscv32"),
    ("loongarch64", None, "loongarch64"), ("s390x", None, "s390x"), ("ppc64le", None, "ppc64le"),
    ("armv7l", None, "arm"), ("armv8l", None, "arm"), ("mips64el", None, "mips64el"),
    ("mips64", None, "mips64el"),
    # kernel ARCH / __TARGET_ARCH_*: families resolve by the BTF's pointer size
    ("x86", 8, "x86_64"), ("x86", 4, "i386"), ("riscv", 8, "riscv64"), ("riscv", 4, "riscv32"),
    ("arm64", 8, "arm64"), ("loongarch", 8, "loongarch64"), ("s390", 8, "s390x"),
    ("powerpc", 8, "ppc64le"), ("arm", 4, "arm"), ("mips", 8, "mips64el"), ("x86", None, "x86_64"),
    ("X86_64", None, "x86_64"),
])
def test_names(name, pointer_size, canonical):
    assert load_arch(name, pointer_size).name == canonical


def test_unknown_name_lists_the_valid_ones_in_one_line():
    with pytest.raises(ArchError) as e:
        load_arch("sparc64")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("unknown arch 'sparc64'; valid names: ")
    assert all(n in msg for n in ("x86_64", "aarch64", "riscv", "ppc64le", "armv7l"))
    assert arch_names() == sorted(arch_names())


def test_family_without_a_member_of_that_size():
    with pytest.raises(ArchError, match="no 32-bit member"):
        load_arch("s390", 4)


@pytest.mark.parametrize("machine,pointer_size,canonical", [
    ("EM_X86_64", 8, "x86_64"), ("EM_386", 4, "i386"), ("EM_AARCH64", 8, "arm64"),
    ("EM_RISCV", 8, "riscv64"), ("EM_RISCV", 4, "riscv32"), ("EM_RISCV", None, "riscv64"),
    ("EM_LOONGARCH", 8, "loongarch64"), ("EM_S390", 8, "s390x"), ("EM_PPC64", 8, "ppc64le"),
    ("EM_ARM", 4, "arm"), ("EM_MIPS", 8, "mips64el"),
])
def test_elf_machines(machine, pointer_size, canonical):
    assert arch_for_elf_machine(machine, pointer_size).name == canonical


def test_unknown_elf_machine():
    assert arch_for_elf_machine("EM_SPARCV9", 8) is None


def test_btf_of_another_word_size_or_byte_order_is_refused():
    from abi_corpus import available, protos_btf

    from btfgen.place import place_functions

    if not (available("s390x") and available("arm")):
        pytest.skip("no s390x/arm toolchain")
    s390 = protos_btf("s390x")
    with pytest.raises(ArchError, match="big-endian BTF, but arch ppc64le is little-endian"):
        place_functions(s390, load_arch("powerpc", 8), list(s390.funcs()))
    arm = protos_btf("arm")
    with pytest.raises(ArchError, match="pointers are 4 bytes, but arch arm64 has 8-byte"):
        place_functions(arm, load_arch("arm64"), list(arm.funcs()))


def test_no_name_answers_to_two_descriptions():
    # load_arch reads NAME.abi alone when it answers to NAME: the same answer as a search of
    # every description only while no other one claims the name.
    from btfgen.abi.arches import conventions

    claims: dict[str, list[str]] = {}
    for c in conventions():
        for name in {c.name, *c.names}:
            claims.setdefault(name, []).append(c.name)
    assert {n: cs for n, cs in claims.items() if len(cs) > 1} == {}


def test_a_name_is_read_from_its_own_file_alone():
    from btfgen.abi import arches

    arches._parsed.cache_clear()
    arches._all.cache_clear()
    try:
        conv = load_arch("x86_64")
        assert arches._parsed.cache_info().currsize == 1  # x86_64.abi, no other
        # and the search of every description gives that very object back
        assert [c for c in arches.conventions() if c.name == "x86_64"] == [conv]
        assert next(c for c in arches.conventions() if c.name == "x86_64") is conv
    finally:
        arches._parsed.cache_clear()
        arches._all.cache_clear()
