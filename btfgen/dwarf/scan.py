"""A compile unit's top-level DIEs, stepped over without decoding them.

pyelftools builds every DIE it passes, with every attribute value (a vmlinux unit holds thousands
of top-level types from its headers); only the subprograms matter here. This walks the raw
.debug_info bytes with the unit's abbreviation table, measures each attribute by its form, jumps
over children through DW_AT_sibling, and yields the offsets of the top-level DIEs of the tags
asked for, which pyelftools then decodes. Anything it does not know (a form it cannot measure)
makes it give up, and the caller walks the unit with pyelftools instead.
"""

from __future__ import annotations

from typing import Iterator

_FIXED = {
    "DW_FORM_data1": 1, "DW_FORM_ref1": 1, "DW_FORM_flag": 1, "DW_FORM_strx1": 1,
    "DW_FORM_addrx1": 1, "DW_FORM_data2": 2, "DW_FORM_ref2": 2, "DW_FORM_strx2": 2,
    "DW_FORM_addrx2": 2, "DW_FORM_strx3": 3, "DW_FORM_addrx3": 3, "DW_FORM_data4": 4,
    "DW_FORM_ref4": 4, "DW_FORM_strx4": 4, "DW_FORM_addrx4": 4, "DW_FORM_ref_sup4": 4,
    "DW_FORM_data8": 8, "DW_FORM_ref8": 8, "DW_FORM_ref_sig8": 8, "DW_FORM_ref_sup8": 8,
    "DW_FORM_data16": 16, "DW_FORM_flag_present": 0, "DW_FORM_implicit_const": 0,
}
_LEB = frozenset({"DW_FORM_sdata", "DW_FORM_udata", "DW_FORM_ref_udata", "DW_FORM_strx",
                  "DW_FORM_addrx", "DW_FORM_loclistx", "DW_FORM_rnglistx",
                  "DW_FORM_GNU_addr_index", "DW_FORM_GNU_str_index"})
_OFFSET = frozenset({"DW_FORM_strp", "DW_FORM_line_strp", "DW_FORM_sec_offset",
                     "DW_FORM_GNU_ref_alt", "DW_FORM_GNU_strp_alt", "DW_FORM_strp_sup"})
_REFS = {"DW_FORM_ref1": 1, "DW_FORM_ref2": 2, "DW_FORM_ref4": 4, "DW_FORM_ref8": 8}


class Unknown(Exception):
    """A form or shape this scanner does not measure: walk the unit with pyelftools."""


def _uleb(data, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


class _Plan:
    """How to step over one abbreviation's DIE: its attribute forms, the sibling's index."""

    __slots__ = ("tag", "children", "forms", "sibling", "low_pc")

    def __init__(self, decl) -> None:
        self.tag = decl["tag"]
        self.children = decl["children_flag"] == "DW_CHILDREN_yes"
        self.forms = [spec.form for spec in decl["attr_spec"]]
        names = [spec.name for spec in decl["attr_spec"]]
        self.sibling = names.index("DW_AT_sibling") if "DW_AT_sibling" in names else -1
        # A DW_FORM_addr low_pc: an address to filter by without decoding the DIE.
        self.low_pc = names.index("DW_AT_low_pc") if "DW_AT_low_pc" in names and \
            self.forms[names.index("DW_AT_low_pc")] == "DW_FORM_addr" else -1


def top_level(cu, data, tags: frozenset[str],
              addresses: frozenset[int] | None = None) -> Iterator[int]:
    """Offsets (in .debug_info) of `cu`'s top-level DIEs whose tag is in `tags`; with
    `addresses`, only those whose DW_AT_low_pc is among them (or that have none to test)."""
    version = cu.header.version
    addr = cu.header.address_size
    offset_size = 8 if cu.dwarf_format() == 64 else 4
    ref_addr = addr if version == 2 else offset_size
    table = cu.get_abbrev_table()
    plans: dict[int, _Plan] = {}
    top = cu.get_top_DIE()
    end = cu.cu_offset + cu["unit_length"] + cu.structs.initial_length_field_size()
    pos = top.offset + top.size
    base = cu.cu_offset
    while pos < end:
        start = pos
        code, pos = _uleb(data, pos)
        if code == 0:
            return  # the unit's children end
        plan = plans.get(code)
        if plan is None:
            plan = plans[code] = _Plan(table.get_abbrev(code).decl)
        wanted = plan.tag in tags
        if wanted and (addresses is None or plan.low_pc < 0):
            yield start
            wanted = False
        order = "little" if cu.structs.little_endian else "big"
        sibling = None
        for i, form in enumerate(plan.forms):
            if i == plan.low_pc and wanted:
                if int.from_bytes(data[pos:pos + addr], order) in addresses:
                    yield start
            n = _FIXED.get(form)
            if i == plan.sibling:
                width = _REFS.get(form)
                if width is None:
                    if form == "DW_FORM_ref_udata":
                        value, pos = _uleb(data, pos)
                        sibling = base + value
                        continue
                    raise Unknown(form)
                sibling = base + int.from_bytes(data[pos:pos + width], order)
                pos += width
                continue
            if n is not None:
                pos += n
            elif form in _LEB:
                _, pos = _uleb(data, pos)
            elif form in _OFFSET:
                pos += offset_size
            elif form == "DW_FORM_addr":
                pos += addr
            elif form == "DW_FORM_ref_addr":
                pos += ref_addr
            elif form == "DW_FORM_string":
                while data[pos]:
                    pos += 1
                pos += 1
            elif form in ("DW_FORM_block1", "DW_FORM_block2", "DW_FORM_block4"):
                width = {"DW_FORM_block1": 1, "DW_FORM_block2": 2, "DW_FORM_block4": 4}[form]
                size = int.from_bytes(data[pos:pos + width], order)
                pos += width + size
            elif form in ("DW_FORM_block", "DW_FORM_exprloc"):
                size, pos = _uleb(data, pos)
                pos += size
            else:
                raise Unknown(form)
        if plan.children:
            if sibling is None:
                raise Unknown("children without DW_AT_sibling")
            if sibling <= start:
                raise Unknown("DW_AT_sibling points backwards")
            pos = sibling
