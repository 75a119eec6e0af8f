"""Where `btfgen trace` puts a uprobe in a shared library or program (btfgen.trace.symbols), and
whether it runs the file or only probes it: checked on small libraries gcc builds here with each
case (symbol versions, aliases, an IFUNC, a stripped copy, static functions) against binutils'
own reading (nm), and on this machine's glibc."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from btfgen.trace import symbols

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None,
                                reason="needs gcc and binutils")

LIBRARY = r"""
int plain(int x) { return x + 1; }
int also_plain(int x) __attribute__((alias("plain")));
/* versioned@V1 for programs linked before V2, versioned@@V2 for those linked since */
int old_impl(int x) { return x + 2; }
int new_impl(int x) { return x + 3; }
__asm__(".symver old_impl, versioned@V1");
__asm__(".symver new_impl, versioned@@V2");
/* only non-default versions left, at two addresses */
int gone1(int x) { return x + 4; }
int gone2(int x) { return x + 5; }
__asm__(".symver gone1, gone@V1");
__asm__(".symver gone2, gone@V2");
static int fast(int x) { return x * 2; }
static void *pick(void) { return (void *)fast; }
int chosen(int x) __attribute__((ifunc("pick")));
static int __attribute__((noipa)) helper(int x) { return x - 1; }
int uses_helper(int x) { return helper(x) + 1; }
"""
# A static function named like the exported one, in another file of the same library.
OTHER_FILE = r"""
static int __attribute__((noipa)) plain(int x) { return x * 7; }
int calls_static(int x) { return plain(x); }
"""
VERSIONS = "V1 { global: plain; also_plain; chosen; uses_helper; versioned; gone; " \
           "calls_static; local: *; };\nV2 { } V1;\n"
PROGRAM = "int __attribute__((noipa)) work(int x) { return x + 1; }\n" \
          "int main(int argc, char **argv) { return work(argc) - 2; }\n"
# As glibc makes libc.so.6 runnable: ld gives a -shared link no PT_INTERP of its own.
INTERP = '__attribute__((section(".interp"))) const char interp[] = ' \
         '"/lib64/ld-linux-x86-64.so.2";\n'
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def _gcc(out: Path, *args: str) -> Path:
    proc = subprocess.run(["gcc", "-O2", *args, "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("symbols")
    (d / "lib.c").write_text(LIBRARY)
    (d / "other.c").write_text(OTHER_FILE)
    (d / "lib.map").write_text(VERSIONS)
    (d / "prog.c").write_text(PROGRAM)
    (d / "interp.c").write_text(INTERP)
    lib = _gcc(d / "libsymt.so.1", "-fPIC", "-shared", f"-Wl,--version-script={d}/lib.map",
               "-Wl,-soname,libsymt.so.1", str(d / "lib.c"), str(d / "other.c"))
    stripped = d / "libsymt-stripped.so.1"
    shutil.copyfile(lib, stripped)
    subprocess.run(["strip", "--strip-all", str(stripped)], check=True)
    # libc.so.6's shape: a library with an interpreter and an entry point, runnable
    runnable = _gcc(d / "librun.so", "-fPIC", "-shared", "-Wl,-soname,librun.so",
                    "-Wl,-e,main", str(d / "prog.c"), str(d / "interp.c"))
    # the same without a soname: how a PIE looked before linkers set DF_1_PIE
    old_pie = _gcc(d / "old-pie", "-fPIC", "-shared", "-Wl,-e,main", str(d / "prog.c"),
                   str(d / "interp.c"))
    pie = _gcc(d / "pie", "-fPIE", "-pie", str(d / "prog.c"))
    fixed = _gcc(d / "fixed", "-fno-PIE", "-no-pie", str(d / "prog.c"))
    text = d / "script.sh"
    text.write_text("#!/bin/sh\n")
    return {"lib": lib, "stripped": stripped, "runnable": runnable, "old_pie": old_pie,
            "pie": pie, "fixed": fixed, "text": text}


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
    assert symbols.file_kind(str(built[name])) == symbols.FileKind(library, why)


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
