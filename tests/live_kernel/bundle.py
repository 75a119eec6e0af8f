"""Flatten a BPF ELF object into the bundle the in-guest loader reads (guest/loader.c).

The host does the ELF work so the guest program stays small: programs (one per executable
section, with the .text subprograms they call appended), maps (legacy `SEC("maps")` definitions
and one single-entry array per data section, carrying its initial bytes), the relocations that
still need the guest's map fds, and where each program attaches. Attach points come from the
section name: `kprobe/FUNC`, `kretprobe/FUNC`, `kprobe.multi`, `kretprobe.multi` (the functions
and cookies of a multi link are passed in by the caller).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

BPF_MAP_TYPE_ARRAY = 2
R_BPF_64_64 = 1  # ld_imm64 of a map or data address
R_BPF_64_32 = 10  # call of a subprogram
_INSN = 8
_DATA_PREFIXES = (".rodata", ".data", ".bss")


class BundleError(ValueError):
    pass


@dataclass
class _Map:
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int = 0
    init: bytes = b""


@dataclass
class _Prog:
    name: str
    attach: str
    insns: bytearray
    relocs: list[tuple[int, int, int, int]] = field(default_factory=list)  # insn, map, kind, off
    syms: list[tuple[str, int]] = field(default_factory=list)
    text_at: int | None = None  # where .text was appended, once a subprogram call needs it


@dataclass
class _Obj:
    """The parsed object and where its maps ended up."""

    elf: ELFFile
    order: str  # struct byte order of the target
    symtab: object
    rels: dict[str, RelocationSection]  # by the name of the section they relocate
    maps: list[_Map]
    map_of_sym: dict[tuple[int, int], int]  # (section index, offset) -> map index
    data_map: dict[int, int]  # data section index -> map index

    def index(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.elf.iter_sections()) if s.name == name), None)


def make(obj: bytes, multi: list[tuple[str, int]] | None = None) -> bytes:
    """The bundle for the object; `multi` lists (function, cookie) for kprobe.multi programs."""
    elf = ELFFile(io.BytesIO(obj))
    if elf["e_machine"] != "EM_BPF":
        raise BundleError(f"not a BPF object: {elf['e_machine']}")
    order = "<" if elf.little_endian else ">"
    symtab = elf.get_section_by_name(".symtab")
    rels = {
        elf.get_section(s["sh_info"]).name: s
        for s in elf.iter_sections()
        if isinstance(s, RelocationSection)
    }
    o = _Obj(elf, order, symtab, rels, *_maps(elf, symtab, order))
    progs = []
    for i, sec in enumerate(elf.iter_sections()):
        if not sec["sh_flags"] & 0x4 or sec.name == ".text" or not sec.data_size:
            continue
        prog = _Prog(_prog_name(symtab, i, sec.name), _attach(sec.name), bytearray(sec.data()))
        if prog.attach.endswith(".multi"):
            prog.syms = list(multi or [])
        _relocate(o, prog, sec.name, 0)
        progs.append(prog)
    if not progs:
        raise BundleError("no program sections")
    return _serialize(order, o.maps, progs)


def _maps(elf, symtab, order):
    maps: list[_Map] = []
    map_of_sym: dict[tuple[int, int], int] = {}  # (section index, offset) -> map index
    data_map: dict[int, int] = {}  # data section index -> map index
    legacy = elf.get_section_by_name("maps")
    if legacy is not None:
        idx = next(i for i, s in enumerate(elf.iter_sections()) if s.name == "maps")
        raw = legacy.data()
        for sym in symtab.iter_symbols():
            if sym["st_shndx"] != idx:
                continue
            off = sym["st_value"]
            fields = struct.unpack_from(order + "5I", raw, off)
            map_of_sym[(idx, off)] = len(maps)
            maps.append(_Map(sym.name, *fields))
    btf_maps = elf.get_section_by_name(".maps")
    if btf_maps is not None:
        idx = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".maps")
        # Clang leaves DATASEC offsets for the loader to fill in: place maps by their symbols.
        where = {sym.name: sym["st_value"] for sym in symtab.iter_symbols()
                 if sym["st_shndx"] == idx}
        for m in _btf_maps(elf):
            if m.name not in where:
                raise BundleError(f".maps: no symbol for map {m.name!r}")
            map_of_sym[(idx, where[m.name])] = len(maps)
            maps.append(m)
    for i, sec in enumerate(elf.iter_sections()):
        if sec.name.startswith(_DATA_PREFIXES) and sec["sh_flags"] & 0x2 and sec.data_size:
            init = b"" if sec["sh_type"] == "SHT_NOBITS" else sec.data()
            data_map[i] = len(maps)
            # A single-element array whose value is the whole section, as libbpf makes it.
            maps.append(
                _Map(sec.name[:15], BPF_MAP_TYPE_ARRAY, 4, sec.data_size, 1,
                     init=init or bytes(sec.data_size))
            )
    return maps, map_of_sym, data_map


def _btf_maps(elf) -> list[_Map]:
    """BTF-defined maps: each variable of DATASEC ".maps" is a struct whose members encode the
    attributes in their types (`__uint(type, 2)` is `int (*type)[2]`, `__type(key, T)` is
    `T *key`), as libbpf reads them."""
    from btfgen.btf import measure, walk
    from btfgen.btf import types as T
    from btfgen.btf.reader import load_btf

    sec = elf.get_section_by_name(".BTF")
    if sec is None:
        raise BundleError(".maps section but no .BTF: compile with -g")
    table = load_btf("bpf object .BTF", sec.data())
    out = []
    for dsec in table.find_types(".maps", kind=T.Kind.DATASEC):
        for vs in dsec.vars:
            var = table[vs.type_id]
            st = walk.strip(var.type)
            attrs = {"type": 0, "max_entries": 0, "map_flags": 0, "key_size": 0, "value_size": 0}
            for mem in st.members:
                mt = walk.strip(mem.type)
                if mem.name in attrs and isinstance(mt, T.Ptr):
                    attrs[mem.name] = walk.strip(mt.type).nelems
                elif mem.name in ("key", "value") and isinstance(mt, T.Ptr):
                    attrs[f"{mem.name}_size"] = measure.size_of(mt.type)
            out.append(_Map(var.name, attrs["type"], attrs["key_size"], attrs["value_size"],
                            attrs["max_entries"], attrs["map_flags"]))
    return out


def _relocate(o: _Obj, prog: _Prog, section: str, base: int) -> None:
    """Record a section's relocations (its code at instruction `base` of the program),
    appending .text once when a subprogram in it is called."""
    rel = o.rels.get(section)
    if rel is None:
        return
    text_idx = o.index(".text")
    for r in rel.iter_relocations():
        sym = o.symtab.get_symbol(r["r_info_sym"])
        at = base + r["r_offset"] // _INSN
        kind = r["r_info_type"]
        shndx = sym["st_shndx"]
        where = f"{rel.name}+{r['r_offset']:#x}"
        imm = struct.unpack_from(o.order + "i", prog.insns, at * _INSN + 4)[0]
        if kind == R_BPF_64_64:
            if (shndx, sym["st_value"]) in o.map_of_sym:
                prog.relocs.append((at, o.map_of_sym[(shndx, sym["st_value"])], 1, 0))
            elif shndx in o.data_map:
                # the addend is in the instruction (section symbols) or the symbol (objects)
                prog.relocs.append((at, o.data_map[shndx], 2, imm + sym["st_value"]))
            else:
                raise BundleError(f"{where}: ld_imm64 of {sym.name!r} in no map or data section")
        elif kind == R_BPF_64_32:
            if shndx != text_idx:
                raise BundleError(f"{where}: call of {sym.name!r} outside .text")
            if prog.text_at is None:
                prog.text_at = len(prog.insns) // _INSN
                prog.insns += o.elf.get_section(text_idx).data()
                _relocate(o, prog, ".text", prog.text_at)
            # As libbpf: the callee is symbol value / 8 + imm + 1 instructions into .text.
            target = prog.text_at + sym["st_value"] // _INSN + imm + 1
            struct.pack_into(o.order + "i", prog.insns, at * _INSN + 4, target - (at + 1))
        else:
            raise BundleError(f"{where}: relocation type {kind} not handled")


def _prog_name(symtab, idx: int, section: str) -> str:
    for sym in symtab.iter_symbols():
        if sym["st_shndx"] == idx and sym["st_info"]["type"] == "STT_FUNC":
            return sym.name
    return section.replace("/", "_")[:63]


def _attach(section: str) -> str:
    kind, _, func = section.partition("/")
    if kind in ("kprobe.multi", "kretprobe.multi"):
        return kind
    if kind in ("kprobe", "kretprobe") and func:
        return f"{kind}:{func}"
    raise BundleError(f"section {section!r}: not kprobe/FUNC, kretprobe/FUNC or k[ret]probe.multi")


def _serialize(order: str, maps: list[_Map], progs: list[_Prog]) -> bytes:
    out = bytearray()

    def put(b: bytes) -> None:
        out.extend(b)
        out.extend(bytes(-len(b) % 8))

    def name(s: str, n: int) -> bytes:
        return s.encode()[: n - 1].ljust(n, b"\0")

    put(b"BTFGBNDL")
    put(struct.pack(order + "I", len(maps)))
    put(struct.pack(order + "I", len(progs)))
    for m in maps:
        put(name(m.name, 32))
        for v in (m.type, m.key_size, m.value_size, m.max_entries, m.flags, len(m.init)):
            put(struct.pack(order + "I", v))
        if m.init:
            put(m.init)
    for p in progs:
        put(name(p.name, 64))
        put(name(p.attach, 128))
        for v in (len(p.insns) // _INSN, len(p.relocs), len(p.syms)):
            put(struct.pack(order + "I", v))
        put(bytes(p.insns))
        if p.relocs:
            put(b"".join(struct.pack(order + "4I", *r) for r in p.relocs))
        if p.syms:
            put(b"".join(name(s, 64) + struct.pack(order + "Q", c) for s, c in p.syms))
    return bytes(out)
