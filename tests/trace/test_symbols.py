"""Where `btfgen trace` puts a uprobe in a shared library or program (btfgen.trace.symbols), and
whether it runs the file or only probes it: checked on small libraries gcc builds here with each
case (symbol versions, aliases, an IFUNC, a stripped copy, static functions) against binutils'
own reading (nm), and on this machine's glibc."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import elf_samples
import pytest

from btfgen.trace import symbols

pytestmark = pytest.mark.skipif(bool(elf_samples.skip_reason()),
                                reason=str(elf_samples.skip_reason()))

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    return elf_samples.build(tmp_path_factory.mktemp("symbols"))


def _nm(path: Path, dynamic: bool = True) -> dict[str, int]:
    """binutils' reading: symbol (with its version, as nm spells it) -> address."""
    out = subprocess.run(["nm", *(["-D", "--with-symbol-versions"] if dynamic else []),
                          str(path)], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            table.setdefault(parts[2], int(parts[0], 16))
    return table


def test_the_default_version_is_traced_and_the_older_one_said(built):
    [fn] = symbols.functions(str(built["lib"]), ["versioned"])
    nm = _nm(built["lib"])
    assert fn.address == nm["versioned@@V2"] != nm["versioned@V1"]
    assert fn.version == "V2"
    assert fn.notes == (f"versioned: tracing versioned@@V2, the version calls bind to now; "
                        f"versioned@V1 at {nm['versioned@V1']:#x} (for programs linked "
                        "against the older version) is not traced",)


def test_only_older_versions_at_two_addresses_is_refused(built):
    with pytest.raises(symbols.SymbolError, match=r"gone has only old versions.*gone@V1, "
                                                  r"gone@V2") as e:
        symbols.functions(str(built["lib"]), ["gone"])
    assert e.value.status == 2


def test_an_ifunc_is_refused_not_its_resolver_traced(built):
    assert "i" == subprocess.run(["nm", "-D", str(built["lib"])], capture_output=True,
                                 text=True).stdout.split(" chosen")[0].split()[-1]
    with pytest.raises(symbols.SymbolError, match=r"chosen in libsymt.so.1 is an IFUNC.*"
                                                  r"would trace the resolver") as e:
        symbols.functions(str(built["lib"]), ["chosen"])
    assert e.value.status == 2


def test_aliases_are_one_function(built):
    found = symbols.functions(str(built["lib"]), ["plain", "uses_helper", "also_plain"])
    assert found[0].offset == found[2].offset != found[1].offset
    assert symbols.aliases(found) == {"also_plain": "plain"}


def test_the_exported_function_before_a_static_one_of_its_name(built):
    [fn] = symbols.functions(str(built["lib"]), ["plain"])
    statics = [int(line.split()[0], 16) for line in subprocess.run(
        ["nm", str(built["lib"])], capture_output=True, text=True).stdout.splitlines()
        if line.endswith(" t plain")]
    assert statics and fn.address == _nm(built["lib"])["plain@@V1"] not in statics
    assert fn.notes == ()


def test_a_stripped_library_is_read_from_dynsym(built):
    lib, stripped = str(built["lib"]), str(built["stripped"])
    assert "no symbols" in subprocess.run(["nm", stripped], capture_output=True,
                                          text=True).stderr  # no .symtab left
    names = ["plain", "versioned", "uses_helper"]
    assert [f.offset for f in symbols.functions(stripped, names)] == \
        [f.offset for f in symbols.functions(lib, names)]
    # a static function: in .symtab only
    assert symbols.functions(lib, ["helper"])[0].address == _nm(built["lib"], False)["helper"]
    with pytest.raises(symbols.SymbolError, match="no function symbol 'helper'") as e:
        symbols.functions(stripped, ["helper"])
    assert e.value.status == 1


def test_a_fixed_address_program_offset_is_in_the_file(built):
    # ET_EXEC from 0x400000: the offset is the address less the segment's base
    [fn] = symbols.functions(str(built["fixed"]), ["work"])
    assert fn.address == _nm(built["fixed"], False)["work"]
    with open(built["fixed"], "rb") as f:
        f.seek(fn.offset)
        code = f.read(16)
    objdump = subprocess.run(["objdump", "-d", f"--start-address={fn.address:#x}",
                              f"--stop-address={fn.address + 4:#x}", str(built["fixed"])],
                             capture_output=True, text=True).stdout
    [first] = [line.split("\t")[1].split() for line in objdump.splitlines()
               if line.strip().startswith(f"{fn.address:x}:")]
    assert code[:len(first)].hex() == "".join(first)


@pytest.mark.parametrize("name, library, why", [
    ("lib", True, "ET_DYN without an interpreter"),
    ("runnable", True, "ET_DYN with a DT_SONAME"),
    ("old_pie", False, "ET_DYN with an interpreter and no DT_SONAME"),
    ("pie", False, "a position-independent executable (DF_1_PIE)"),
    ("fixed", False, "ET_EXEC"),
])
def test_library_or_program(built, name, library, why):
    kind = symbols.file_kind(str(built[name]))
    assert (kind.library, kind.why) == (library, why)
    assert (kind.machine, kind.pointer_size) == ("EM_X86_64", 8)


def test_not_elf(built):
    with pytest.raises(symbols.SymbolError, match=r"script.sh: not an ELF file"):
        symbols.file_kind(str(built["text"]))


needs_glibc = pytest.mark.skipif(not os.path.exists(LIBC), reason=f"no {LIBC}")


@needs_glibc
def test_glibc():
    # Debian's libc.so.6: stripped, runnable, versioned; open has two aliases, strlen is an IFUNC
    assert symbols.file_kind(LIBC).library
    found = symbols.functions(LIBC, ["open", "open64", "__open", "openat", "fopen"])
    assert symbols.aliases(found) == {"open64": "open", "__open": "open"}
    assert found[0].address == _nm(Path(LIBC))["open@@GLIBC_2.2.5"]
    with pytest.raises(symbols.SymbolError, match="strlen in libc.so.6 is an IFUNC"):
        symbols.functions(LIBC, ["strlen"])


@needs_glibc
def test_bare_names_as_bpftrace_finds_them(tmp_path, monkeypatch):
    real = os.path.realpath(LIBC)
    for name in ("libc.so.6", "c", "libc"):
        path, how = symbols.locate(name)
        assert (os.path.realpath(path), how) == (real, "ldconfig -p"), name
    assert symbols.locate("cat") == (shutil.which("cat"), "PATH")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cat").write_text("")
    assert symbols.locate("cat") == ("cat", None)  # a file here is what was meant
    assert symbols.locate("no-such-thing-here") == ("no-such-thing-here", None)


def test_bare_names_one_library_per_file_and_two_refused(tmp_path, monkeypatch):
    one, other = tmp_path / "libq.so.1", tmp_path / "libq.so.2"
    one.write_bytes(b"")
    other.write_bytes(b"")
    (tmp_path / "libq.so").symlink_to(one)
    cache = [("libq.so", str(tmp_path / "libq.so")), ("libq.so.1", str(one))]
    monkeypatch.setattr(symbols, "_ldconfig", lambda: cache)
    # the development link and the soname are one library: the soname is what loads
    assert symbols.locate("q") == (str(one), "ldconfig -p")
    cache.append(("libq.so.2", str(other)))
    with pytest.raises(symbols.SymbolError, match=r"q: several libraries by that name"):
        symbols.locate("q")
    cache.append(("libq.so.2", str(one)))  # two paths for one soname, two files
    cache.append(("libq.so.2", str(tmp_path / "elsewhere")))
    with pytest.raises(symbols.SymbolError, match=r"libq.so.2: several libraries"):
        symbols.locate("libq.so.2")
