"""Debian's own Python and libbpf for a guest: just the files of the few packages that a
standard-library program using libbpf through ctypes loads, as initramfs files and links.

The packages are the suite's current ones for the target's arch (python3.X-minimal for the
interpreter, libpython3.X-minimal/-stdlib for the library and ctypes, libffi for ctypes, libbpf1
and what it links: libelf, zlib, zstd; libc6 and expat). Documentation, the test suite and
modules nothing here imports (tkinter, idlelib, ...) stay out to keep the initramfs small.
"""

from __future__ import annotations

import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import cache, debian, pyc
from . import kernel as kernels
from .guest import Guest
from .targets import TARGETS, Target

# Members taken from each package: programs and shared libraries, the Python library. Before
# Debian merged /usr into its packages (bookworm), libc6, zlib1g, ... put theirs in /lib.
_WANTED = re.compile(r"^\./(usr/bin/python3\.\d+$|(usr/)?lib(64|32)?/)")
_UNWANTED = re.compile(
    r"/(test|tests|idlelib|tkinter|turtledemo|ensurepip|lib2to3|pydoc_data|config-3[^/]*|"
    r"gconv|__phello__|sqlite3|curses|dbm)/|\.a$|/audit/|"
    r"/lib-dynload/_(test|codecs_|remote_debugging|ctypes_test|xxtestfuzz)"
)


@dataclass
class Files:
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    python: str = ""  # the interpreter's path in the guest


def python_version(apt: debian.Apt) -> str:
    fields = apt.show("python3-minimal")
    m = re.match(r"(\d+\.\d+)", (fields or {}).get("Version", ""))
    if not m:
        raise debian.PackageError(f"apt {apt.suite}/{apt.arch}: no python3-minimal version")
    return m.group(1)


def packages(apt: debian.Apt) -> list[str]:
    v = python_version(apt)
    libelf = "libelf1t64" if apt.show("libelf1t64") else "libelf1"
    return [f"python{v}-minimal", f"libpython{v}-minimal", f"libpython{v}-stdlib", "libffi8",
            "libbpf1", libelf, "zlib1g", "libzstd1", "libc6", "libexpat1", "libgcc-s1",
            "libatomic1",  # the ring reader's memory fence (probe/ringspan.py)
            "libdeflate0"]  # a recording's CRC-32 at the write's pace (probe/crc.py)


def files(target: Target) -> Files:
    """The guest's Python files, its standard library's bytecode with them (pyc.py); cached
    until the package index is next refreshed (asking apt about a dozen packages costs
    seconds)."""
    if target.name in _files:
        return _files[target.name]
    apt = kernels.apt_for(target)
    apt.update()
    key = cache.digest(apt.suite, apt.arch, str((apt.root / "updated").stat().st_mtime_ns),
                       _WANTED.pattern, _UNWANTED.pattern, *packages(apt),
                       pyc.COMPILE if pyc.available() else "no pyc")
    dest = cache.ROOT / "python-guest" / f"{apt.suite}-{apt.arch}-{key}.pickle"
    if dest.exists():
        out = pickle.loads(dest.read_bytes())
    else:
        out = _collect(apt)
        compiler = _compiler_for(out, apt.suite, out if apt.arch == "amd64" else None)
        if compiler:
            stdlib = {p: data for p, (data, _) in out.files.items() if p.endswith(".py")}
            out.files.update((p, (data, 0o644)) for p, data in
                             pyc.compiled(compiler, stdlib).items())
        cache.write_atomic(dest, pickle.dumps(out))
    _files[target.name] = out
    return out


# Per process, each target's: finding the cached pickle asks apt about three packages, ~2 s.
_files: dict[str, Files] = {}


def compiler(target: Target) -> pyc.Interpreter | None:
    """What compiles the guest's own modules (a trace directory's) for its Python, or None."""
    return _compiler_for(files(target), target.suite, None)


def _compiler_for(guest: Files, suite: str, amd64: Files | None) -> pyc.Interpreter | None:
    """_compiler(), where its Python is the guest's (bytecode is made per version)."""
    c = _compiler(suite, amd64)
    return c if c and c.python == guest.python else None


def _compiler(suite: str, amd64: Files | None) -> pyc.Interpreter | None:
    """The suite's amd64 interpreter, to compile for its guests of every arch (the same
    Python version, which bytecode depends on); None where it cannot run here."""
    if not pyc.available():
        return None
    host = amd64 or files(TARGETS[f"{suite}-amd64"])
    binary = host.files[host.python.lstrip("/")][0]
    return pyc.Interpreter(f"{suite}-{cache.digest(binary)}", host.files, host.links,
                           host.python)


def _collect(apt: debian.Apt) -> Files:
    out = Files()
    for package in packages(apt):
        deb = apt.download(package)
        root = cache.ROOT / "unpacked" / deb.stem
        for path in debian.extract(deb, _WANTED.pattern):
            rel = str(path.relative_to(root))
            if _UNWANTED.search("/" + rel):
                continue
            if rel.startswith("lib"):  # /lib/... of an unmerged package: merged as Debian does
                rel = "usr/" + rel
            if path.is_symlink():
                out.links[rel] = os.readlink(path)
            elif path.is_file():
                out.files[rel] = (path.read_bytes(), path.stat().st_mode & 0o777)
    v = python_version(apt)
    out.python = f"/usr/bin/python{v}"
    out.links["usr/bin/python3"] = f"python{v}"
    # Merged /usr: the programs' interpreter paths (/lib64/ld-linux-x86-64.so.2,
    # /lib/ld-linux-aarch64.so.1, ...) go through these.
    for top in ("lib", "lib64", "lib32"):
        if any(p.startswith(f"usr/{top}/") for p in (*out.files, *out.links)):
            out.links.setdefault(top, f"usr/{top}")
    return out


def library_path(target: Target) -> str:
    """Where the guest's shared libraries are: the multiarch directory of the arch."""
    return f"/usr/lib/{_TRIPLETS[target.deb_arch]}"


_TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu",
             "armhf": "arm-linux-gnueabihf", "i386": "i386-linux-gnu",
             "ppc64el": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu",
             "riscv64": "riscv64-linux-gnu"}


def trace_guest(target: Target, directory: Path) -> tuple[Guest, Files]:
    """A guest with Debian's python3 and libbpf, and a `btfgen trace --build` directory at
    /trace; unavailable() where the packages cannot be had."""
    from .conftest import unavailable

    try:
        py = files(target)
    except debian.PackageError as e:
        unavailable(f"{target.name}: Debian's python3/libbpf1 cannot be had: {e}")
    g = Guest(files=dict(py.files), links=dict(py.links))
    add_directory(g, target, directory, "trace")
    return g, py


def directory_files(directory: Path):
    """A trace directory's files as (path relative to it, file), its run-side package's
    included (bytecode this machine made left out)."""
    for f in sorted(directory.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            yield f.relative_to(directory).as_posix(), f


def add_directory(g: Guest, target: Target, directory: Path, at: str) -> None:
    """A `btfgen trace --build` directory's files at /AT in the guest, with the bytecode of its
    modules (pyc.py): what a first run compiled under TCG."""
    sources = {}
    for rel, f in directory_files(directory):
        data = f.read_bytes()
        g.file(f"{at}/{rel}", data, 0o755 if f.suffix == ".py" else 0o644)
        if f.suffix == ".py":
            sources[f"{at}/{rel}"] = data
    c = compiler(target)
    if c and sources:
        for path, data in pyc.compiled(c, sources).items():
            g.file(path, data)
