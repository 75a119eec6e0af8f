"""Small ELF files with each case of a probe site, built here by gcc: a versioned library
with an alias, an IFUNC, static functions and a stripped copy; a runnable library like
libc.so.6; PIEs old and new; a fixed-address program."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

NEEDED = ("gcc", "nm", "strip", "objdump")


def skip_reason() -> str | None:
    """Why the samples cannot be built here: the interpreter path and the checks are x86_64's."""
    if platform.machine() != "x86_64":
        return f"the samples are x86_64 files, this is {platform.machine()}"
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    return f"not installed: {', '.join(missing)}" if missing else None

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
HEADER = "int plain(int x);\nint also_plain(int x);\nint versioned(int x);\n" \
         "int chosen(int x);\nint uses_helper(int x);\nint work(int x);\n"
# As glibc makes libc.so.6 runnable: ld gives a -shared link no PT_INTERP of its own.
INTERP = '__attribute__((section(".interp"))) const char interp[] = ' \
         '"/lib64/ld-linux-x86-64.so.2";\n'


def _gcc(out: Path, *args: str) -> Path:
    proc = subprocess.run(["gcc", "-O2", *args, "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def build(d: Path) -> dict[str, Path]:
    (d / "lib.c").write_text(LIBRARY)
    (d / "other.c").write_text(OTHER_FILE)
    (d / "lib.map").write_text(VERSIONS)
    (d / "prog.c").write_text(PROGRAM)
    (d / "interp.c").write_text(INTERP)
    (d / "lib.h").write_text(HEADER)
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
            "pie": pie, "fixed": fixed, "text": text, "header": d / "lib.h"}
