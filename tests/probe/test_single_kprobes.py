"""`--attach single` on names a kprobe cannot take: the kernel refuses a kprobe by a name
several functions share (EADDRNOTAVAIL) or one on its blacklist (EINVAL). Those functions are
left out, and said; any other refusal stops the run. (This host has no kprobes; the kernel's
answers are replayed by a stand-in object, the run side's choice is what is checked. Found in
the i386 guest by benchmarks/bench_mass_attach.py.)"""

from __future__ import annotations

import errno

import pytest
from manifests import manifest

from btfgen.probe import attach, errors


class Kernel:
    def __init__(self, refuse: dict[str, int]):
        self.refuse, self.attached = refuse, []

    def attach_kprobe(self, prog, name, cookie, *, retprobe=False):
        if name in self.refuse:
            raise errors.BpfLoadError(f"kprobe on {name}: refused", self.refuse[name])
        self.attached.append((prog, name, cookie, retprobe))


MANIFEST = manifest(kind="kernel", functions=["a", "shared_name", "b", "blacklisted"])
SINGLE = attach.AttachMode("single", "trace.bpf.o", ("trace_entry", "trace_exit"), "kprobes")
COOKIES = [10, 11, 1 << 63 | 7 << 32 | 12, 13]  # spec_format.Cookie: "b" on the image


def test_refused_names_are_left_out_and_said(capsys):
    k = Kernel({"shared_name": errno.EADDRNOTAVAIL, "blacklisted": errno.EINVAL})
    attach.attach_functions(k, MANIFEST, [0, 1, 2, 3], SINGLE, COOKIES)
    b = COOKIES[2]  # each function's own cookie
    assert k.attached == [("trace_entry", "a", 10, False), ("trace_entry", "b", b, False),
                          ("trace_exit", "a", 10, True), ("trace_exit", "b", b, True)]
    said = capsys.readouterr().err
    assert "left out, a kprobe by name refused" in said and "shared_name, blacklisted" in said


def test_another_refusal_stops_the_run():
    with pytest.raises(errors.BpfLoadError):
        attach.attach_functions(Kernel({"b": errno.EPERM}), MANIFEST, [0, 1, 2, 3], SINGLE, COOKIES)


def test_nothing_attachable_is_an_error():
    every = {n: errno.EINVAL for n in MANIFEST.functions}
    with pytest.raises(errors.RunError, match="no function could take a kprobe by name"):
        attach.attach_functions(Kernel(every), MANIFEST, [0, 1, 2, 3], SINGLE, COOKIES)
