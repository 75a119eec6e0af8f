"""Sizes, alignments, member and bitfield offsets from BTF against what the compiler laid out.

The compiler's answers come from the object itself: a `btfgen_layout` array of sizeof/_Alignof/
offsetof values, and one object per bitfield with only that bitfield set to all ones (its bytes
show which bits the compiler gave it).
"""

from __future__ import annotations

import struct
from pathlib import Path

import csrc
import pytest
import toolchains
from elftools.elf.elffile import ELFFile

from btfgen.btf.reader import open_btf
from btfgen.btf.measure import align_of, size_of
from btfgen.btf.types import Composite, Enum, Kind, Ptr
from btfgen.btf.walk import strip

# The largest alignment any scalar gets in memory (what `align_of` caps at), per arch.
MAX_SCALAR_ALIGN = {
    "x86_64": 16, "arm64": 16, "riscv64": 16, "loongarch64": 16, "ppc64le": 16,
    "s390x": 8, "i386": 4, "arm": 8, "riscv32": 16, "mips64el": 16,
}
INT128 = {"x86_64", "arm64", "riscv64", "loongarch64", "s390x", "ppc64le", "mips64el"}
# What gcc calls the scalar types the C source names (clang keeps the source's spelling).
BTF_NAMES = {"long long": "long long int", "long": "long int", "short": "short int"}
SCALARS = ("long long", "double", "long double", "void *", "long", "__int128")

pytestmark = pytest.mark.skipif(not toolchains.have("pahole"), reason="needs pahole")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("layout")
    cache = {}

    def build(arch: str):
        if arch not in cache:
            if not toolchains.TOOLCHAINS[arch].available():
                pytest.skip(f"no compiler for {arch}")
            obj = csrc.object_copy(csrc.layout_source(arch in INT128), arch,
                                   root / f"layout-{arch}.o")
            csrc.pahole(obj, flags=("--btf_gen_floats",))
            cache[arch] = (obj, open_btf(str(obj)), compiler_values(obj, arch))
        return cache[arch]

    return build


def symbol_bytes(elf: ELFFile, name: str) -> bytes:
    sym = elf.get_section_by_name(".symtab").get_symbol_by_name(name)[0]
    section = elf.get_section(sym["st_shndx"])
    start = sym["st_value"] - section["sh_addr"]
    return section.data()[start:start + sym["st_size"]]


def compiler_values(obj: Path, arch: str):
    with open(obj, "rb") as f:
        elf = ELFFile(f)
        order = "<" if elf.little_endian else ">"
        raw = symbol_bytes(elf, "btfgen_layout")
        values = list(struct.unpack(f"{order}{len(raw) // 4}I", raw))
        bitfields = [symbol_bytes(elf, f"btfgen_bf_{i}") for i in range(len(csrc.BITFIELDS))]
    table = {}
    for ctype, members in csrc.layout_types(arch in INT128):
        size, align = values.pop(0), values.pop(0)
        offsets = {m: values.pop(0) for m in members}
        table[ctype] = (size, align, offsets)
    assert not values
    return table, bitfields, elf.little_endian


def btf_type(btf, ctype: str):
    if ctype == "void *":
        return next(t for t in btf if isinstance(t, Ptr))
    if ctype.startswith(("struct ", "union ")):
        keyword, name = ctype.split()
        (t,) = btf.find_types(name, keyword)
        return t
    if ctype.startswith("enum "):
        (t,) = [t for t in btf.find_types(ctype.split()[1]) if isinstance(t, Enum)]
        return t
    (t,) = [t for name in {BTF_NAMES.get(ctype, ctype), ctype} for t in btf.find_types(name)
            if t.kind in (Kind.INT, Kind.FLOAT)]
    return t


def member_bit_offset(t, name: str) -> int | None:
    """Bit offset of `name` in `t`, looking through anonymous struct/union members as C does."""
    for m in t.members:
        if m.name == name:
            return m.bit_offset
        inner = strip(m.type)
        if not m.name and isinstance(inner, Composite):
            found = member_bit_offset(inner, name)
            if found is not None:
                return m.bit_offset + found
    return None


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_sizes_alignments_offsets(built, arch):
    _, btf, (table, _, _) = built(arch)
    for ctype, (size, align, offsets) in table.items():
        t = btf_type(btf, ctype)
        assert size_of(t) == size, ctype
        assert align_of(t, MAX_SCALAR_ALIGN[arch]) == align, ctype
        for member, offset in offsets.items():
            assert member_bit_offset(strip(t), member) == 8 * offset, (ctype, member)


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_max_scalar_align(built, arch):
    """The cap `align_of` needs is the largest scalar alignment the compiler uses."""
    _, _, (table, _, _) = built(arch)
    assert max(table[s][1] for s in SCALARS if s in table) == MAX_SCALAR_ALIGN[arch]


def set_bits(data: bytes, little_endian: bool) -> list[int]:
    """Bit numbers as BTF counts them: in memory order, from the first byte's least significant
    bit on little-endian targets and from its most significant bit on big-endian ones."""
    bits = []
    for i, byte in enumerate(data):
        for b in range(8):
            if byte >> (b if little_endian else 7 - b) & 1:
                bits.append(8 * i + b)
    return bits


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_bitfield_positions(built, arch):
    _, btf, (_, bitfields, little_endian) = built(arch)
    for (struct_name, member), data in zip(csrc.BITFIELDS, bitfields):
        (t,) = btf.find_types(struct_name, "struct")
        (m,) = [m for m in t.members if m.name == member]
        assert t.kind_flag and m.bitfield_size, (struct_name, member)
        want = list(range(m.bit_offset, m.bit_offset + m.bitfield_size))
        assert set_bits(data, little_endian) == want, (struct_name, member)
