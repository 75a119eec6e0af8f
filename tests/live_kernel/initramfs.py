"""A gzip'd newc cpio archive written directly, so modes and device nodes need no root or cpio(1).

The kernel unpacks it into rootfs and runs /init; /dev/console must exist in it or the first
process starts without a console and everything it prints is lost.
"""

from __future__ import annotations

import gzip
import stat
from dataclasses import dataclass, field


@dataclass
class Initramfs:
    _entries: dict[str, tuple[int, bytes, int]] = field(default_factory=dict)  # mode, data, rdev

    def dir(self, path: str) -> None:
        self._entries[path.strip("/")] = (stat.S_IFDIR | 0o755, b"", 0)

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._parents(path)
        self._entries[path.strip("/")] = (stat.S_IFREG | mode, data, 0)

    def symlink(self, path: str, target: str) -> None:
        self._parents(path)
        self._entries[path.strip("/")] = (stat.S_IFLNK | 0o777, target.encode(), 0)

    def chardev(self, path: str, major: int, minor: int) -> None:
        self._parents(path)
        self._entries[path.strip("/")] = (stat.S_IFCHR | 0o600, b"", (major << 8) | minor)

    def _parents(self, path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self._entries.setdefault("/".join(parts[:i]), (stat.S_IFDIR | 0o755, b"", 0))

    def cpio(self) -> bytes:
        out = bytearray()
        # Sorted: parents precede children and the archive is byte-identical run to run.
        for ino, name in enumerate(sorted(self._entries), start=1):
            mode, data, rdev = self._entries[name]
            _member(out, ino, name, mode, data, rdev)
        _member(out, 0, "TRAILER!!!", 0, b"", 0)
        return bytes(out)

    def gz(self) -> bytes:
        return gzip.compress(self.cpio(), compresslevel=1, mtime=0)


def _member(out: bytearray, ino: int, name: str, mode: int, data: bytes, rdev: int) -> None:
    encoded = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev >> 8, rdev & 0xFF, len(encoded), 0)
    out += b"070701" + b"".join(b"%08X" % v for v in fields)
    out += encoded
    out += b"\0" * (-len(out) % 4)
    out += data
    out += b"\0" * (-len(out) % 4)
