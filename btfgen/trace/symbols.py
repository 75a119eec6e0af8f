"""Where `btfgen trace` probes a user function, and what the traced file is: build side only
(pyelftools). A uprobe is placed at a file offset; this finds it from a function's symbol the way
the dynamic linker binds a call to that name, and refuses what a probe would get wrong.

- Symbol versions: glibc keeps old versions of some functions beside the current one
  (realpath@GLIBC_2.2.5 and realpath@@GLIBC_2.3). A program linked today calls the default
  (@@) version, so that is the one traced; the others are said, not silently dropped.
- IFUNCs (STT_GNU_IFUNC: strlen, memcpy, time in glibc): the symbol is the resolver, which runs
  once when the library is loaded and returns the implementation calls go to. A probe there
  traces the resolver, so it is refused.
- Aliases (open, open64 and __open in glibc are one function): one address, probed once.
- Stripped libraries (Debian's libc): only .dynsym, which is where versions live anyway; a
  .symtab, when there is one, adds the local functions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from btfgen.probe.errors import BadInput

DF_1_PIE = 0x08000000  # DT_FLAGS_1: linked as a position-independent executable
VERSYM_HIDDEN = 0x8000  # .gnu.version: not the default version (name@VER, not name@@VER)
STT_GNU_IFUNC = 10  # pyelftools spells it STT_LOOS


class SymbolError(BadInput):
    """A file's symbols do not give what was asked: 1, no such function; 2, bad input."""


@dataclass(frozen=True)
class FileKind:
    library: bool  # a shared library: probed, never run by btfgen trace itself
    why: str  # how that was decided, for messages
    machine: str = ""  # e_machine, as pyelftools spells it (EM_X86_64)
    pointer_size: int = 0  # 4 or 8, by the ELF class


@dataclass(frozen=True)
class FunctionSymbol:
    name: str  # as asked
    address: int  # st_value
    offset: int  # in the file: where the uprobe goes
    version: str | None  # GLIBC_2.3, for a versioned symbol
    notes: tuple[str, ...] = ()  # what the user should know about the choice


@dataclass(frozen=True)
class _Candidate:
    address: int
    ifunc: bool
    version: str | None
    default: bool  # the version a call binds to now (no version at all counts as default)
    exported: bool  # in .dynsym, or global in .symtab: not a file's static function


def _elf(f, path: str):
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        return ELFFile(f)
    except ELFError as e:
        raise SymbolError(f"{path}: not an ELF file ({e})") from None


def file_kind(path: str) -> FileKind:
    """A shared library or an executable. e_type alone cannot tell: a PIE is ET_DYN like a
    library, and glibc's libc.so.6 has an interpreter and runs (it prints its banner). Decided
    by, in order: ET_EXEC, the PIE flag, no interpreter (only a library: the kernel would not
    know how to start it), a DT_SONAME (libraries are named for their users; executables are
    not). An ET_DYN with an interpreter and neither flag nor name is a PIE from a linker older
    than DF_1_PIE (binutils 2.33)."""
    with open(path, "rb") as f:
        elf = _elf(f, path)
        library, why = _decided(elf, path)
        return FileKind(library, why, elf["e_machine"], elf.elfclass // 8)


def _decided(elf, path: str) -> tuple[bool, str]:
    """(library, why)"""
    e_type = elf.header["e_type"]
    if e_type == "ET_EXEC":
        return False, "ET_EXEC"
    if e_type != "ET_DYN":
        raise SymbolError(f"{path}: an ELF {e_type} file, neither a program nor a library")
    tags = {}
    dynamic = elf.get_section_by_name(".dynamic")
    segments = list(elf.iter_segments())
    if dynamic is None:
        dynamic = next((s for s in segments if s["p_type"] == "PT_DYNAMIC"), None)
    for tag in dynamic.iter_tags() if dynamic is not None else ():
        tags.setdefault(tag.entry.d_tag, tag.entry.d_val)
    interp = any(s["p_type"] == "PT_INTERP" for s in segments)
    if tags.get("DT_FLAGS_1", 0) & DF_1_PIE:
        return False, "a position-independent executable (DF_1_PIE)"
    if not interp:
        return True, "ET_DYN without an interpreter"
    if "DT_SONAME" in tags:
        return True, "ET_DYN with a DT_SONAME"
    return False, "ET_DYN with an interpreter and no DT_SONAME"


def functions(path: str, names: list[str]) -> list[FunctionSymbol]:
    """Each name's function, in order: SymbolError for a name with no function symbol, or one
    a probe cannot trace."""
    with open(path, "rb") as f:
        elf = _elf(f, path)
        tables = _candidates(elf)
        if not tables:
            raise SymbolError(f"{path}: no symbol table")
        loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        return [_function(path, name, tables.get(name, []), loads) for name in names]


def function_file_offset(path: str, name: str) -> int:
    return functions(path, [name])[0].offset


def aliases(found: list[FunctionSymbol]) -> dict[str, str]:
    """name -> the earlier name of the same function (one address), for each alias."""
    first: dict[int, str] = {}
    out = {}
    for fn in found:
        if fn.offset in first:
            out[fn.name] = first[fn.offset]
        else:
            first[fn.offset] = fn.name
    return out


def _candidates(elf) -> dict[str, list[_Candidate]]:
    """Defined function symbols by name, from .dynsym (with versions) and .symtab."""
    out: dict[str, list[_Candidate]] = {}
    dynsym = elf.get_section_by_name(".dynsym")
    versions = _version_names(elf)
    versym = elf.get_section_by_name(".gnu.version")
    seen = set()
    for table in (dynsym, elf.get_section_by_name(".symtab")):
        if table is None:
            continue
        for i, sym in enumerate(table.iter_symbols()):
            kind = sym["st_info"]["type"]
            ifunc = kind in ("STT_LOOS", "STT_GNU_IFUNC", STT_GNU_IFUNC)
            if not (kind == "STT_FUNC" or ifunc) or sym["st_shndx"] == "SHN_UNDEF" \
                    or not sym["st_value"]:
                continue
            name, version, default = sym.name, None, True
            if table is dynsym and versym is not None:
                ndx = versym.get_symbol(i)["ndx"]
                if isinstance(ndx, int):  # else VER_NDX_LOCAL / VER_NDX_GLOBAL: unversioned
                    version = versions.get(ndx & ~VERSYM_HIDDEN)
                    default = not ndx & VERSYM_HIDDEN
            elif "@" in name:  # .symtab of an unstripped library: name@VER, name@@VER
                name, _, version = name.partition("@")
                default = version.startswith("@")
                version = version.lstrip("@")
            if (name, sym["st_value"], version) in seen:
                continue  # the same symbol in both tables
            seen.add((name, sym["st_value"], version))
            exported = table is dynsym or sym["st_info"]["bind"] != "STB_LOCAL"
            out.setdefault(name, []).append(
                _Candidate(sym["st_value"], ifunc, version, default, exported))
    return out


def _version_names(elf) -> dict[int, str]:
    verdef = elf.get_section_by_name(".gnu.version_d")
    if verdef is None:
        return {}
    return {vd.entry["vd_ndx"]: next(aux).name for vd, aux in verdef.iter_versions()}


def _function(path: str, name: str, found: list[_Candidate], loads) -> FunctionSymbol:
    file = path.rsplit("/", 1)[-1]
    if not found:
        raise SymbolError(f"{path}: no function symbol {name!r}", status=1)
    # A call by name binds to the default version, and to an exported symbol before a file's
    # static function of the same name.
    defaults = [c for c in found if c.default]
    chosen = defaults or found
    chosen = [c for c in chosen if c.exported] or chosen
    addresses = sorted({c.address for c in chosen})
    notes = []
    for c in found:
        if c.default or not defaults or c.address in addresses:
            continue  # the one traced, another name for it, or no default to prefer
        notes.append(f"{name}: tracing {_spell(name, chosen[0])}, the version calls bind to "
                     f"now; {_spell(name, c)} at {c.address:#x} (for programs linked against "
                     "the older version) is not traced")
    if len(addresses) > 1:
        if not defaults:
            raise SymbolError(f"{path}: {name} has only old versions, at different addresses "
                              f"({', '.join(_spell(name, c) for c in chosen)}): which one "
                              "a program calls depends on what it was linked against")
        notes.append(f"{name}: {len(addresses)} functions of that name in {file} (static "
                     f"functions of several files?): tracing the one at {addresses[0]:#x}")
    pick = next(c for c in chosen if c.address == addresses[0])
    if pick.ifunc:
        raise SymbolError(
            f"{name} in {file} is an IFUNC (STT_GNU_IFUNC): its symbol is the resolver, which "
            "runs once when the library is loaded and picks the implementation calls go to; "
            "a probe there would trace the resolver, not the calls (trace the implementation "
            "by its own symbol where the library has one, as glibc's __strlen_avx2 for strlen)")
    for seg in loads:
        if seg["p_vaddr"] <= pick.address < seg["p_vaddr"] + seg["p_memsz"]:
            offset = pick.address - seg["p_vaddr"] + seg["p_offset"]
            return FunctionSymbol(name, pick.address, offset, pick.version, tuple(notes))
    raise SymbolError(f"{path}: {name} at {pick.address:#x} is in no loadable segment")


def _spell(name: str, c: _Candidate) -> str:
    if c.version is None:
        return name
    return f"{name}{'@@' if c.default else '@'}{c.version}"


def locate(name: str) -> tuple[str, str | None]:
    """(the file `btfgen trace` is given, and how a bare name was found or None), as bpftrace
    finds `uprobe:libc:malloc`'s library: an existing file as it is; else a library's soname in
    the dynamic linker's cache (`ldconfig -p`: libc.so.6), a program in PATH (cat), a library's
    short name (c or libc: libc.so.*). Only libraries for this machine's ELF machine count."""
    if os.path.exists(name) or "/" in name:
        return name, None
    cache = _ldconfig()
    exact = _distinct(path for soname, path in cache if soname == name)
    if len(exact) > 1:
        raise SymbolError(f"{name}: several libraries by that name ({', '.join(exact)}): "
                          "give the path of one")
    if exact:
        return exact[0], "ldconfig -p"
    program = shutil.which(name)
    if program:
        return program, "PATH"
    stem = name if name.startswith("lib") else f"lib{name}"
    short = _distinct(path for soname, path in cache if soname.startswith(f"{stem}.so"))
    if len(short) > 1:
        raise SymbolError(f"{name}: several libraries by that name ({', '.join(short)}): "
                          "give the path of one")
    if short:
        return short[0], "ldconfig -p"
    return name, None


def _distinct(paths) -> list[str]:
    """One path per file: the development link libbpf.so and libbpf.so.1 are one library (the
    longer name kept: the soname programs load)."""
    by_file: dict[str, str] = {}
    for path in paths:
        real = os.path.realpath(path)
        if len(path) > len(by_file.get(real, "")):
            by_file[real] = path
    return sorted(by_file.values())


def _ldconfig() -> list[tuple[str, str]]:
    """(soname, path) of the dynamic linker's cache, for this machine's ELF machine and class."""
    # Not in a user's PATH on Debian: it lives in /sbin.
    ldconfig = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if ldconfig is None:
        return []
    try:
        text = subprocess.run([ldconfig, "-p"], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    host = _machine("/proc/self/exe")
    out = []
    for line in text.splitlines()[1:]:
        soname, arrow, path = line.strip().partition(" => ")
        if arrow and host is not None and _machine(path) == host:
            out.append((soname.split(" (")[0], path))
    return out


def _machine(path: str) -> tuple[bytes, bytes] | None:
    """(EI_CLASS and EI_DATA, e_machine) of an ELF file, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return head[4:6], head[18:20]
