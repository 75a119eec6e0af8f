"""Running libclang: the index, the command line for a target, and diagnostics as HeaderError.

Everything that touches `clang.cindex` directly beyond cursors and types lives here, so a newer
or older binding only has to be accommodated in one place.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
from ctypes import c_uint
from pathlib import Path

from btfgen.errors import HeaderError

from .targets import ClangTarget

try:
    from clang import cindex
except ImportError:  # pragma: no cover - libclang is a declared dependency
    cindex = None


def _require() -> None:
    if cindex is None:
        raise HeaderError("libclang: the Python package 'libclang' is not installed")


@functools.cache
def _lib():
    """The loaded libclang, with the few entry points the bindings do not wrap (libclang ≥ 16)."""
    _require()
    lib = cindex.conf.lib
    for name, argtypes, restype in (
        ("clang_Cursor_isAnonymousRecordDecl", [cindex.Cursor], c_uint),
        ("clang_getUnqualifiedType", [cindex.Type], cindex.Type),
        ("clang_Type_getModifiedType", [cindex.Type], cindex.Type),
        ("clang_Type_getValueType", [cindex.Type], cindex.Type),
    ):
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
    return lib


def is_anonymous_member(record: cindex.Cursor) -> bool:
    """`struct { union { int a; }; }`: the union is a member without a name of its own."""
    return bool(_lib().clang_Cursor_isAnonymousRecordDecl(record))


# Type kinds some versions of the bindings do not register (their `Type.kind` then raises).
_EXTRA_KINDS = {32: "FLOAT16", 163: "ATTRIBUTED", 177: "ATOMIC", 178: "BTFTAGATTRIBUTED"}


def kind_of(t: cindex.Type) -> str:
    """The type's kind as the name of a CXTypeKind without its prefix ("POINTER", "ATOMIC")."""
    kind_id = t._kind_id
    name = _EXTRA_KINDS.get(kind_id)
    if name is not None:
        return name
    try:
        return cindex.TypeKind.from_id(kind_id).name
    except ValueError:
        return f"KIND{kind_id}"


def _derived(fn, t: cindex.Type) -> cindex.Type:
    result = fn(t)
    result._tu = t._tu  # the bindings keep the translation unit alive through this field
    return result


def unqualified(t: cindex.Type) -> cindex.Type:
    return _derived(_lib().clang_getUnqualifiedType, t)


def modified(t: cindex.Type) -> cindex.Type:
    """`int __attribute__((x))` → int."""
    return _derived(_lib().clang_Type_getModifiedType, t)


def atomic_value(t: cindex.Type) -> cindex.Type:
    """`_Atomic(int)` → int."""
    return _derived(_lib().clang_Type_getValueType, t)


@functools.cache
def resource_dir() -> str | None:
    """Clang's own headers (stddef.h, stdint.h, stdbool.h): the pip wheel ships libclang.so
    without them, so borrow an installed clang's."""
    env = os.environ.get("BTFGEN_CLANG_RESOURCE_DIR")
    if env:
        return env
    for clang in ("clang", *(f"clang-{v}" for v in range(30, 13, -1))):
        path = shutil.which(clang)
        if path is None:
            continue
        try:
            out = subprocess.run([path, "-print-resource-dir"], capture_output=True, text=True,
                                 timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out and Path(out, "include", "stddef.h").exists():
            return out
    found = sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/include/stddef.h"))
    return str(Path(found[-1]).parent.parent) if found else None


def command_line(target: ClangTarget, include_dirs, defines) -> list[str]:
    args = ["-x", "c", "-std=gnu11", "-target", target.triple, "-ferror-limit=0"]
    rdir = resource_dir()
    if rdir:
        args += ["-resource-dir", rdir]
    # The system headers must be the target's too: the host's own where the host is (or has
    # the :arch packages of) the target, else a Debian cross libc's, else none at all, so that
    # <stdio.h> is "not found" rather than silently the host's. Clang's own headers (stddef.h,
    # stdint.h, stdbool.h, ...) stay available for every target.
    if not Path("/usr/include", target.multiarch).is_dir():
        args.append("-nostdlibinc")
        for name in target.cross:
            cross = Path("/usr", name, "include")
            if cross.is_dir():
                args += ["-isystem", str(cross)]
                break
    args += [f"-I{d}" for d in include_dirs]
    args += [f"-D{d}" for d in defines]
    return args


# CXTranslationUnit_IncludeAttributedTypes: without it libclang hands out the type under an
# attribute (`const char __user` with __user a btf_type_tag) with the qualifiers dropped.
_INCLUDE_ATTRIBUTED_TYPES = 0x1000


def parse(source_name: str, source: str, args: list[str]) -> cindex.TranslationUnit:
    """Parse `source` (an in-memory file that includes the headers); errors → HeaderError."""
    _require()
    _lib()
    index = cindex.Index.create()
    try:
        tu = index.parse(source_name, args=args, unsaved_files=[(source_name, source)],
                         options=cindex.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES
                         | _INCLUDE_ATTRIBUTED_TYPES)
    except cindex.TranslationUnitLoadError as e:
        raise HeaderError(f"{source_name}: libclang could not parse ({e})") from None
    errors = [d for d in tu.diagnostics if d.severity >= cindex.Diagnostic.Error]
    if errors:
        first = errors[0]
        more = f" ({len(errors) - 1} more)" if len(errors) > 1 else ""
        raise HeaderError(f"{_where(first.location)}: {first.spelling}{more}")
    return tu


def _where(loc) -> str:
    name = loc.file.name if loc.file else "<command line>"
    return f"{name}:{loc.line}:{loc.column}"
