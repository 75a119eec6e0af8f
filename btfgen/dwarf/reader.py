"""Walk an ELF's DWARF: every out-of-line function, its parameters and their entry locations.

Each DWARF subprogram is tied to the ELF symbols whose code starts at its entry address, as the
arch lays functions out (entries.py: patchable-entry no-ops, the Thumb bit). A function is `foo`
only where a symbol `foo` is tied to that address: a clone (`foo.isra.0`, `foo.constprop.0`)
carries the DWARF name `foo` through its abstract origin but takes other parameters, so it is
kept apart; static functions of one name are told apart by their addresses.

Only what is needed is parsed: compile units are walked through DW_AT_sibling (a function's
body, the members of a struct are skipped), and with a set of names, `.debug_aranges` names the
compile units that hold them so the rest of the file is never read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from btfgen.abi.convention import Convention, DwarfFacts
from btfgen.errors import DwarfError

from . import entries, scan
from .locations import EntryLocation, FrameBase, entry_location, frame_base

_VERSIONS = (2, 3, 4, 5)
_SUBPROGRAM = frozenset({"DW_TAG_subprogram"})
_QUALIFIERS = frozenset({
    "DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type", "DW_TAG_restrict_type",
    "DW_TAG_atomic_type", "DW_TAG_immutable_type", "DW_TAG_packed_type", "DW_TAG_shared_type",
})
_POINTERS = frozenset({"DW_TAG_pointer_type", "DW_TAG_reference_type",
                       "DW_TAG_rvalue_reference_type", "DW_TAG_ptr_to_member_type"})


@dataclass(frozen=True, slots=True)
class DwarfParam:
    name: str
    size: int | None  # None: DWARF gives no size (an incomplete type)
    location: EntryLocation
    # True: DWARF gives one expression for the whole function (no location list), so a memory
    # location is where the value lives once the prologue has run, not necessarily at entry.
    whole_function: bool = False


@dataclass(frozen=True, slots=True)
class DwarfFunction:
    name: str  # the source name (through the abstract origin for out-of-line instances)
    address: int  # the entry PC
    symbols: tuple[str, ...]  # the ELF function symbols tied to that address (entries.py)
    params: tuple[DwarfParam, ...]
    variadic: bool
    cu_offset: int

    @property
    def is_symbol(self) -> bool:
        """The ELF symbol of this name is at this address (not only a clone of it)."""
        return self.name in self.symbols


def _pyelftools_errors() -> tuple[type[BaseException], ...]:
    from elftools.common.exceptions import DWARFError, ELFError
    from elftools.construct.core import ConstructError

    # What pyelftools lets escape on damaged input besides its own: struct unpacking, lookups
    # past a table, bad encodings, and the asserts it checks headers with.
    return (ELFError, DWARFError, ConstructError, struct.error, ValueError, KeyError,
            IndexError, AssertionError, EOFError, TypeError)


PYELFTOOLS_ERRORS = _pyelftools_errors()


class DwarfFile:
    """An ELF file's DWARF, for one arch description (its CFA and register numbers)."""

    def __init__(self, path: str | Path, conv: Convention):
        self.path = str(path)
        self.conv = conv
        if conv.dwarf is None:
            raise DwarfError(f"{conv.path}: arch {conv.name} has no `dwarf` statement")
        self.facts: DwarfFacts = conv.dwarf
        try:
            self._stream = open(path, "rb")
        except OSError as e:
            raise DwarfError(f"{path}: {e.strerror or e}") from None
        try:
            self._open(path, conv)
        except BaseException:
            self._stream.close()  # whatever went wrong, the file is not left open
            raise
        self._info = None
        self.on_unit = None  # called with (end of the unit read, .debug_info's size): progress
        self._addresses: tuple | None = None
        self._symbols: dict[int, list[str]] | None = None
        self._entries: dict[int, list[str]] | None = None
        self._by_name: dict[str, list[int]] | None = None

    def _open(self, path, conv: Convention) -> None:
        from elftools.elf.elffile import ELFFile

        try:
            self.elf = ELFFile(self._stream)
        except PYELFTOOLS_ERRORS as e:
            raise DwarfError(f"{path}: not a readable ELF file: {_first_line(e)}") from None
        machine = self.elf["e_machine"]
        if conv.elf_machine and machine != conv.elf_machine:
            raise DwarfError(f"{path}: an ELF file for {machine}, not {conv.name} "
                             f"({conv.elf_machine})")
        if self.elf.elfclass // 8 != conv.pointer_size:
            raise DwarfError(f"{path}: {self.elf.elfclass}-bit ELF, not {conv.name}")
        if self.elf.get_section_by_name(".debug_info") is None:
            raise DwarfError(f"{path}: no DWARF (.debug_info section): build it with -g, or "
                             f"use the kernel's -dbg vmlinux")
        try:
            # A linked image's DWARF is final; its .rel.debug_* sections (a vmlinux linked with
            # --emit-relocs) must not be applied a second time. An object's must be.
            relocate = self.elf["e_type"] == "ET_REL"
            self.dwarf = self.elf.get_dwarf_info(relocate_dwarf_sections=relocate)
            self._loclists = self.dwarf.location_lists()
            self._aranges = self.dwarf.get_aranges() if self._has(".debug_aranges") else None
        except PYELFTOOLS_ERRORS as e:
            raise DwarfError(f"{path}: damaged DWARF: {_first_line(e)}") from None

    def close(self) -> None:
        if self._info:
            self._info.release()
        self._stream.close()

    def __enter__(self) -> DwarfFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _has(self, name: str) -> bool:
        return self.elf.get_section_by_name(name) is not None

    # -- ELF symbols --------------------------------------------------------------------------

    def symbols(self) -> dict[int, list[str]]:
        """Function symbols by the address their code starts at."""
        self._read_symbols()
        assert self._symbols is not None
        return self._symbols

    def entry_symbols(self) -> dict[int, list[str]]:
        """Function symbols by each address DWARF may name as their first instruction."""
        self._read_symbols()
        assert self._entries is not None
        return self._entries

    def _read_symbols(self) -> None:
        if self._symbols is not None:
            return
        found: list[entries.FunctionSymbol] = []
        by_entry: dict[int, list[str]] = {}
        section = self.elf.get_section_by_name(".symtab") or \
            self.elf.get_section_by_name(".dynsym")
        if section is not None:
            facts = self.conv.symbol_entry
            try:
                found = entries.read_symbols(self.elf, section, facts)
                by_entry = entries.by_entry(found, facts, entries.ElfCode(self.elf))
            except DwarfError as e:
                raise DwarfError(f"{self.path}: damaged symbol table: {e}") from None
            except Exception as e:  # noqa: BLE001
                raise DwarfError(f"{self.path}: damaged symbol table: "
                                 f"{_first_line(e)}") from None
        by_addr: dict[int, list[str]] = {}
        for s in found:
            by_addr.setdefault(s.address, []).append(s.name)
        by_name: dict[str, list[int]] = {}
        for address, names in by_entry.items():
            for name in names:
                by_name.setdefault(name, []).append(address)
        self._symbols, self._entries, self._by_name = by_addr, by_entry, by_name

    def addresses_of(self, names: set[str]) -> frozenset[int]:
        if self._addresses is None or self._addresses[0] is not names:
            self._read_symbols()
            assert self._by_name is not None
            found = {a for n in names for a in self._by_name.get(n, ())}
            found |= {a for n, addrs in self._by_name.items() if "." in n and
                      n.split(".", 1)[0] in names for a in addrs}
            self._addresses = (names, frozenset(found))
        return self._addresses[1]

    def symbol_addresses(self, name: str) -> list[int]:
        """The addresses DWARF may name as the first instruction of symbol `name`."""
        self._read_symbols()
        assert self._by_name is not None
        return self._by_name.get(name, [])

    # -- compile units ------------------------------------------------------------------------

    def _cu_offsets_for(self, names: Iterable[str]) -> list[int] | None:
        """The compile units holding these functions, by .debug_aranges; None without it."""
        if self._aranges is None:
            return None
        offsets = set()
        for name in names:
            for addr in self.symbol_addresses(name):
                try:
                    off = self._aranges.cu_offset_at_addr(addr)
                except Exception:  # noqa: BLE001 - no entry covers it
                    off = None
                if off is not None:
                    offsets.add(off)
        return sorted(offsets)

    def _units(self, names: set[str] | None) -> Iterator:
        offsets = self._cu_offsets_for(names) if names is not None else None
        if offsets is None:
            yield from self.dwarf.iter_CUs()
        else:
            for off in offsets:
                yield self.dwarf.get_CU_at(off)

    def functions(self, names: Iterable[str] | None = None) -> Iterator[DwarfFunction]:
        """Every out-of-line function (with `names`, only those whose DWARF name is in it)."""
        wanted = set(names) if names is not None else None
        symbols = self.entry_symbols()
        units = self._units(wanted)
        while True:
            try:
                cu = next(units)
            except StopIteration:
                return
            except Exception as e:  # noqa: BLE001
                raise DwarfError(f"{self.path}: damaged DWARF: {_first_line(e)}") from None
            end = cu.cu_offset + cu["unit_length"] + cu.structs.initial_length_field_size()
            if end > self.dwarf.debug_info_sec.size:
                raise DwarfError(f"{self.path}: .debug_info+{cu.cu_offset:#x}: truncated DWARF: "
                                 f"the unit ends at {end:#x}, past the section's end "
                                 f"({self.dwarf.debug_info_sec.size:#x})")
            version = cu.header.version
            if version not in _VERSIONS:
                raise DwarfError(f"{self.path}: .debug_info+{cu.cu_offset:#x}: DWARF version "
                                 f"{version} (known: 2 to 5)")
            try:
                found = list(_Unit(self, cu, symbols, wanted).functions())
            except DwarfError:
                raise
            except Exception as e:  # noqa: BLE001 - a damaged unit, whatever pyelftools raises
                raise DwarfError(f"{self.path}: .debug_info+{cu.cu_offset:#x}: damaged DWARF: "
                                 f"{_first_line(e)}") from None
            self._forget_units()
            if self.on_unit is not None:
                self.on_unit(end, self.dwarf.debug_info_sec.size)
            yield from found

    def _info_bytes(self):
        """.debug_info's bytes as a memoryview (no copy), or None where the stream has none."""
        if self._info is None:
            stream = self.dwarf.debug_info_sec.stream
            self._info = stream.getbuffer() if hasattr(stream, "getbuffer") else False
        return self._info or None

    def _forget_units(self) -> None:
        """pyelftools keeps every parsed unit with all its DIEs (5 GB over a whole vmlinux);
        what a unit gave is in DwarfFunction objects already, so its DIEs can go."""
        for name in ("_cu_cache", "_cu_offsets_map"):
            cache = getattr(self.dwarf, name, None)
            if isinstance(cache, list):
                cache.clear()


class _Unit:
    """One compile unit's functions."""

    def __init__(self, file: DwarfFile, cu, symbols: dict[int, list[str]],
                 wanted: set[str] | None):
        from elftools.dwarf.dwarf_expr import DWARFExprParser

        self.file = file
        self.cu = cu
        self.symbols = symbols
        self.wanted = wanted
        # With names: the addresses of their symbols and of their clones' (foo.isra.0), so the
        # scanner decodes only those subprograms.
        self.addresses = file.addresses_of(wanted) if wanted is not None else None
        self.facts = file.facts
        self.pointer_size = cu.header.address_size
        self.version = cu.header.version
        self.expr = DWARFExprParser(cu.structs)
        self.sizes: dict[int, int | None] = {}
        top = cu.get_top_DIE()
        self.top = top
        self.base = self._addr(top, "DW_AT_low_pc") or 0

    def _addr(self, die, name: str) -> int | None:
        attr = die.attributes.get(name)
        # pyelftools has already turned a DW_FORM_addrx index into the address.
        return None if attr is None else attr.value

    def _subprograms(self) -> Iterator:
        """The unit's top-level subprogram DIEs: found by the raw scanner where it can, else
        by pyelftools' own walk."""
        from elftools.dwarf.die import DIE

        data = self.file._info_bytes()
        if data is not None:
            try:
                offsets = list(scan.top_level(self.cu, data, _SUBPROGRAM, self.addresses))
            except (scan.Unknown, IndexError, KeyError):
                offsets = None
            if offsets is not None:
                stream = self.file.dwarf.debug_info_sec.stream
                for off in offsets:
                    yield DIE(self.cu, stream, off)
                return
        for die in self.cu.iter_DIE_children(self.top):
            if die.tag == "DW_TAG_subprogram":
                yield die

    def functions(self) -> Iterator[DwarfFunction]:
        for die in self._subprograms():
            attrs = die.attributes
            if "DW_AT_declaration" in attrs:
                continue
            if "DW_AT_low_pc" not in attrs and "DW_AT_ranges" not in attrs:
                continue  # only inlined, or only declared
            origin = self._origin(die)
            name = _name(die) or (origin is not None and _name(origin)) or ""
            if not name or (self.wanted is not None and name not in self.wanted):
                continue
            address = self._entry(die, name)
            if address is None:
                continue
            yield self._function(die, origin, name, address)

    def _origin(self, die):
        for key in ("DW_AT_abstract_origin", "DW_AT_specification"):
            if key in die.attributes:
                target = die.get_DIE_from_attribute(key)
                # An origin may itself point further (a specification of a declaration).
                if "DW_AT_name" not in target.attributes and \
                        "DW_AT_specification" in target.attributes:
                    target = target.get_DIE_from_attribute("DW_AT_specification")
                return target
        return None

    def _entry(self, die, name: str) -> int | None:
        """The entry PC: DW_AT_low_pc, or among DW_AT_ranges the start that has the symbol."""
        low = self._addr(die, "DW_AT_low_pc")
        if low is not None:
            return low
        entry = self._addr(die, "DW_AT_entry_pc")
        starts = self._range_starts(die)
        for start in starts:
            if name in self.symbols.get(start, ()):
                return start
        if entry is not None:
            return entry
        return starts[0] if starts else None

    def _range_starts(self, die) -> list[int]:
        attr = die.attributes["DW_AT_ranges"]
        ranges = self.file.dwarf.range_lists()
        if ranges is None:
            return []
        # (a DW_FORM_rnglistx index is already an offset: pyelftools translates it)
        entries = ranges.get_range_list_at_offset(attr.value, cu=self.cu)
        base = self.base
        starts = []
        for e in entries:
            if hasattr(e, "base_address"):
                base = e.base_address
            elif e.begin_offset != e.end_offset:
                starts.append(e.begin_offset if e.is_absolute else base + e.begin_offset)
        return starts

    def _function(self, die, origin, name: str, address: int) -> DwarfFunction:
        base = self._frame_base(die, address)
        concrete = {}
        order = []
        variadic = False
        for child in self.cu.iter_DIE_children(die):
            if child.tag == "DW_TAG_formal_parameter":
                key = child.attributes.get("DW_AT_abstract_origin")
                order.append(child)
                if key is not None:
                    concrete[child.get_DIE_from_attribute("DW_AT_abstract_origin").offset] = child
            elif child.tag == "DW_TAG_unspecified_parameters":
                variadic = True
        params = []
        if origin is not None and "DW_AT_abstract_origin" in die.attributes:
            # An out-of-line instance: the abstract function lists every parameter; the
            # instance lists those it has a location for.
            for abstract in origin.cu.iter_DIE_children(origin):
                if abstract.tag == "DW_TAG_formal_parameter":
                    params.append(self._param(concrete.get(abstract.offset), abstract,
                                              base, address))
                elif abstract.tag == "DW_TAG_unspecified_parameters":
                    variadic = True
        else:
            params = [self._param(c, c, base, address) for c in order]
        return DwarfFunction(name, address, tuple(self.symbols.get(address, ())), tuple(params),
                             variadic, self.cu.cu_offset)

    def _frame_base(self, die, address: int) -> FrameBase:
        attr = die.attributes.get("DW_AT_frame_base")
        if attr is None:
            return FrameBase(None, "no frame base")
        expr, _ = self._expr_at(attr, die, address)
        if expr is None:
            return FrameBase(None, "no frame base at entry")
        return frame_base(self.expr.parse_expr(expr), self.facts)

    def _param(self, concrete, declared, base: FrameBase, address: int) -> DwarfParam:
        name = _name(declared) or ""
        if not name and "DW_AT_abstract_origin" in declared.attributes:
            name = _name(declared.get_DIE_from_attribute("DW_AT_abstract_origin")) or ""
        typed = declared
        if "DW_AT_type" not in typed.attributes and "DW_AT_abstract_origin" in typed.attributes:
            typed = typed.get_DIE_from_attribute("DW_AT_abstract_origin")
        size = self._size_of_type(typed)
        if concrete is None:
            return DwarfParam(name, size, EntryLocation(unknown="optimized out (no DIE)"))
        attr = concrete.attributes.get("DW_AT_location")
        if attr is None:
            why = "a constant" if "DW_AT_const_value" in concrete.attributes else \
                "optimized out (no location)"
            return DwarfParam(name, size, EntryLocation(unknown=why))
        expr, whole = self._expr_at(attr, concrete, address)
        if expr is None:
            return DwarfParam(name, size, EntryLocation(
                unknown="no location at the first instruction"), whole)
        ops = self.expr.parse_expr(expr)
        loc = entry_location(ops, size or 0, self.facts, base, self.pointer_size, whole)
        return DwarfParam(name, size, loc, whole)

    def _expr_at(self, attr, die, address: int) -> tuple[list[int] | None, bool]:
        """The expression valid at `address`: (bytes or None, True when it is a single
        expression for the whole function)."""
        form = attr.form
        if form == "DW_FORM_exprloc" or (self.version < 4 and form.startswith("DW_FORM_block")):
            return attr.value, True
        if self.file._loclists is None:
            return None, False
        # pyelftools has already turned a DW_FORM_loclistx index into the list's offset.
        entries = self.file._loclists.get_location_list_at_offset(attr.value, die=die)
        base = self.base
        default = None
        for e in entries:
            if hasattr(e, "base_address"):
                base = e.base_address
                continue
            if not hasattr(e, "begin_offset"):
                continue
            if e.begin_offset == -1:
                default = e.loc_expr
                continue
            begin = e.begin_offset if e.is_absolute else base + e.begin_offset
            end = e.end_offset if e.is_absolute else base + e.end_offset
            if begin <= address < end:
                return e.loc_expr, False
        return default, False

    def _size_of_type(self, die) -> int | None:
        if "DW_AT_type" not in die.attributes:
            return None
        return self._size(die.get_DIE_from_attribute("DW_AT_type"), 0)

    def _size(self, die, depth: int) -> int | None:
        if die.offset in self.sizes:
            return self.sizes[die.offset]
        if depth > 64:
            raise DwarfError(f"{self.file.path}: .debug_info+{die.offset:#x}: type chain "
                             f"too deep (a cycle?)")
        attrs = die.attributes
        size: int | None
        if "DW_AT_byte_size" in attrs and isinstance(attrs["DW_AT_byte_size"].value, int):
            size = attrs["DW_AT_byte_size"].value
        elif die.tag in _POINTERS:
            size = self.pointer_size
        elif die.tag in _QUALIFIERS:
            size = None
            if "DW_AT_type" in attrs:
                size = self._size(die.get_DIE_from_attribute("DW_AT_type"), depth + 1)
        elif die.tag == "DW_TAG_array_type":
            size = self._array_size(die, depth)
        else:
            size = None
        self.sizes[die.offset] = size
        return size

    def _array_size(self, die, depth: int) -> int | None:
        elem = self._size(die.get_DIE_from_attribute("DW_AT_type"), depth + 1)
        if elem is None:
            return None
        total = elem
        for sub in die.iter_children():
            if sub.tag != "DW_TAG_subrange_type":
                continue
            a = sub.attributes
            if "DW_AT_count" in a and isinstance(a["DW_AT_count"].value, int):
                total *= a["DW_AT_count"].value
            elif "DW_AT_upper_bound" in a and isinstance(a["DW_AT_upper_bound"].value, int):
                total *= a["DW_AT_upper_bound"].value + 1
            else:
                return 0  # a flexible array member: no bytes of its own
        return total


def _name(die) -> str | None:
    attr = die.attributes.get("DW_AT_name")
    if attr is None:
        return None
    value = attr.value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def elf_machine(path: str | Path) -> str | None:
    """An ELF file's e_machine ("EM_386"), or None when it is not a readable ELF file."""
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            return str(ELFFile(f)["e_machine"])
    except Exception:  # noqa: BLE001 - the caller says what it needed
        return None


def has_dwarf(path: str | Path) -> bool:
    """Whether `path` is an ELF file with a .debug_info section (cheap: section headers only)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return False
            from elftools.elf.elffile import ELFFile

            f.seek(0)
            return ELFFile(f).get_section_by_name(".debug_info") is not None
    except Exception:  # noqa: BLE001 - not a readable ELF: the caller reports it as BTF input
        return False


