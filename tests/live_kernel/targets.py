"""The kernels × arches the live tests boot, and how QEMU boots each.

One row per guest: which Debian suite and kernel flavour, the QEMU machine, the serial console,
btfgen's arch name, the BPF target macro and the cross compiler for the in-guest loader.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

# The kernels, pinned: (Debian's kernel ABI name, package version) per suite. A moved suite fails
# loudly (the version is gone from its index) instead of testing another kernel unseen.
PINNED = {
    "unstable": ("7.2.13+deb14", "7.2.13-1"),
    "bookworm": ("6.1.0-50", "6.1.176-1"),
}


@dataclass(frozen=True)
class Target:
    name: str  # test id, e.g. "unstable-arm64"
    suite: str
    deb_arch: str
    flavour: str  # kernel flavour: the meta package is linux-image-<flavour>
    arch: str  # btfgen's canonical arch name (tests/toolchains.py)
    bpf_arch: str  # -D__TARGET_ARCH_<bpf_arch>
    cc: str  # cross gcc for the static loader
    qemu: tuple[str, ...]  # emulator and machine, without kernel/initrd/append
    console: str
    big_endian: bool = False
    # Seconds for one boot: a guard against a hung guest, not a speed check. 180 s failed a
    # CI run whose s390x guest (85 s alone) shared the 2 CPUs with two other guests' work.
    timeout: float = 600.0
    btf_from_dbg: bool = False  # the kernel has no BTF: pahole -J on the -dbg vmlinux
    append: str = ""  # extra kernel command line
    # Why kprobe_multi links and fprobe events are not used on this kernel (a kernel defect,
    # found by these tests): the BPF kretprobes would stop running.
    multi_broken: str | None = None

    @property
    def release(self) -> str:
        """uname -r of the pinned kernel."""
        return f"{PINNED[self.suite][0]}-{self.flavour}"

    @property
    def kernel_version(self) -> str:
        return PINNED[self.suite][1]

    def qemu_available(self) -> bool:
        return shutil.which(self.qemu[0]) is not None


_MEM = ("-m", "1024")
# TCG under load can deliver the timer's first ticks late enough that the x86 kernel's check of
# its timer interrupt through the IO-APIC fails and the boot panics ("IO-APIC + timer doesn't
# work"); the emulated timer is known good, so that check is skipped.
_X86_APPEND = "no_timer_check"

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "unstable-amd64", "unstable", "amd64", "amd64", "x86_64", "x86", "gcc",
            ("qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", *_MEM), "ttyS0",
            append=_X86_APPEND,
        ),
        Target(
            "unstable-arm64", "unstable", "arm64", "arm64", "arm64", "arm64",
            "aarch64-linux-gnu-gcc",
            # pauth-impdef: QEMU's own pointer-authentication hash, much faster under TCG
            ("qemu-system-aarch64", "-accel", "tcg", "-M", "virt", "-cpu", "max,pauth-impdef=on",
             *_MEM),
            "ttyAMA0",
        ),
        Target(
            "unstable-armhf", "unstable", "armhf", "armmp-lpae", "arm", "arm",
            "arm-linux-gnueabihf-gcc",
            ("qemu-system-arm", "-accel", "tcg", "-M", "virt", "-cpu", "cortex-a15", *_MEM),
            "ttyAMA0", btf_from_dbg=True,
        ),
        Target(
            "unstable-ppc64el", "unstable", "ppc64el", "powerpc64le", "ppc64le", "powerpc",
            "powerpc64le-linux-gnu-gcc",
            # Without default devices SLOF has less to scan; the guest is still ~7x slower
            # than amd64 under TCG, and its watchdog reports the slowness as lockups.
            ("qemu-system-ppc64", "-accel", "tcg", "-M", "pseries", "-smp", "1", "-nodefaults",
             "-serial", "mon:stdio", *_MEM), "hvc0",
            timeout=900.0, append="nowatchdog mitigations=off",
            multi_broken="7.2.13: a kprobe_multi program sees cookie 0 (the first function's) "
            "in every function, and while kprobe_multi links or fprobe events are on a "
            "function the BPF kretprobes on it do not run",
        ),
        Target(
            "unstable-s390x", "unstable", "s390x", "s390x", "s390x", "s390",
            "s390x-linux-gnu-gcc",
            ("qemu-system-s390x", "-accel", "tcg", "-cpu", "max", *_MEM), "ttysclp0",
            big_endian=True,
        ),
        Target(
            "unstable-riscv64", "unstable", "riscv64", "riscv64", "riscv64", "riscv",
            "riscv64-linux-gnu-gcc",
            ("qemu-system-riscv64", "-accel", "tcg", "-M", "virt", *_MEM), "ttyS0",
        ),
        Target(
            "bookworm-amd64", "bookworm", "amd64", "amd64", "x86_64", "x86", "gcc",
            ("qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", *_MEM), "ttyS0",
            append=_X86_APPEND,
        ),
        Target(
            "bookworm-i386", "bookworm", "i386", "686-pae", "i386", "x86",
            "i686-linux-gnu-gcc",
            ("qemu-system-i386", "-accel", "tcg", "-cpu", "max", *_MEM), "ttyS0",
            btf_from_dbg=True, append=_X86_APPEND,
        ),
    )
}
