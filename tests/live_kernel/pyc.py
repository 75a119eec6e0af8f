"""Bytecode for the guests' Python, compiled on this machine by Debian's own interpreter.

Debian ships no .pyc files in its Python packages (its postinst compiles them on the installed
system), so a guest's first Python start compiled every module it imported, under TCG: 6.4 s of
riscv64's first start against 1.2 s for the next. Bytecode depends on the Python version only,
not the arch, so the suite's amd64 interpreter, run here through its own dynamic loader, compiles
each guest's modules once. The .pyc files are "unchecked-hash" ones: the guest loads them
without comparing its sources' times (an initramfs gives every file the time 0), and each is
compiled from exactly the source the guest gets beside it.
"""

from __future__ import annotations

import os
import pickle
import platform
import subprocess
import tempfile
from pathlib import Path

from . import cache

# Run by the guest suite's interpreter: compiles the sources under argv[1] (a tree of guest
# paths) into each one's __pycache__, as the guest would name them.
COMPILE = r"""
import os, py_compile, sys
root = sys.argv[1]
for top, dirs, names in os.walk(root):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    for name in names:
        if name.endswith(".py"):
            src = os.path.join(top, name)
            try:
                py_compile.compile(src, dfile="/" + os.path.relpath(src, root), doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            except py_compile.PyCompileError:
                pass  # a module the guest cannot import either: it says so there
"""


def available() -> bool:
    """Debian's amd64 interpreter runs here (through its own loader and libraries) only on an
    x86_64 machine; elsewhere the guests compile their modules themselves, as before."""
    return platform.machine() == "x86_64"


def compiled(interpreter: Interpreter, sources: dict[str, bytes]) -> dict[str, bytes]:
    """The .pyc files (guest path -> bytes) of `sources` (guest path -> a .py file's bytes);
    cached by what they are made from (a standard library takes ten seconds here)."""
    key = cache.digest(str(interpreter.root), COMPILE, *(x for path in sorted(sources)
                                                for x in (path, sources[path])))
    dest = cache.ROOT / "pyc" / f"{key}.pickle"
    if dest.exists():
        return pickle.loads(dest.read_bytes())
    with tempfile.TemporaryDirectory(prefix="btfgen-pyc-") as tmp:
        root = Path(tmp)
        for path, data in sources.items():
            out = root / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        interpreter.run(["-c", COMPILE, str(root)])
        made = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.pyc")}
    cache.write_atomic(dest, pickle.dumps(made))
    return made


class Interpreter:
    """A suite's amd64 python3.X unpacked under the cache, run by its own ld.so with its own
    libraries: no Debian installation of that suite is needed on this machine."""

    def __init__(self, key: str, files: dict[str, tuple[bytes, int]], links: dict[str, str],
                 python: str):
        self.root = cache.ROOT / "host-python" / key
        self.python = python
        if not (self.root / ".complete").exists():
            self._unpack(files, links)

    def _unpack(self, files: dict[str, tuple[bytes, int]], links: dict[str, str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for path, (data, mode) in files.items():
            dest = self.root / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            cache.write_atomic(dest, data)
            dest.chmod(mode)
        for path, target in links.items():
            dest = self.root / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.symlink(target, dest)
            except FileExistsError:
                pass  # made by a run alongside, or by this one before it was cut short
        (self.root / ".complete").write_bytes(b"")

    def run(self, args: list[str]) -> str:
        lib = self.root / "usr/lib/x86_64-linux-gnu"
        env = {"PYTHONHOME": str(self.root / "usr"), "PATH": os.environ.get("PATH", "/usr/bin")}
        proc = subprocess.run(
            [str(lib / "ld-linux-x86-64.so.2"), "--library-path", str(lib),
             str(self.root / self.python.lstrip("/")), "-s", "-S", *args],
            capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.python} (unpacked in {self.root}) failed: "
                               f"{proc.stderr.strip()[-2000:]}")
        return proc.stdout
