"""One link for entry and exit (uprobe.session, Linux 6.13+): `btfgen trace` on a program here,
in session mode and falling back from it, and the generated per-function decoders' session
slots run by the kernel on nested calls. Root, BPF and a session-capable kernel, else skipped
with the reason; how the attach mode is chosen is checked everywhere, with the probes faked."""

from __future__ import annotations

import io
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import refusals
from manifests import manifest

from btfgen.abi.arches import host_bpf_syscall
from btfgen.probe import attach, bpf_object, errors, features, ringbuf, run, tracefs
from btfgen.probe.features import AVAILABLE, Availability
from btfgen.trace import command, symbols

CLANG = "clang-19"

# Nested calls: each exit must get its own entry's state (the cookie is per call, not per
# thread), and a struct returned in memory.
PROGRAM = r"""
volatile long sink;
struct big { long v[5]; };
__attribute__((noinline)) struct big nest(int depth, long seed)
{
	struct big b = { { seed, seed * 2, depth, 0, 0 } };

	if (depth < 3) {
		struct big inner = nest(depth + 1, seed + 10);
		b.v[3] = inner.v[0];
	}
	b.v[4] = depth * 100;
	return b;
}
int main(void)
{
	struct big b = nest(0, 7);
	sink = b.v[3];
	return 0;
}
"""
# What the tool prints for it, exits innermost first.
EXPECTED = """\
nest(depth=0, seed=7)
nest(depth=1, seed=17)
nest(depth=2, seed=27)
nest(depth=3, seed=37)
nest -> {v=[37, 74, 3, 0, 300]}
nest -> {v=[27, 54, 2, 37, 200]}
nest -> {v=[17, 34, 1, 27, 100]}
nest -> {v=[7, 14, 0, 17, 0]}
"""


def _live_reason() -> str | None:
    if platform.machine() != "x86_64":
        return f"the program is built for x86_64, this is {platform.machine()}"
    missing = [t for t in ("gcc", CLANG, "pahole") if shutil.which(t) is None]
    if missing:
        return f"not installed: {', '.join(missing)}"
    reason = features.bpf_programs().why
    if reason:
        return reason
    return features.session_links(host_bpf_syscall(), kernel=False).why


@pytest.fixture
def live():
    reason = _live_reason()
    if reason:
        pytest.skip(f"uprobe.session unavailable: {reason}")
    tracefs.mount_tracefs()


@pytest.fixture
def program(tmp_path) -> Path:
    src = tmp_path / "nest.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "nest"
    proc = subprocess.run(["gcc", "-O1", "-g", str(src), "-o", str(exe)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


@pytest.fixture
def links(monkeypatch) -> list[list[str]]:
    """For each BPF object the run closes: what its links were (the attach type of each link
    the bpf() syscall made, the program of each libbpf attached where its section says,
    "libbpf" for the others)."""
    seen: list[list[str]] = []
    close = bpf_object.BpfObject.close
    made: dict[int, str] = {}
    multi = bpf_object.BpfObject.attach_uprobe_multi
    plain = bpf_object.BpfObject.attach

    def attach(self, prog):
        link = plain(self, prog)
        made[id(link)] = prog
        return link

    def attach_uprobe_multi(self, prog, *args, session=False, retprobe=False, **kw):
        link = multi(self, prog, *args, session=session, retprobe=retprobe, **kw)
        made[id(link)] = f"{prog}:{'session' if session else 'multi'}"
        return link

    def recording_close(self):
        if self.links:
            seen.append([made.get(id(link), "libbpf") for link in self.links])
        close(self)

    monkeypatch.setattr(bpf_object.BpfObject, "attach_uprobe_multi", attach_uprobe_multi)
    monkeypatch.setattr(bpf_object.BpfObject, "attach", attach)
    monkeypatch.setattr(bpf_object.BpfObject, "close", recording_close)
    return seen


def _untimed(text: str) -> str:
    lines = text.splitlines()
    assert all(line.endswith(" us)") for line in lines if " -> " in line), text
    return "".join(line.rsplit(" (", 1)[0] + "\n" if " -> " in line else line + "\n"
                   for line in lines)


def _trace(capfd, program: Path, *, attach: str = "auto") -> tuple[int, str, str]:
    """Build a trace directory for `program`'s nest() and trace one run of it, in this process
    (so the links can be looked at): (exit status, what it printed, its messages)."""
    directory = program.parent / "dir"
    if not directory.exists():
        assert command.main(["--build", str(directory), str(program), "nest"]) == 0
    capfd.readouterr()
    out = io.StringIO()
    status = run.run(directory, run.Options([], attach=attach), out=out)
    return status, out.getvalue(), capfd.readouterr().err


def test_session_mode_traces_nested_calls_on_one_link(live, program, links, capfd):
    status, out, err = _trace(capfd, program)
    assert status == 0, err
    # sleepable where this kernel takes it (test_sleepable_live.py reads what that gives)
    assert re.search(r"btfgen trace: attaching one uprobe\.session link(, sleepable)? \(entry "
                     r"and exit on one link\)", err), err
    assert _untimed(out) == EXPECTED, out
    assert err.endswith("btfgen trace: 0 records lost (ring buffer full)\n"), err
    # One link did both: the session program's, besides the fork tracepoint's and the system
    # calls' exit (a -1's errno).
    assert links == [["follow_fork", "syscall_exit", "trace_session:session"]], links


def test_multi_pair_when_asked(live, program, links, capfd):
    status, out, err = _trace(capfd, program, attach="multi")
    assert status == 0, err
    assert re.search(r"btfgen trace: attaching uprobe_multi links(, sleepable)? \(as asked\)",
                     err), err
    assert _untimed(out) == EXPECTED, out
    assert links == [["follow_fork", "syscall_exit", "trace_entry:multi", "trace_exit:multi"]], \
        links


def test_refused_session_link_falls_back_to_the_pair(live, program, links, capfd, monkeypatch):
    # A kernel whose probe said yes but which refuses the real link (one function it cannot
    # put a return probe on, say): auto goes on with the pair instead of failing.
    refusals.refuse_session_links(monkeypatch)
    status, out, err = _trace(capfd, program)
    assert status == 0, err
    # (each session link refused: the sleepable one's, then the other's, where both are tried)
    assert re.search(r"btfgen trace: the one uprobe\.session link was refused \(uprobe_session "
                     r"link for trace_session: refused here\): attaching uprobe_multi "
                     r"links(, sleepable)?\n", err), err
    assert _untimed(out) == EXPECTED, out
    assert links[-1] == ["follow_fork", "syscall_exit", "trace_entry:multi",
                         "trace_exit:multi"], links


def test_session_asked_where_the_directory_has_none(live, program, capfd):
    directory = program.parent / "dir"
    assert command.main(["--build", str(directory), str(program), "nest"]) == 0
    manifest = json.loads((directory / "trace.json").read_text())
    del manifest["session_objects"]  # as an older btfgen wrote it
    (directory / "trace.json").write_text(json.dumps(manifest))
    capfd.readouterr()
    status = command.main(["--run", str(directory), "--attach", "session"])
    assert status == 1
    assert capfd.readouterr().err == (
        "btfgen trace: --attach session: this trace directory has no session program (built by "
        "an older btfgen)\n")


# -- the generated per-function decoders' session slots, run by the kernel ----------------------

SESSION_SLOTS = r"""
#define BTFGEN_USER
#define BTFGEN_SESSION
#include "btfgen.bpf.h"
char LICENSE[] SEC("license") = "GPL";

struct seen { __s64 depth, seed, v0, v4; __s32 err, saved; };
struct {
	__uint(type, 27 /* BPF_MAP_TYPE_RINGBUF */);
	__uint(max_entries, 1 << 16);
} seen SEC(".maps");

SEC("uprobe") int one_link(void *ctx)
{
	const struct btfgen_args_nest *a;
	struct btfgen_ret_nest r = {};
	struct seen *s;

	if (!btfgen_session_is_return(ctx)) {
		struct btfgen_args_nest *slot = btfgen_session_save_slot(ctx);

		if (!slot)
			return 1;
		btfgen_entry_nest(ctx, slot);
		return 0;
	}
	s = bpf_ringbuf_reserve(&seen, sizeof(*s), 0);
	if (!s)
		return 0;
	a = btfgen_session_saved_slot(ctx);
	s->saved = !!a;
	s->err = btfgen_exit_nest(ctx, a, &r);
	s->depth = a ? a->depth : -1;
	s->seed = a ? a->seed : -1;
	s->v0 = r.value.v[0];
	s->v4 = r.value.v[4];
	btfgen_session_release_slot(ctx);
	bpf_ringbuf_submit(s, 0);
	return 0;
}
"""


def test_generated_session_slots_keep_each_calls_arguments(live, program, tmp_path):
    import struct

    from btfgen.codegen import outputs
    from btfgen.trace import build as trace_build

    target = trace_build.open_target(trace_build.Request(functions=["nest"],
                                                         program=str(program)))
    found, _ = target.select(["nest"])
    layout = target.placement(found).layout
    for name, text in outputs.generate(layout, target.types, ("bpf",),
                                       self_contained=True).items():
        (tmp_path / name).write_text(text)
    (tmp_path / "slots.bpf.c").write_text(SESSION_SLOTS)
    variant = features.session_kfuncs().variant
    proc = subprocess.run([CLANG, "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86",
                           *(["-DBTFGEN_SESSION_KFUNC_CTX"] if variant == "ctx" else []),
                           "-Wall", "-Werror", "-c", str(tmp_path / "slots.bpf.c"), "-o",
                           str(tmp_path / "slots.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    records: list[bytes] = []
    with bpf_object.BpfObject(str(tmp_path / "slots.o"), bpf_syscall=host_bpf_syscall()) as obj:
        obj.expect_uprobe_multi("one_link", session=True)
        obj.load()
        # The file offset as the build gives it to the run side.
        offsets = [f.offset for f in symbols.functions(str(program), ["nest"])]
        obj.attach_uprobe_multi("one_link", str(program), ["nest"], [0], offsets=offsets,
                                session=True)
        with ringbuf.RingBuffer(obj.map_fd("seen"), records.append) as rb:
            done = subprocess.run([str(program)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            while rb.poll(50) > 0:
                pass
            rb.drain()
    got = [struct.unpack("<4q2i", r[:40]) for r in records]
    # Innermost exit first; each with its own call's depth and seed, from its own slot.
    assert got == [(3, 37, 37, 300, 0, 1), (2, 27, 27, 200, 0, 1), (1, 17, 17, 100, 0, 1),
                   (0, 7, 7, 0, 0, 1)], got


# -- which mode, and why: the probes faked, so it runs anywhere -----------------------------------

MANIFEST = manifest(bpf_syscall=321, object="trace.bpf.o",
                    session_objects={"no_ctx": "s.o", "ctx": "s-ctx.o"})


@pytest.fixture
def probes(monkeypatch):
    """Set what the fake kernel has: session links (with their variant), kprobe_multi."""
    state = {"session": Availability(variant="ctx"), "multi": AVAILABLE, "kprobes": AVAILABLE,
             "umulti": AVAILABLE, "cookies": AVAILABLE}
    monkeypatch.setattr(features, "session_links", lambda _n, _k: state["session"])
    monkeypatch.setattr(features, "kprobe_multi_links", lambda _n: state["multi"])
    monkeypatch.setattr(features, "kprobes", lambda: state["kprobes"])
    monkeypatch.setattr(features, "uprobe_multi_links", lambda _n: state["umulti"])
    monkeypatch.setattr(features, "kprobe_multi_cookies", lambda _n: state["cookies"])
    return state


def test_auto_takes_session_first_with_the_pair_behind(probes, capsys):
    modes = attach.attach_modes("auto", True, MANIFEST)
    assert [(m.kind, m.object, m.programs) for m in modes] == [
        ("session", "s-ctx.o", ("trace_session",)),
        ("multi", "trace.bpf.o", ("trace_entry", "trace_exit"))]
    assert capsys.readouterr().err == ("btfgen trace: attaching one kprobe.session link "
                                       "(entry and exit on one link)\n")
    probes["session"] = Availability(variant="no_ctx")
    assert attach.attach_modes("auto", False, MANIFEST)[0].object == "s.o"


def test_auto_without_session_says_why(probes, capsys):
    probes["session"] = Availability("this kernel has no bpf_session_cookie kfunc (Linux 6.10+)")
    modes = attach.attach_modes("auto", True, MANIFEST)
    assert [m.kind for m in modes] == ["multi"]
    assert capsys.readouterr().err == (
        "btfgen trace: attaching kprobe_multi links (this kernel has no bpf_session_cookie "
        "kfunc (Linux 6.10+))\n")
    probes["multi"] = Availability("this kernel has no kprobe_multi links (built without "
                                    "CONFIG_FPROBE)")
    assert [m.kind for m in attach.attach_modes("auto", True, MANIFEST)] == ["single"]
    assert capsys.readouterr().err == (
        "btfgen trace: attaching one kprobe and kretprobe per function (this kernel has no "
        "kprobe_multi links (built without CONFIG_FPROBE))\n")


def test_forced_modes(probes, capsys):
    assert [m.kind for m in attach.attach_modes("session", True, MANIFEST)] == ["session"]
    assert [m.kind for m in attach.attach_modes("multi", True, MANIFEST)] == ["multi"]
    assert [m.kind for m in attach.attach_modes("single", True, MANIFEST)] == ["single"]
    assert capsys.readouterr().err.splitlines() == [
        "btfgen trace: attaching one kprobe.session link (as asked)",
        "btfgen trace: attaching kprobe_multi links (as asked)",
        "btfgen trace: attaching one kprobe and kretprobe per function (as asked)"]
    probes["session"] = Availability("this kernel has no kprobe.session links (Linux 6.10+): "
                                     "Invalid argument")
    with pytest.raises(errors.RunError, match=r"^--attach session: this kernel has no "
                                                 r"kprobe.session links"):
        attach.attach_modes("session", True, MANIFEST)
    assert [m.kind for m in attach.attach_modes("single", False, MANIFEST)] == ["single"]
    assert capsys.readouterr().err == ("btfgen trace: attaching one uprobe and uretprobe per "
                                       "function (as asked)\n")


def test_auto_for_a_program_without_uprobe_multi_takes_single_uprobes(probes, capsys):
    # Debian 12's 6.1: no uprobe.session (6.13+), no uprobe_multi (6.6+).
    probes["session"] = Availability("this kernel has no bpf_session_cookie kfunc (Linux 6.10+)")
    assert [m.kind for m in attach.attach_modes("auto", False, MANIFEST)] == ["multi"]
    capsys.readouterr()
    probes["umulti"] = Availability("this kernel has no uprobe_multi links (Linux 6.6+): "
                                     "Invalid argument")
    assert [m.kind for m in attach.attach_modes("auto", False, MANIFEST)] == ["single"]
    assert capsys.readouterr().err == (
        "btfgen trace: attaching one uprobe and uretprobe per function (this kernel has no "
        "uprobe_multi links (Linux 6.6+): Invalid argument)\n")


WRONG_COOKIES = ("this kernel's kprobe_multi links hand their programs the wrong cookie (a "
                 "link on getpid and getppid with cookies 1 and 2: its program saw 0 (none)): "
                 "each call would be read as another function's")


def test_auto_skips_kprobe_session_and_multi_where_their_cookies_are_wrong(probes, capsys):
    # Debian's 7.2.13 ppc64el: both links made, every program handed cookie 0.
    probes["cookies"] = Availability(WRONG_COOKIES)
    modes = attach.attach_modes("auto", True, MANIFEST)
    assert [m.kind for m in modes] == ["single"]
    assert capsys.readouterr().err == (
        f"btfgen trace: attaching one kprobe and kretprobe per function ({WRONG_COOKIES})\n")
    # User functions: uprobe_multi's cookie is the probe's own, not looked up by address.
    assert [m.kind for m in attach.attach_modes("auto", False, MANIFEST)] == ["session", "multi"]
    # Without kprobes either, nothing is left: both reasons said.
    probes["kprobes"] = Availability("this kernel has no kprobes either")
    with pytest.raises(errors.RunError, match=r"wrong cookie.*; this kernel has no kprobes"):
        attach.attach_modes("auto", True, MANIFEST)


def test_session_or_multi_asked_where_their_cookies_are_wrong_is_refused(probes, capsys):
    probes["cookies"] = Availability(WRONG_COOKIES)
    for asked in ("session", "multi"):
        with pytest.raises(errors.InputError, match=rf"^--attach {asked}: this kernel's "
                                                    r"kprobe_multi links hand .* wrong cookie"):
            attach.attach_modes(asked, True, MANIFEST)
    assert [m.kind for m in attach.attach_modes("single", True, MANIFEST)] == ["single"]
    assert [m.kind for m in attach.attach_modes("multi", False, MANIFEST)] == ["multi"]
    assert capsys.readouterr().err.splitlines() == [
        "btfgen trace: attaching one kprobe and kretprobe per function (as asked)",
        "btfgen trace: attaching uprobe_multi links (as asked)"]


def test_cookies_are_not_probed_where_there_are_no_kprobe_multi_links(probes, capsys,
                                                                      monkeypatch):
    def unasked(_n):
        raise AssertionError("the cookie probe ran without kprobe_multi links")

    monkeypatch.setattr(features, "kprobe_multi_cookies", unasked)
    probes["session"] = Availability("this kernel has no bpf_session_cookie kfunc (Linux 6.10+)")
    probes["multi"] = Availability("this kernel has no kprobe_multi links (built without "
                                    "CONFIG_FPROBE)")
    assert [m.kind for m in attach.attach_modes("auto", True, MANIFEST)] == ["single"]
    assert [m.kind for m in attach.attach_modes("multi", True, MANIFEST)] == ["multi"]
    assert "(this kernel has no kprobe_multi links (built without CONFIG_FPROBE))" in \
        capsys.readouterr().err


def test_the_cookie_probe_runs_here_and_answers_in_one_line():
    """On this machine's kernel: its program loads (the instructions are right for this
    machine's byte order), and the answer is one line: available, wrong cookies, or why the
    link could not be made (a kernel without kprobe_multi links: EOPNOTSUPP)."""
    if features.bpf_programs().why:
        pytest.skip(f"BPF unavailable: {features.bpf_programs().why}")
    features.kprobe_multi_cookies.cache_clear()
    answer = features.kprobe_multi_cookies(host_bpf_syscall())
    assert "\n" not in answer.why
    assert "refuses the program" not in answer.why, answer.why
    if answer and not features.kprobe_multi_links(host_bpf_syscall()):
        pytest.fail("cookies said right on a kernel without kprobe_multi links")


def test_bpf_instructions_put_dst_in_the_low_nibble_on_little_endian():
    insn = features._insn(0xbf, dst=2, src=10, off=-4, imm=7)
    regs = 0xa2 if sys.byteorder == "little" else 0x2a
    assert insn == bytes([0xbf, regs]) + (-4).to_bytes(2, sys.byteorder, signed=True) + \
        (7).to_bytes(4, sys.byteorder, signed=True)


def test_session_kfuncs_match_this_kernels_version():
    if features.bpf_programs().why:
        pytest.skip(f"BPF unavailable: {features.bpf_programs().why}")
    kfuncs = features.session_kfuncs()
    release = tuple(int(x) for x in platform.release().split(".")[:2])
    if release < (6, 10):
        assert not kfuncs and "bpf_session_cookie" in kfuncs.why
    else:
        assert kfuncs.variant == ("ctx" if release >= (7, 0) else "no_ctx"), kfuncs


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


# -- sleepable programs first, for user functions (issue 48, item 4) ---------------------------

SLEEPABLE = manifest(bpf_syscall=321, object="trace.bpf.o",
                     session_objects={"no_ctx": "s.o", "ctx": "s-ctx.o"},
                     sleepable_objects={"pair": "p.s.o", "no_ctx": "s.s.o", "ctx": "s-ctx.s.o"})


def test_user_modes_take_their_sleepable_programs_first(probes, capsys, monkeypatch):
    refused: dict[str, str] = {}
    monkeypatch.setattr(features, "sleepable_uprobes",
                        lambda _n, kind: features.Availability(refused.get(kind, "")))
    modes = attach.attach_modes("auto", False, SLEEPABLE)
    assert [(m.kind, m.object, m.sleepable) for m in modes] == [
        ("session", "s-ctx.s.o", True), ("session", "s-ctx.o", False),
        ("multi", "p.s.o", True), ("multi", "trace.bpf.o", False)]
    assert capsys.readouterr().err == ("btfgen trace: attaching one uprobe.session link, "
                                       "sleepable (entry and exit on one link)\n")
    # --no-sleepable: today's programs alone
    assert [m.object for m in attach.attach_modes("auto", False, SLEEPABLE, sleepable=False)] \
        == ["s-ctx.o", "trace.bpf.o"]
    capsys.readouterr()
    # a kernel that loads no sleepable uprobe program: said, and read as before
    refused["single"] = "the kernel refuses a sleepable uprobe program (Linux 6.0+): Invalid " \
                        "argument"
    assert [(m.kind, m.sleepable) for m in attach.attach_modes("single", False, SLEEPABLE)] \
        == [("single", False)]
    assert capsys.readouterr().err == (
        "btfgen trace: attaching one uprobe and uretprobe per function (as asked; not sleepable, "
        "user memory not yet paged in reads as a fault: the kernel refuses a sleepable uprobe "
        "program (Linux 6.0+): Invalid argument)\n")
    # kernel functions never: their programs are not uprobes
    assert not any(m.sleepable for m in attach.attach_modes("auto", True, SLEEPABLE))


# a user trace's: what its build names, as the one above
USER = manifest(kind="user", bpf_syscall=321, object="trace.bpf.o",
                session_objects={"no_ctx": "s.o", "ctx": "s-ctx.o"},
                sleepable_objects={"pair": "p.s.o", "no_ctx": "s.s.o", "ctx": "s-ctx.s.o"})


def test_the_objects_a_run_may_load_are_its_modes_objects_first_to_last(probes, capsys,
                                                                          monkeypatch):
    # What a one-step build compiles (btfgen.trace.build._loaded_here): each object the run's
    # plan may load, the first one first, nothing said; the run's own pick is the first.
    refused: dict[str, str] = {}
    monkeypatch.setattr(features, "sleepable_uprobes",
                        lambda _n, kind: features.Availability(refused.get(kind, "")))
    assert attach.objects_loaded("auto", USER) == ["s-ctx.s.o", "s-ctx.o", "p.s.o",
                                                        "trace.bpf.o"]
    assert attach.objects_loaded("auto", USER, sleepable=False) == ["s-ctx.o",
                                                                         "trace.bpf.o"]
    assert attach.objects_loaded("single", USER) == ["p.s.o", "trace.bpf.o"]
    probes["session"] = Availability(variant="no_ctx")
    assert attach.objects_loaded("session", USER) == ["s.s.o", "s.o"]
    probes["session"] = Availability("no uprobe.session links here")
    refused["multi"] = "refused"
    assert attach.objects_loaded("auto", USER) == ["trace.bpf.o"]
    assert capsys.readouterr().err == ""
    with pytest.raises(errors.RunError):  # the run's refusal, raised as the run raises it
        attach.objects_loaded("session", USER)
    assert attach.objects_loaded("auto", MANIFEST) is None  # a kernel trace: every object
    for asked in ("auto", "multi", "single"):
        first = attach.attach_modes(asked, False, USER)[0].object
        assert first == attach.objects_loaded(asked, USER)[0]


def test_a_directory_without_the_object_the_run_wants_is_one_line(probes, capsys):
    held = manifest(kind="user", bpf_syscall=321, object="trace.bpf.o",
                    session_objects={"no_ctx": "s.o", "ctx": "s-ctx.o"}, objects=["s-ctx.o"])
    assert attach.attach_modes("auto", False, held, sleepable=False)[0].object == "s-ctx.o"
    capsys.readouterr()
    with pytest.raises(errors.InputError) as e:
        attach.attach_modes("multi", False, held)
    assert str(e.value) == ("the trace directory holds no trace.bpf.o for the uprobe_multi "
                            "links (it has s-ctx.o: built for another run's attach mode); build "
                            "it with --build DIR to have every one")
    assert capsys.readouterr().err == ""  # not said to be attached
