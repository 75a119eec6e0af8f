"""Every feature probe answers in one shape (features.Availability: true where the kernel has it,
else why not), and asks the kernel once a process. The kernel is faked (libbpf, bpf(), the
release), so what is counted is what the probes ask of it."""

from __future__ import annotations

import ctypes
import errno
import inspect
import os
from dataclasses import FrozenInstanceError

import pytest

from btfgen.probe import features
from btfgen.probe.features import AVAILABLE, Availability
from btfgen.probe.syscall import (
    BPF_LINK_CREATE,
    BPF_MAP_CREATE,
    BPF_MAP_LOOKUP_ELEM,
    BPF_PROG_LOAD,
    LinkCreateKprobeMulti,
)

# Every public function of features.py is a probe.
PROBES = {name: f for name, f in sorted(vars(features).items())
          if callable(f) and not isinstance(f, type) and not name.startswith("_")
          and getattr(f, "__module__", "") == features.__name__}
# Asked again each time: tracefs, which it looks at, is mounted by the run (Run.setup).
UNCACHED = {"kprobes"}
ARGS = {"bpf_syscall": 321, "kernel": True, "btf_id": 7, "pair_only": False, "kind": "single"}


def _forget() -> None:
    for f in [*PROBES.values(), features._kernel_attach_types]:
        if hasattr(f, "cache_clear"):
            f.cache_clear()


class _FakeLibbpf:
    def __init__(self, asked: list[str]) -> None:
        self.asked = asked

    def libbpf_probe_bpf_prog_type(self, prog_type, opts) -> int:
        self.asked.append("prog_type")
        return 1

    def btf__load_vmlinux_btf(self) -> int:
        self.asked.append("vmlinux_btf")
        ctypes.set_errno(errno.ENOENT)
        return 0  # no BTF: the kfuncs and attach types are unavailable, saying why


@pytest.fixture
def kernel(monkeypatch):
    """A faked kernel: root, libbpf loads, no BTF, bpf() loads a program and answers a link
    on a missing function with ENOENT (the link type exists), release 6.1, and the files
    looked at counted; -> what was asked of it, in order. The probes' caches are emptied
    before and after."""
    asked: list[str] = []
    fake = _FakeLibbpf(asked)

    def sys_bpf(number, cmd, attr):
        asked.append(f"bpf {cmd}")
        if cmd in (BPF_PROG_LOAD, BPF_MAP_CREATE):
            return os.open(os.devnull, os.O_RDONLY)  # a program's or map's fd, closed by it
        assert cmd == BPF_LINK_CREATE
        ctypes.set_errno(errno.ENOENT)
        return -1

    def release() -> str:
        asked.append("release")
        return "6.1.0-27-amd64"

    monkeypatch.setattr(features.os, "geteuid", lambda: 0)
    monkeypatch.setattr(features, "libbpf", lambda: fake)
    monkeypatch.setattr(features, "sys_bpf", sys_bpf)
    monkeypatch.setattr(features.platform, "release", release)
    exists = os.path.exists

    def looked_at(path) -> bool:
        asked.append(f"exists {path}")
        return exists(path)

    monkeypatch.setattr(features.os.path, "exists", looked_at)
    _forget()
    yield asked
    _forget()


def _call(f):
    params = inspect.signature(f).parameters
    return f(**{name: ARGS[name] for name in params})


def test_the_probes_are_found():
    assert {"bpf_programs", "kprobe_multi_links", "uprobe_multi_links", "session_kfuncs",
            "session_links", "tracing_multi_links", "fsession_programs", "kprobes",
            "missed_calls_counted", "sleepable_uprobes", "kprobe_multi_cookies"} == set(PROBES)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_every_probe_answers_an_availability_and_asks_once(kernel, name):
    f = PROBES[name]
    assert inspect.signature(f).return_annotation == "Availability"
    first = _call(f)
    asked = len(kernel)
    assert isinstance(first, Availability) and (bool(first) == (not first.why)), first
    assert asked, f"{name} asked the faked kernel nothing"
    again = _call(f)
    assert again == first
    if name in UNCACHED:
        assert len(kernel) > asked
    else:
        assert len(kernel) == asked, f"{name} asked again: {kernel[asked:]}"


def test_what_the_faked_kernel_has_is_said(kernel):
    # The link types exist (ENOENT: the name was looked up); without BTF no session kfuncs,
    # so no session links, and no attach types: no trampoline.
    assert features.bpf_programs() is AVAILABLE
    assert features.kprobe_multi_links(321) and features.uprobe_multi_links(321)
    kfuncs = features.session_kfuncs()
    assert not kfuncs and kfuncs.why == ("the kernel's BTF cannot be read: "
                                         "No such file or directory")
    assert features.session_links(321, kernel=False) == kfuncs
    assert not features.tracing_multi_links(321) and not features.fsession_programs()
    counted = features.missed_calls_counted()
    assert not counted and counted.why == "kernels before 6.7 do not count them all"
    # One BTF read for both attach-type probes, one for the kfuncs (both cached).
    assert kernel.count("vmlinux_btf") == 2


def _cookie_kernel(monkeypatch, seen: dict[str, int], prefix: str) -> list:
    """A faked kernel whose kprobe_multi link finds the handlers named with `prefix` and whose
    program, for each one called, sees the cookie `seen` gives it; -> the links made, as
    (names, cookies)."""
    links, fired = [], set()
    calls = {"getpid": lambda: fired.add("getpid"), "getppid": lambda: fired.add("getppid")}
    monkeypatch.setattr(features, "COOKIE_PROBE_CALLS", tuple(calls.items()))

    def sys_bpf(number, cmd, attr):
        if cmd in (BPF_PROG_LOAD, BPF_MAP_CREATE):
            return os.open(os.devnull, os.O_RDONLY)
        if cmd == BPF_LINK_CREATE:
            assert isinstance(attr, LinkCreateKprobeMulti) and attr.cnt == 2
            syms = ctypes.cast(attr.syms, ctypes.POINTER(ctypes.c_char_p))
            names = [syms[i].decode() for i in range(2)]
            if not names[0].startswith(prefix):
                ctypes.set_errno(errno.ENOENT)
                return -1
            cookies = ctypes.cast(attr.cookies, ctypes.POINTER(ctypes.c_uint64))
            links.append((names, [cookies[0], cookies[1]]))
            return os.open(os.devnull, os.O_RDONLY)
        assert cmd == BPF_MAP_LOOKUP_ELEM
        slot = ctypes.c_uint32.from_address(attr.key).value
        ctypes.c_uint64.from_address(attr.value).value = any(
            seen[call] == slot for call in fired)
        return 0

    monkeypatch.setattr(features, "sys_bpf", sys_bpf)
    features.kprobe_multi_cookies.cache_clear()
    return links


def test_kprobe_multi_cookies_right(monkeypatch):
    links = _cookie_kernel(monkeypatch, {"getpid": 1, "getppid": 2}, "__arm64_sys_")
    assert features.kprobe_multi_cookies(321) is AVAILABLE
    assert links == [(["__arm64_sys_getpid", "__arm64_sys_getppid"], [1, 2])]
    features.kprobe_multi_cookies.cache_clear()


def test_kprobe_multi_cookies_wrong_are_said(monkeypatch):
    # Debian's 7.2.13 ppc64el kernel: the lookup finds neither function, the cookie is 0.
    _cookie_kernel(monkeypatch, {"getpid": 0, "getppid": 0}, "sys_")
    got = features.kprobe_multi_cookies(321)
    assert got.why == ("this kernel's kprobe_multi links hand their programs the wrong cookie "
                       "(a link on getpid and getppid with cookies 1 and 2: its program saw 0 "
                       "(none)): each call would be read as another function's")
    # One function's cookie for both, or one not seen: wrong too.
    for seen in ({"getpid": 1, "getppid": 1}, {"getpid": 1, "getppid": 3}):
        _cookie_kernel(monkeypatch, seen, "sys_")
        assert not features.kprobe_multi_cookies(321)
    features.kprobe_multi_cookies.cache_clear()


def test_kprobe_multi_cookies_unchecked_where_no_handler_is_found(monkeypatch):
    _cookie_kernel(monkeypatch, {"getpid": 1, "getppid": 2}, "__nowhere_")
    got = features.kprobe_multi_cookies(321)
    assert got.why.startswith("kprobe_multi links are not used here: their cookies could not "
                              "be checked: no getpid and getppid system call handlers found")
    features.kprobe_multi_cookies.cache_clear()


def test_an_unprivileged_process_is_told_why(kernel, monkeypatch):
    monkeypatch.setattr(features.os, "geteuid", lambda: 1000)
    got = features.bpf_programs()
    assert not got and got.why == "needs root (CAP_BPF and CAP_PERFMON)"


def test_availability_is_true_with_its_variant_and_false_with_a_reason():
    assert AVAILABLE and AVAILABLE.why == "" and AVAILABLE.variant == ""
    ctx = Availability(variant="ctx")
    assert ctx and ctx.variant == "ctx"
    no = Availability("this kernel has no kprobe_multi links")
    assert not no and no.variant == ""
    with pytest.raises(ValueError):
        Availability("no", variant="ctx")
    with pytest.raises(FrozenInstanceError):
        no.why = ""  # type: ignore[misc]
