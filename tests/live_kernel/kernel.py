"""A target's kernel image and busybox, fetched from Debian once and cached by package version."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import debian
from .targets import Target

_IMAGE = r"^\./(boot/vmlinu[xz]-[^/]*|usr/lib/modules/[^/]+/vmlinu[xz][^/]*)$"


@dataclass(frozen=True)
class Kernel:
    target: Target
    release: str  # uname -r, e.g. "7.2.13+deb14-arm64"
    version: str  # Debian package version, e.g. "7.2.13-1"
    package: str
    image: Path

    @property
    def key(self) -> str:
        """Identifies this kernel build in cache entries."""
        return f"{self.target.deb_arch}-{self.release}-{self.version}"


def apt_for(target: Target) -> debian.Apt:
    return debian.Apt(target.suite, target.deb_arch)


def fetch(target: Target) -> Kernel:
    apt = apt_for(target)
    release, version = target.release, target.kernel_version
    # Unstable splits the image out (linux-binary[-unsigned]-R); older suites ship linux-image-R
    # with the modules inside. Unsigned first: the same kernel, without the EFI signature wrapper.
    for package in (
        f"linux-binary-unsigned-{release}",
        f"linux-binary-{release}",
        f"linux-image-{release}-unsigned",
        f"linux-image-{release}",
    ):
        if apt.show(package) is None:
            continue
        deb = apt.download(package, version)
        images = debian.extract(deb, _IMAGE)
        return Kernel(target, release, version, package, images[0])
    raise debian.PackageError(
        f"apt {target.suite}/{target.deb_arch}: no image package for {release} (pinned in "
        f"tests/live_kernel/targets.py: has the suite moved on?)"
    )


def busybox(target: Target) -> Path:
    deb = apt_for(target).download("busybox-static")
    # Unstable installs usr/bin/busybox, bookworm bin/busybox.
    return debian.extract(deb, r"^\./(usr/)?bin/busybox$")[0]


def debug_vmlinux(kernel: Kernel) -> Path:
    """The unstripped vmlinux of the -dbg package (large: fetched only where BTF must be made)."""
    deb = apt_for(kernel.target).download(f"linux-image-{kernel.release}-dbg", kernel.version)
    r = re.escape(kernel.release)
    # boot/vmlinux-R is a symbolic link to lib/modules/R/vmlinux in newer packages.
    found = debian.extract(deb, rf"(/vmlinux-{r}|/modules/{r}/vmlinux)$")
    files = [p for p in found if p.is_file() and not p.is_symlink()]
    if not files:
        raise debian.PackageError(f"{deb.name}: no vmlinux file")
    return files[0]


def module(kernel: Kernel, path: str) -> Path:
    """Module `path` (under kernel/, without .ko: "fs/binfmt_misc") of the kernel's modules
    package (bookworm's are in the image's package), uncompressed (busybox's insmod takes a plain
    .ko), cached beside the package."""
    import lzma

    apt = apt_for(kernel.target)
    package = f"linux-modules-{kernel.release}"
    if apt.show(package, kernel.version) is None:
        package = kernel.package
    deb = apt.download(package, kernel.version)
    r = re.escape(kernel.release)
    found = debian.extract(deb, rf"/modules/{r}/kernel/{re.escape(path)}\.ko(\.xz)?$")
    ko = found[0]
    if ko.suffix != ".xz":
        return ko
    plain = ko.with_suffix("")
    if not plain.exists():
        part = plain.with_suffix(".part")
        part.write_bytes(lzma.decompress(ko.read_bytes()))
        part.rename(plain)
    return plain
