"""The initramfs writer against the real cpio(1): names, modes, device numbers and contents."""

from __future__ import annotations

import gzip
import shutil
import subprocess

import pytest

from .initramfs import Initramfs


@pytest.mark.skipif(shutil.which("cpio") is None, reason="cpio is not installed")
def test_cpio_reads_what_we_write(tmp_path):
    fs = Initramfs()
    fs.chardev("dev/console", 5, 1)
    fs.file("bin/busybox", b"\x7fELF" + bytes(1001), 0o755)
    fs.file("init", b"#!/bin/busybox sh\n", 0o755)
    fs.file("a/b/c.txt", b"hello\n")
    raw = gzip.decompress(fs.gz())
    listing = subprocess.run(["cpio", "-itv", "--quiet", "--numeric-uid-gid"], input=raw,
                             capture_output=True, check=True).stdout.decode()
    rows = {line.split()[-1]: line.split() for line in listing.splitlines()}
    assert sorted(rows) == ["a", "a/b", "a/b/c.txt", "bin", "bin/busybox", "dev",
                            "dev/console", "init"]
    assert rows["init"][0] == "-rwxr-xr-x"
    assert rows["bin/busybox"][0] == "-rwxr-xr-x" and rows["bin/busybox"][4] == "1005"
    assert rows["dev/console"][0] == "crw-------"
    assert rows["dev/console"][4:6] == ["5,", "1"]
    assert rows["a"][0] == "drwxr-xr-x"
    subprocess.run(["cpio", "-idm", "--quiet", "--no-absolute-filenames", "-D", str(tmp_path),
                    "a/b/c.txt", "init"], input=raw, check=True)
    assert (tmp_path / "a/b/c.txt").read_bytes() == b"hello\n"
    assert (tmp_path / "init").stat().st_mode & 0o777 == 0o755
    assert fs.gz() == fs.gz()  # deterministic
