"""Out-of-tree modules built by kbuild.py for each guest's exact kernel: the module's vermagic is
the kernel's own modules', and the guest loads it (unsigned: MODULE_SIG_FORCE is off, the
kernel taints), runs its init and exit, and forgets it."""

from __future__ import annotations

import re

import pytest

from . import debian, kbuild
from . import kernel as kernels
from .conftest import kernel_for, unavailable
from .guest import Guest
from .targets import TARGETS

pytestmark = pytest.mark.live

NAME = "btfgen_kbuild_hello"
SOURCE = rb"""#include <linux/init.h>
#include <linux/module.h>
#include <linux/utsname.h>
#include "hello.h"

static int __init hello_init(void)
{
	pr_info(MARKER " init on %s, %d\n", init_utsname()->release, HELLO_VALUE);
	return 0;
}

static void __exit hello_exit(void)
{
	pr_info(MARKER " exit\n");
}

module_init(hello_init);
module_exit(hello_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("btfgen's live tests: a module built for the guest's exact kernel");
"""
HEADER = b'#define MARKER "btfgen-kbuild-hello:"\n'
SOURCES = {"btfgen_kbuild_hello.c": SOURCE, "hello.h": HEADER}
CFLAGS = ("-DHELLO_VALUE=4242",)
# A module of every kernel's own modules package, for its vermagic.
OWN_MODULE = "fs/binfmt_misc"


def _module(name: str):
    k = kernel_for(name)
    try:
        ko = kbuild.build_module(name, SOURCES, NAME, CFLAGS)
        own = kernels.module(k, OWN_MODULE)
    except debian.PackageError as e:
        unavailable(f"{name}: a module cannot be built for {k.release}: {e}")
    return k, ko, own


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_module_built_for_the_kernel_loads(name):
    k, ko, own = _module(name)
    info = kbuild.modinfo(ko)
    assert info["vermagic"] == kbuild.modinfo(own)["vermagic"], (info, own)
    assert info["vermagic"].startswith(k.release + " ")
    assert info["name"] == NAME

    g = Guest()
    g.file(f"{NAME}.ko", ko.read_bytes())
    g.step("load", f"insmod /{NAME}.ko && grep '^{NAME} ' /proc/modules; "
           "echo tainted=$(cat /proc/sys/kernel/tainted)")
    g.step("unload", f"rmmod {NAME} && ! grep '^{NAME} ' /proc/modules")
    g.step("dmesg", "dmesg | grep -e btfgen-kbuild-hello -e 'module verification'")
    boot = g.run(k)
    where = f"{name} {k.release}"
    loaded, rc = boot.section("load")
    assert rc == 0 and re.search(rf"^{NAME} \d+ 0 ", loaded, re.M), f"{where}: insmod:\n{loaded}"
    # Unsigned (E, 8192) and out of tree (O, 4096): loaded all the same.
    tainted = int(re.search(r"^tainted=(\d+)$", loaded, re.M).group(1))
    assert tainted & 8192 and tainted & 4096, f"{where}: taint {tainted}"
    unloaded, rc = boot.section("unload")
    assert rc == 0, f"{where}: rmmod, or the module is still listed:\n{unloaded}"
    dmesg, _ = boot.section("dmesg")
    assert f"btfgen-kbuild-hello: init on {k.release}, 4242" in dmesg, f"{where}:\n{dmesg}"
    assert "btfgen-kbuild-hello: exit" in dmesg, f"{where}:\n{dmesg}"
    assert dmesg.index("init on") < dmesg.index("hello: exit")


def test_second_build_is_cached():
    name = "unstable-amd64"
    try:
        first = kbuild.build_module(name, SOURCES, NAME, CFLAGS)
    except debian.PackageError as e:
        unavailable(f"{name}: a module cannot be built: {e}")
    stamp = first.stat().st_mtime_ns
    assert kbuild.build_module(name, SOURCES, NAME, CFLAGS) == first
    assert first.stat().st_mtime_ns == stamp
    other = kbuild.build_module(name, SOURCES, NAME, ("-DHELLO_VALUE=1",))
    assert other != first


def test_kbuild_file():
    assert kbuild.kbuild_file({"m.c": b"", "m.h": b""}, "m", ("-DX=1",)) == (
        "obj-m += m.o\nccflags-y += -I$(src) -DX=1\n")
    assert kbuild.kbuild_file({"a.c": b"", "b.c": b""}, "m") == (
        "obj-m += m.o\nm-y := a.o b.o\nccflags-y += -I$(src)\n")
    with pytest.raises(kbuild.BuildError):
        kbuild.kbuild_file({"m.c": b"", "b.c": b""}, "m")
