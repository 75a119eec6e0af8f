"""Out-of-tree kernel modules built for the exact kernels the guests boot.

A Debian kernel's headers package builds modules only with the compiler that built the kernel
(its `.kernelvariables`: `CC = $(CROSS_COMPILE)gcc-16`), with host tools (fixdep, modpost,
objtool, resolve_btfids) from the suite's `linux-kbuild` package, and its Makefile names its
common half by absolute path (`include /usr/src/linux-headers-…-common/Makefile`). Unstable's
compiler and host tools need a newer C library than this machine's. So each suite gets a
minimal chroot of its own (`debootstrap --variant=minbase`, from the mirror `debian.py` uses,
signatures checked against debian-archive-keyring), kept in the live cache and made once,
atomically (built under a temporary name, then renamed; a lock for concurrent test workers):

- the kernel's gcc (`gcc-16`, `gcc-12`) and make, from the suite;
- per target, a layer installed once: for the machine's own arch (amd64) the headers package
  pinned `linux-headers-R=VERSION` through the chroot's apt; for another arch the suite's amd64
  `linux-kbuild-…` and `linux-headers-…-common` pinned the same way, the cross gcc of the
  kernel's major version (`gcc-16-aarch64-linux-gnu`), and the arch's own headers package,
  fetched by `debian.Apt` for that arch (pinned, hash-checked) and unpacked into the chroot
  (its `usr/src`; the `scripts` and `tools` links there then reach the amd64 kbuild's).

`make` runs in the chroot in a mount and pid namespace of its own (`unshare`) with a proc of
its own (objtool reads /proc); the namespace is private, so nothing stays mounted once it ends,
except inside a chroot (fresh.sh's Debian 12), where it cannot be made private and the proc is
unmounted again by the command's shell. The host's /dev is never reached. A moved mirror that
no longer holds the pinned version fails the layer, naming the pin, rather than building
against another kernel. Modules are cached by a digest of their sources, target and kernel.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from . import cache, debian
from . import kernel as kernels
from .targets import PINNED, TARGETS, Target

RECIPE = "kbuild-1"  # part of every module's cache key: bump when the build changes
ROOTS = cache.ROOT / "kbuild"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_ARCH = "amd64"  # the chroots are amd64: the machine's arch (Debian 12 on x86_64)


class BuildError(RuntimeError):
    """The module did not compile or link (not a missing toolchain: a test fails on it)."""


def _mounted_below(path: Path) -> bool:
    p = str(path.resolve())
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == p or mnt.startswith(p + "/"):
                return True
    return False


def _remove(path: Path) -> None:
    """Delete a tree, never one with anything mounted inside it."""
    if not path.exists():
        return
    if _mounted_below(path):
        raise debian.PackageError(f"{path}: something is mounted below it; not deleting it")
    shutil.rmtree(path)


def _run(cmd: list[str], what: str, error=debian.PackageError, tail: int = 12) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if proc.returncode:
        out = (proc.stdout + proc.stderr).strip().splitlines()[-tail:]
        raise error(f"{what} (exit {proc.returncode}):\n" + "\n".join(out))
    return proc.stdout + proc.stderr


@functools.cache
def _private_namespace() -> bool:
    """Whether a mount namespace can be made private here: not inside a chroot (as fresh.sh's
    Debian 12 one), where "/" is no mount point and `unshare --propagation private` fails."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                          capture_output=True).returncode == 0


def _namespace() -> list[str]:
    """unshare's options for a mount namespace of its own: private where it can be; else its
    mounts may reach the parent namespace's peers, and whoever mounts unmounts again."""
    return ["unshare", "--mount", "--propagation",
            "private" if _private_namespace() else "unchanged"]


def in_root(root: Path, cmd: list[str], what: str, error=debian.PackageError,
            tail: int = 12) -> str:
    """`cmd` inside the chroot `root`, in a mount and pid namespace of its own with a proc of
    its own: the mount vanishes with it (or, in a chroot, is unmounted again, one command at a
    time), and only the chroot's own /dev is seen."""
    env = ["env", "-i", f"PATH={PATH}", "HOME=/root", "LC_ALL=C.UTF-8",
           "DEBIAN_FRONTEND=noninteractive"]
    if _private_namespace():
        return _run([*_namespace(), "--pid", "--fork", f"--mount-proc={root / 'proc'}",
                     "chroot", str(root), *env, *cmd], what, error, tail)
    script = ('mount -t proc proc "$0/proc" || exit 125; chroot "$0" "$@"; rc=$?; '
              'umount "$0/proc"; exit $rc')
    with debian._locked(ROOTS / f"{root.name}.proc.lock"):
        return _run([*_namespace(), "--pid", "--fork", "sh", "-c", script, str(root), *env,
                     *cmd], what, error, tail)


def _apt(*args: str) -> list[str]:
    return ["apt-get", "-q", "-y", "--no-install-recommends",
            "-oAcquire::Check-Valid-Until=false", "-oAcquire::Languages=none", *args]


def chroot(suite: str) -> Path:
    """The suite's build chroot (the gcc of its pinned kernel, make, an apt index), made once."""
    abi, version = PINNED[suite]
    root = ROOTS / f"{suite}-{abi}-{version}"
    if (root / ".btfgen-ready").exists():
        return root
    with debian._locked(ROOTS / f"{root.name}.lock"):
        if (root / ".btfgen-ready").exists():
            return root
        if shutil.which("debootstrap") is None:
            raise debian.PackageError("debootstrap is not installed (apt-get install debootstrap)")
        if os.geteuid() != 0:
            raise debian.PackageError("building kernel modules needs root (chroot, unshare)")
        arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                              text=True).stdout.strip()
        if arch != HOST_ARCH:
            raise debian.PackageError(f"kernel modules are built on {HOST_ARCH} machines only "
                                      f"(this one: {arch or 'no dpkg'})")
        mirror = debian.mirror()
        gcc = _suite_gcc(suite)  # before anything is made: the pinned headers must be had
        # Under the lock no one else is making it: a temporary tree left is a killed run's.
        for stale in ROOTS.glob(f".tmp-{root.name}-*"):
            _remove(stale)
        tmp = ROOTS / f".tmp-{root.name}-{os.getpid()}"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            # debootstrap mounts proc and sysfs in the target, and unmounts them when it ends:
            # in a private mount namespace they vanish with it whatever happens.
            _run([*_namespace(), "debootstrap",
                  "--variant=minbase", f"--keyring={debian.KEYRING}", suite, str(tmp), mirror],
                 f"debootstrap {suite} from {mirror}")
            (tmp / "etc/apt/sources.list").write_text(
                f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror} "
                f"{suite} main\n")
            in_root(tmp, _apt("update"), f"apt-get update in the {suite} chroot")
            in_root(tmp, _apt("install", gcc, "make"),
                    f"installing {gcc} and make in the {suite} chroot")
            in_root(tmp, ["apt-get", "clean"], "apt-get clean")
            (tmp / "build").mkdir(exist_ok=True)
            (tmp / ".btfgen-ready").write_text(f"{suite} {abi} {version} {gcc}\n")
            _remove(root)  # a half-made one of an older recipe (never ready)
            tmp.rename(root)
        finally:
            _remove(tmp)
    return root


def _suite_gcc(suite: str) -> str:
    """The gcc package that built the suite's pinned kernel: `CC` in its amd64 headers."""
    return _kernel_cc(_headers_deb(TARGETS[f"{suite}-amd64"]))[1]


def _headers_deb(target: Target) -> Path:
    apt = kernels.apt_for(target)
    try:
        return apt.download(f"linux-headers-{target.release}", target.kernel_version)
    except debian.PackageError as e:
        raise debian.PackageError(
            f"linux-headers-{target.release}={target.kernel_version} (pinned in "
            f"tests/live_kernel/targets.py) cannot be had: {e}") from e


def _kernel_cc(deb: Path, target: Target | None = None) -> tuple[str, str]:
    """(CROSS_COMPILE, gcc package) for a headers package: the gcc of its .kernelvariables'
    `CC = $(CROSS_COMPILE)gcc-N`, the prefix it sets (unstable: `override CROSS_COMPILE =
    aarch64-linux-gnu-`) or else the target's own (bookworm sets it from dpkg-architecture's
    variables, which a plain make does not have: i686-linux-gnu- from the target's gcc)."""
    found = debian.extract(deb, r"/\.kernelvariables$")
    text = found[0].read_text()
    cross = re.search(r"^override CROSS_COMPILE\s*=\s*([\w.-]+)\s*$", text, re.M)
    cc = re.search(r"^CC\s*=.*\$\(CROSS_COMPILE\)(gcc-\d+)\s*$", text, re.M)
    if not cc:
        raise debian.PackageError(f"{deb.name}: no `CC = ...$(CROSS_COMPILE)gcc-N` in "
                                  ".kernelvariables")
    if cross:
        return cross.group(1), cc.group(1)
    prefix = target.cc[: -len("gcc")] if target and target.cc.endswith("-gcc") else ""
    return prefix, cc.group(1)


def _control(deb: Path) -> dict[str, str]:
    out = _run(["dpkg-deb", "-f", str(deb)], f"dpkg-deb -f {deb.name}")
    fields, key = {}, ""
    for line in out.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def _pinned_depends(deb: Path, names: tuple[str, ...], version: str) -> list[str]:
    """`name=version` for the headers package's dependencies of these prefixes: at the version
    it names (`(= V)`, `(>= V)`), else at the kernel's (unstable's linux-kbuild-R, named without
    one, comes from the same source package)."""
    wanted = []
    for dep in _control(deb).get("Depends", "").split(","):
        m = re.match(r"\s*([^\s(|]+)\s*(?:\((=|>=)\s*([^)\s]+)\))?", dep)
        if m and m.group(1).startswith(names):
            wanted.append(f"{m.group(1)}={m.group(3) or version}")
    return wanted


def prepare(target: Target) -> tuple[Path, str, str]:
    """The chroot holding everything to build modules for `target`'s pinned kernel, the
    kernel's build directory inside it (`/usr/src/linux-headers-R`) and the CROSS_COMPILE
    prefix make is given."""
    abi, version = PINNED[target.suite]
    headers = f"/usr/src/linux-headers-{target.release}"
    stamp = ROOTS / f"{target.suite}-{abi}-{version}" / ".btfgen-layers" / target.name
    if stamp.exists():
        return stamp.parents[1], headers, stamp.read_text().splitlines()[0]
    deb = _headers_deb(target)  # first: a pin the mirror no longer has fails before any work
    root = chroot(target.suite)
    cross, gcc = _kernel_cc(deb, target)
    pin = f"linux-headers-{target.release}={target.kernel_version}"
    with debian._locked(ROOTS / f"{root.name}.lock"):
        if stamp.exists():
            return root, headers, stamp.read_text().splitlines()[0]
        if target.deb_arch == HOST_ARCH:
            packages = [pin]
        else:
            # The amd64 host tools and the arch-independent half, at the versions the arch's
            # headers name; the cross compiler the kernel's CC names.
            packages = _pinned_depends(deb, ("linux-kbuild-", "linux-headers-"),
                                       target.kernel_version)
            if not cross:
                raise debian.PackageError(f"{deb.name}: no cross compiler prefix for "
                                          f"{target.name}")
            packages.append(f"{gcc}-{cross.rstrip('-')}")
        try:
            in_root(root, _apt("install", *packages),
                    f"{target.name}: installing {' '.join(packages)} in the {target.suite} chroot")
        except debian.PackageError as e:
            raise debian.PackageError(
                f"{e}\n(the kernel is pinned to {pin} in tests/live_kernel/targets.py: has the "
                f"mirror moved on?)") from e
        if target.deb_arch != HOST_ARCH:
            _unpack_src(deb, root)
        in_root(root, ["apt-get", "clean"], "apt-get clean")
        if not (root / headers.lstrip("/") / "Makefile").exists():
            raise debian.PackageError(f"{target.name}: no {headers}/Makefile after installing "
                                      f"{pin}")
        stamp.parent.mkdir(exist_ok=True)
        cache.write_atomic(stamp, (f"{cross}\n" + " ".join(packages) + "\n").encode())
    return root, headers, cross


def _unpack_src(deb: Path, root: Path) -> None:
    """The headers package's usr/src into the chroot (not its lib/modules link: `dpkg-deb -x`
    would put a directory in place of a merged-/usr root's /lib link)."""
    tar = subprocess.Popen(["tar", "-x", "--keep-directory-symlink", "-C", str(root),
                            "./usr/src"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    feed = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=tar.stdin)
    tar.stdin.close()
    err = tar.stderr.read().decode(errors="replace")
    if tar.wait() or feed.returncode:
        raise debian.PackageError(f"unpacking {deb.name}'s usr/src: {err.strip()}")


def kbuild_file(sources: dict[str, bytes], name: str, extra_cflags=()) -> str:
    """`obj-m += name.o`; with C files other than name.c, `name-y` lists them all."""
    cfiles = sorted(f for f in sources if f.endswith(".c"))
    lines = [f"obj-m += {name}.o"]
    if cfiles != [f"{name}.c"]:
        if f"{name}.c" in cfiles:
            raise BuildError(f"{name}.c cannot be one of several files of module {name}")
        lines.append(f"{name}-y := " + " ".join(c[:-2] + ".o" for c in cfiles))
    lines.append("ccflags-y += -I$(src)" + "".join(" " + shlex.quote(f) for f in extra_cflags))
    return "\n".join(lines) + "\n"


def build_module(target_name: str, sources: dict[str, bytes], name: str,
                 extra_cflags=()) -> Path:
    """The module `name`.ko (uncompressed, unsigned) built from `sources` (file name -> bytes:
    C files and headers; no Kbuild, one is written) for the pinned kernel `target_name` boots.
    Cached under <live cache>/kbuild/modules/; raises debian.PackageError when the toolchain
    cannot be had, BuildError when make fails."""
    target = TARGETS[target_name]
    if "Kbuild" in sources or "Makefile" in sources:
        raise BuildError("sources carry no Kbuild or Makefile: build_module writes the Kbuild")
    kbuild = kbuild_file(sources, name, extra_cflags)
    key = cache.digest(RECIPE, target.name, target.release, target.kernel_version, name, kbuild,
                       *(x for f in sorted(sources) for x in (f, sources[f])))
    out = ROOTS / "modules" / f"{target.name}-{name}-{key}" / f"{name}.ko"
    if out.exists():
        return out
    root, headers, cross = prepare(target)
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root / "build"))
    try:
        for f, data in sources.items():
            p = work / f
            if ".." in Path(f).parts or Path(f).is_absolute():
                raise BuildError(f"source name {f!r} leaves the module's directory")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        (work / "Kbuild").write_text(kbuild)
        inside = "/" + str(work.relative_to(root))
        log = in_root(root, ["make", "-C", headers, f"M={inside}", f"CROSS_COMPILE={cross}",
                             "modules"],
                      f"{target.name}: make of module {name}", error=BuildError, tail=40)
        ko = work / f"{name}.ko"
        if not ko.exists():
            raise BuildError(f"{target.name}: make made no {name}.ko:\n{log[-3000:]}")
        cache.write_atomic(out.parent / "build.log", log.encode())
        cache.write_atomic(out, ko.read_bytes())
    finally:
        _remove(work)
    return out


# ---- reading a module's .modinfo -------------------------------------------------------------


def modinfo(ko: Path) -> dict[str, str]:
    """The `.modinfo` section of an ELF module: key=value strings (the last of a repeated key)."""
    data = ko.read_bytes()
    if data[:4] != b"\x7fELF":
        raise ValueError(f"{ko}: not an ELF file")
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)

    def section(i: int) -> tuple[int, int, int]:  # name, offset, size
        base = shoff + i * shentsize
        if is64:
            name, _, _, _, off, size = struct.unpack_from(order + "IIQQQQ", data, base)
        else:
            name, _, _, _, off, size = struct.unpack_from(order + "IIIIII", data, base)
        return name, off, size

    _, stroff, _ = section(shstrndx)
    info: dict[str, str] = {}
    for i in range(shnum):
        name, off, size = section(i)
        if data[stroff + name:].split(b"\0", 1)[0] == b".modinfo":
            for item in data[off:off + size].split(b"\0"):
                if b"=" in item:
                    k, _, v = item.decode("utf-8", "replace").partition("=")
                    info[k] = v
    return info
