"""How `btfgen trace --attach` chooses the BPF trampoline (tracing-multi, fsession) for kernel
functions, and falls back from it, with the kernel's probes faked: the live check is
tests/live_kernel/test_fetcher.py (Linux 7.2 in the amd64 guest); this machine's kernel may have
no trampoline links at all."""

from __future__ import annotations

from dataclasses import replace

import pytest
from manifests import manifest

from btfgen.btf import types as T
from btfgen.btf.made import MadeTypes
from btfgen.probe import attach, errors, features, syscall
from btfgen.probe.features import AVAILABLE, Availability
from btfgen.trace import build

FIELDS = {"bpf_syscall": 321, "object": "trace.bpf.o", "btf": "/sys/kernel/btf/vmlinux",
          "session_objects": {"no_ctx": "s.o", "ctx": "s-ctx.o"},
          "functions": ["vfs_read", "make_kuid", "do_mmap"], "btf_ids": [11, 12, 13],
          "trampoline": {"variants": ["fsession_multi", "fsession", "fentry_multi"],
                         "objects": build.TRAMPOLINE_OBJECTS, "specs": "t.bin",
                         "refused": {}}}
MANIFEST = manifest(**FIELDS)
FSESSION_MULTI = Availability(variant="fsession_multi")
FENTRY_MULTI = Availability(variant="fentry_multi")


def _manifest(**tramp):
    return manifest(**{**FIELDS, "trampoline": {**FIELDS["trampoline"], **tramp}})


@pytest.fixture
def kernel(monkeypatch):
    """What the fake kernel has: tracing_multi links (with their variant), fsession, session,
    and whether the trace directory was built for its BTF."""
    state = {"multi": FSESSION_MULTI, "fsession": AVAILABLE, "same_btf": True,
             "session": Availability(variant="ctx"), "cookies": AVAILABLE}
    monkeypatch.setattr(features, "tracing_multi_links", lambda _n, _id, pair_only=False:
                        FENTRY_MULTI if pair_only and state["multi"] else state["multi"])
    monkeypatch.setattr(features, "fsession_programs", lambda: state["fsession"])
    monkeypatch.setattr(features, "session_links", lambda _n, _k: state["session"])
    monkeypatch.setattr(features, "kprobe_multi_links", lambda _n: AVAILABLE)
    monkeypatch.setattr(features, "kprobe_multi_cookies", lambda _n: state["cookies"])
    monkeypatch.setattr(features, "kprobes", lambda: AVAILABLE)
    monkeypatch.setattr(attach, "_same_btf", lambda _m: state["same_btf"])
    return state


# Said where the fentry.multi / fexit.multi pair is asked for: its exits are never paired.
UNPAIRED = "btfgen trace: " + attach.FENTRY_PAIR_UNPAIRED + "\n"


def test_auto_takes_one_fsession_multi_link_then_the_kprobe_modes(kernel, capsys):
    modes = attach.attach_modes("auto", True, MANIFEST)
    assert [m.kind for m in modes] == ["tracing_multi", "session", "multi"]
    assert modes[0].programs == ("trace_session",)
    assert capsys.readouterr().err == (
        "btfgen trace: attaching one fsession.multi link (the BPF trampoline: the kernel's "
        "cheapest)\n")


def test_auto_leaves_the_fentry_and_fexit_multi_pair_out(kernel, capsys):
    # Its exits cannot be paired: auto takes the kprobe path and says why.
    kernel["multi"] = FENTRY_MULTI
    assert [m.kind for m in attach.attach_modes("auto", True, MANIFEST)] == ["session", "multi"]
    assert capsys.readouterr().err == (
        "btfgen trace: attaching one kprobe.session link (entry and exit on one link; not the "
        "BPF trampoline: no fsession.multi link here, only fentry.multi and fexit.multi, whose "
        "exits cannot be paired with their entries (--attach tracing-multi takes them, "
        "unpaired))\n")


def test_tracing_multi_takes_one_fsession_multi_link(kernel, capsys):
    modes = attach.attach_modes("tracing-multi", True, MANIFEST)
    assert [(m.kind, m.object, m.programs, m.attach_types) for m in modes] == [
        ("tracing_multi", "trace.tsession.bpf.o", ("trace_session",),
         (syscall.BPF_TRACE_FSESSION_MULTI,))]
    assert modes[0].specs == "t.bin" and modes[0].rest is None
    assert capsys.readouterr().err == ("btfgen trace: attaching one fsession.multi link (as "
                                       "asked)\n")


def test_without_fsession_multi_the_fentry_and_fexit_multi_pair(kernel, capsys):
    kernel["multi"] = FENTRY_MULTI
    (mode, *_) = attach.attach_modes("tracing-multi", True, MANIFEST)
    assert (mode.object, mode.programs, mode.attach_types) == (
        "trace.tpair.bpf.o", ("trace_entry", "trace_exit"),
        (syscall.BPF_TRACE_FENTRY_MULTI, syscall.BPF_TRACE_FEXIT_MULTI))
    assert capsys.readouterr().err == ("btfgen trace: attaching fentry.multi and fexit.multi "
                                       "links (as asked)\n" + UNPAIRED)


def test_fentry_multi_asks_for_the_pair_itself_and_says_it_is_unpaired(kernel, capsys):
    (mode,) = attach.attach_modes("fentry-multi", True, MANIFEST)
    assert (mode.object, mode.programs) == ("trace.tpair.bpf.o", ("trace_entry", "trace_exit"))
    assert capsys.readouterr().err == ("btfgen trace: attaching fentry.multi and fexit.multi "
                                       "links (as asked)\n" + UNPAIRED)
    only_session = _manifest(objects={"fsession_multi": "trace.tsession.bpf.o"})
    with pytest.raises(errors.InputError, match=r"^--attach fentry-multi: this trace directory "
                                                r"has no fentry.multi program"):
        attach.attach_modes("fentry-multi", True, only_session)


def test_auto_built_for_another_kernels_btf_takes_the_kprobe_path_and_says_why(kernel, capsys):
    kernel["same_btf"] = False
    assert [m.kind for m in attach.attach_modes("auto", True, MANIFEST)] == ["session", "multi"]
    assert "; not the BPF trampoline: the trace directory was built for the BTF of " \
        "/sys/kernel/btf/vmlinux, not this kernel's" in capsys.readouterr().err


def test_what_the_trampoline_refuses_goes_to_a_kprobe_link_of_the_same_run(kernel, capsys):
    manifest = _manifest(refused={"1": "return value: a struct or union return value"})
    (mode, *_) = attach.attach_modes("tracing-multi", True, manifest)
    assert mode.kind == "tracing_multi" and mode.rest.kind == "session"
    assert attach.trampoline_split(manifest, [0, 1, 2]) == ([0, 2], [1])
    assert capsys.readouterr().err == (
        "btfgen trace: attaching one fsession.multi link (as asked; 1 functions the trampoline "
        "cannot take (as return value: a struct or union return value) on one kprobe.session "
        "link)\n")


def test_auto_without_the_trampoline_says_why_and_attaches_as_before(kernel, capsys):
    kernel["multi"] = Availability("this kernel has no tracing_multi links (Linux 7.2+)")
    assert [m.kind for m in attach.attach_modes("auto", True, MANIFEST)] == ["session", "multi"]
    assert capsys.readouterr().err == (
        "btfgen trace: attaching one kprobe.session link (entry and exit on one link; not the "
        "BPF trampoline: this kernel has no tracing_multi links (Linux 7.2+))\n")
    # Built for another kernel's BTF: the link names functions by BTF id.
    kernel["multi"], kernel["same_btf"] = FSESSION_MULTI, False
    with pytest.raises(errors.InputError, match="not this kernel's, and the trampoline names "
                                                "functions by BTF id"):
        attach.attach_modes("tracing-multi", True, MANIFEST)
    # A directory without the trampoline's programs (an older btfgen's, another kernel's):
    # nothing said of it.
    bare = replace(MANIFEST, trampoline=None)
    attach.attach_modes("auto", True, bare)
    assert capsys.readouterr().err == ("btfgen trace: attaching one kprobe.session link (entry "
                                       "and exit on one link)\n")


def test_an_attach_mode_the_kernel_lacks_is_bad_input(kernel):
    kernel["multi"] = Availability("this kernel has no tracing_multi links (Linux 7.2+)")
    with pytest.raises(errors.InputError, match=r"^--attach tracing-multi: this kernel has no "
                                                r"tracing_multi links \(Linux 7.2\+\)$"):
        attach.attach_modes("tracing-multi", True, MANIFEST)
    kernel["fsession"] = Availability("this kernel has no fsession programs (Linux 7.0+)")
    with pytest.raises(errors.InputError, match=r"^--attach fsession: this kernel has no "):
        attach.attach_modes("fsession", True, MANIFEST)
    with pytest.raises(errors.InputError, match=r"is for kernel functions \(--kernel\)$"):
        attach.attach_modes("tracing-multi", False, MANIFEST)
    bare = replace(MANIFEST, trampoline=None)
    with pytest.raises(errors.InputError, match="no trampoline programs"):
        attach.attach_modes("tracing-multi", True, bare)
    only_multi = _manifest(variants=["fentry_multi"],
                           objects={"fentry_multi": "trace.tpair.bpf.o"})
    kernel["fsession"] = AVAILABLE
    with pytest.raises(errors.InputError, match=r"no fsession program \(built for a kernel "):
        attach.attach_modes("fsession", True, only_multi)


def test_fsession_is_one_program_a_function_for_a_few_functions(kernel, capsys):
    (mode,) = attach.attach_modes("fsession", True, MANIFEST)
    assert (mode.kind, mode.object, mode.attach_types) == (
        "fsession", "trace.tsession.bpf.o", (syscall.BPF_TRACE_FSESSION,))
    assert capsys.readouterr().err == ("btfgen trace: attaching one fsession program per "
                                       "function (3) (as asked)\n")
    many = replace(MANIFEST, functions=[f"f{i}" for i in range(attach.FSESSION_MAX + 1)])
    with pytest.raises(errors.InputError, match=r"at most 16 functions, and this trace has 17 "
                                                r"\(use --attach tracing-multi\)"):
        attach.attach_modes("fsession", True, many)


def test_every_function_refused_leaves_the_trampoline_out(kernel):
    manifest = _manifest(refused={str(i): "a struct over 16 bytes" for i in range(3)})
    with pytest.raises(errors.InputError, match=r"no function of this trace can be taken by the "
                                                r"trampoline \(as vfs_read: a struct over 16"):
        attach.attach_modes("tracing-multi", True, manifest)


def test_only_the_functions_traced_here_count(kernel, capsys):
    # make_kuid (refused) is not traceable on this kernel: no kprobe link for it, none said.
    manifest = _manifest(refused={"1": "return value: a struct or union return value"})
    (mode, *_) = attach.attach_modes("tracing-multi", True, manifest, keep=[0, 2])
    assert mode.kind == "tracing_multi" and mode.rest is None
    assert capsys.readouterr().err == ("btfgen trace: attaching one fsession.multi link (as "
                                       "asked)\n")
    with pytest.raises(errors.InputError, match=r"no function of this trace can be taken by the "
                                                r"trampoline \(as make_kuid: return value"):
        attach.attach_modes("tracing-multi", True, manifest, keep=[1])


def test_the_build_reads_which_attach_types_the_target_kernel_has():
    made = MadeTypes()
    values = ("BPF_TRACE_KPROBE_SESSION", "BPF_TRACE_FSESSION", "BPF_TRACE_FENTRY_MULTI")
    made.add(T.Enum, "bpf_attach_type", size=4, signed=False,
             values=tuple(T.EnumValue(n, 56 + i) for i, n in enumerate(values)))
    # 7.0 and 7.1: fsession, no tracing_multi; and the pair without fsession.multi
    assert build.trampoline_variants(made) == ["fsession", "fentry_multi"]
    assert build.trampoline_variants(MadeTypes()) == []


# -- the trampoline's companions: objects loaded beside the first, faked -------------------------

class _Object:
    """A BpfObject as the companions use it: every call recorded, a link a program attached."""

    made: list[_Object] = []

    def __init__(self, path: str, *, bpf_syscall: int) -> None:
        self.path, self.calls, self.links, self.companions = path, [], [], []
        _Object.made.append(self)

    def has_map(self, name: str) -> bool:
        return name == "committed"

    def __getattr__(self, name: str):
        def call(*args, **kw):
            self.calls.append((name, *args, *sorted(kw.items())))
            if name.startswith("attach"):
                self.links.append(f"{name} {args[0]}")
        return call


@pytest.fixture
def objects(monkeypatch):
    _Object.made = []
    monkeypatch.setattr(attach, "BpfObject", _Object)
    return _Object.made


SHARED = (*attach.SHARED_MAPS, "committed")


def test_fsession_puts_each_function_after_the_first_on_a_companion(objects, tmp_path):
    mode = attach.AttachMode("fsession", "trace.tsession.bpf.o", ("trace_session",), "",
                             attach_types=(syscall.BPF_TRACE_FSESSION,))
    obj = _Object("first", bpf_syscall=321)
    assert attach.attach_trampoline(obj, MANIFEST, [0, 2], mode, [7, 8, 9], tmp_path) == []
    first, more = objects
    assert obj.companions == [more] and more.path == str(tmp_path / "trace.tsession.bpf.o")
    assert more.calls == [
        ("share_maps", obj, (*SHARED, "specs")),
        ("expect_tracing", "trace_session", syscall.BPF_TRACE_FSESSION, "do_mmap"),
        ("set_autoload", "follow_fork", False), ("load",),
        ("attach_tracing", "trace_session", syscall.BPF_TRACE_FSESSION, 9, "fsession on do_mmap")]
    assert first.calls == [
        ("attach_tracing", "trace_session", syscall.BPF_TRACE_FSESSION, 7, "fsession on vfs_read")]
    # the companion's link held by the first object too: detached with the probes
    assert obj.links == ["attach_tracing trace_session"] * 2


def test_the_kprobe_companion_shares_the_ring_and_takes_the_rest(objects, tmp_path):
    (tmp_path / "specs.bin").write_bytes(b"specs")
    summed = replace(MANIFEST, summary=manifest(summary={}).summary)
    rest = attach.AttachMode("session", "s-ctx.o", ("trace_session",), "one kprobe.session link")
    obj = _Object("first", bpf_syscall=321)
    kprobe = attach.kprobe_companion(obj, tmp_path, summed, rest)
    assert obj.companions == [kprobe] and kprobe.path == str(tmp_path / "s-ctx.o")
    assert kprobe.calls == [
        ("share_maps", obj, (*SHARED, *attach.SUMMARY_MAPS)),
        ("expect_kprobe_multi", "trace_session", ("session", True)),
        ("set_autoload", "follow_fork", False), ("set_max_entries", "specs", 3), ("load",),
        ("fill_array", "specs", b"specs", 3)]
    attach.attach_companion(kprobe, obj, summed, [1], rest, [7, 8, 9])
    assert kprobe.calls[-1] == ("attach_kprobe_multi", "trace_session", ["make_kuid"], [8],
                                ("retprobe", False), ("session", True))
    assert obj.links == kprobe.links == ["attach_kprobe_multi trace_session"]


def test_what_the_trampoline_refuses_goes_to_single_kprobes_where_kprobe_multi_cookies_are_wrong(
        kernel, capsys):
    # The trampoline's own cookies are another mechanism (tracing_multi): it is still taken.
    kernel["cookies"] = Availability("this kernel's kprobe_multi links hand their programs "
                                     "the wrong cookie")
    manifest = _manifest(refused={"1": "return value: a struct or union return value"})
    modes = attach.attach_modes("auto", True, manifest)
    assert [m.kind for m in modes] == ["tracing_multi", "single"]
    assert modes[0].rest.kind == "single"
    assert "cannot take (as return value: a struct or union return value) on one kprobe and " \
        "kretprobe per function)" in capsys.readouterr().err
