"""Building examples/project (a BPF project with btfgen as its build step) the way its README
says: `make` with the target kernel's BTF and arch. A cross build gets the target's libbpf, libelf,
zlib and zstd -dev packages from Debian (the release this machine's cross compilers are built
for) unpacked into a sysroot, as `make SYSROOT=...` expects; the loader is linked static, so the
guest's initramfs needs nothing else."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import cache, debian
from .targets import Target

CHECKOUT = Path(__file__).resolve().parents[2]
PROJECT = CHECKOUT / "examples" / "project"
# The -dev packages a static libbpf program links against.
DEV_PACKAGES = ("libbpf-dev", "libelf-dev", "zlib1g-dev", "libzstd-dev")
HOST_DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine)


class ProjectBuildError(AssertionError):
    pass


def sysroot(deb_arch: str, suite: str = "bookworm") -> Path:
    """The -dev packages of `deb_arch`, unpacked into one tree."""
    apt = debian.Apt(suite, deb_arch)
    debs = [apt.download(p) for p in DEV_PACKAGES]
    root = cache.ROOT / "sysroot" / f"{suite}-{deb_arch}-{cache.digest(*(d.name for d in debs))}"
    if root.exists():
        return root
    tmp = root.with_name(f"{root.name}.tmp{os.getpid()}")  # test workers may race here
    shutil.rmtree(tmp, ignore_errors=True)
    for deb in debs:
        for path in debian.extract(deb, r"^\./usr/(include|lib)/"):
            rel = path.relative_to(cache.ROOT / "unpacked" / deb.stem)
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                dest.symlink_to(os.readlink(path))
            elif path.is_file():
                shutil.copy2(path, dest)
    try:
        os.replace(tmp, root)
    except OSError:
        if not root.exists():
            raise
        shutil.rmtree(tmp)  # another worker's tree landed first: the same files
    return root


def make(target_arch: str, vmlinux: Path, output: Path, *extra: str,
         check: bool = True) -> subprocess.CompletedProcess:
    """`make` in the project for `target_arch` (btfgen's name) with the kernel BTF `vmlinux`;
    btfgen is this checkout's (the interpreter running the tests)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(CHECKOUT)
    cmd = ["make", "-C", str(PROJECT), f"ARCH={target_arch}", f"VMLINUX={vmlinux}",
           f"OUTPUT={output}", f"BTFGEN={sys.executable} -m btfgen", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and proc.returncode:
        raise ProjectBuildError(f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def build_for(target: Target, vmlinux: Path, output: Path) -> Path:
    """The static loader for `target`'s kernel."""
    extra = ["STATIC=1"]
    if target.deb_arch != HOST_DEB_ARCH:
        extra.append(f"SYSROOT={sysroot(target.deb_arch)}")
    make(target.arch, vmlinux, output, *extra)
    return output / target.arch / "trace"
