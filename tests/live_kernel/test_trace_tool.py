"""`btfgen trace` on kernel functions, built on this machine and run in the guest.

The host builds a trace directory for the guest kernel's BTF and arch (`--kernel --btf --arch
--build`); the guest gets Debian's own python3 and libbpf1 (nothing else: no btfgen, no
compiler), runs `btfgen_trace.py --run DIR -- /loader ...` (the loader with an empty bundle only
makes the scenario's system calls) and the printed lines are checked against the values the
calls passed.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from btfgen.btf.reader import open_btf

from . import build, cache, printed, python_guest, scenario
from .conftest import btf_for, kernel_for
from .targets import TARGETS

pytestmark = pytest.mark.live

TOOL = ["-m", "btfgen", "trace"]
FUNCTIONS = [e.function for e in scenario.expectations(8, 4096)]
# An exit line ends with the time since its entry on the same thread.
DURATION = re.compile(r" \(\d+\.\d{3} us\)$")
# A glob, as a user would write one: matches shmem_file_llseek alone.
GLOBS = {"shmem_file_llseek": "shmem_file_llsee?"}
# No maps, no programs (each count padded to 8 bytes): the loader only makes the calls.
EMPTY_BUNDLE = b"BTFGBNDL" + bytes(16)
JIT = "/proc/sys/net/core/bpf_jit_enable"
# How the tool attaches on each target: one kprobe.session link where the kernel has them (the
# unstable 7.2 kernels with fprobe), else kprobe_multi pairs, else one kprobe and kretprobe per
# function with a cookie ("auto" finds out). The targets where auto takes the single ones:
SINGLE = {
    "bookworm-amd64",  # Debian's 6.1 lacks CONFIG_FPROBE
    "bookworm-i386",
    "unstable-armhf",  # armmp-lpae: no FPROBE on 32-bit arm
    "unstable-ppc64el",  # WRONG_COOKIES
}
# Where the kernel's kprobe_multi links hand their programs the wrong cookie (targets.py's
# multi_broken; its session links are kprobe_multi links too): the tool's probe finds it, auto
# says so and takes the single ones, and --attach multi is refused (exit 2).
WRONG_COOKIES = {"unstable-ppc64el"}
COOKIES_SAID = "this kernel's kprobe_multi links hand their programs the wrong cookie"
# Where auto takes a session link, the pair is also run, asked for with --attach multi.
SAID = {"session": "one kprobe.session link", "multi": "kprobe_multi links",
        "single": "one kprobe and kretprobe per function",
        "tracing_multi": "one fsession.multi link",
        "fentry_multi": "fentry.multi and fexit.multi links",
        "fsession": "one fsession program per function"}
# Where the kernel has the BPF trampoline's fsession.multi links (Linux 7.2 on x86_64), auto
# takes one, what the trampoline refuses (make_kuid's kuid_t, a struct returned) on a
# kprobe.session link of the same run; and the scenario again with --attach session.
TRAMPOLINE = {"unstable-amd64"}
# Where the kernel has fsession (Linux 7.0; arm64's JIT too, whose 7.2 refuses tracing_multi
# links: EOPNOTSUPP), the scenario again with --attach fsession: one program a function.
FSESSION = {"unstable-amd64", "unstable-arm64"}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_trace_tool_in_guest(name, tmp_path):
    k = kernel_for(name)
    t = k.target
    btf_path = btf_for(k)
    table = open_btf(str(btf_path))
    psize = table.pointer_size
    present = [f for f in FUNCTIONS if table.find_funcs(f)]
    out = tmp_path / "trace"
    proc = subprocess.run(
        [sys.executable, *TOOL, "--kernel", "--btf", str(btf_path), "--arch", t.arch,
         "--build", str(out), *(GLOBS.get(f, f) for f in present)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr

    g, py = python_guest.trace_guest(t, out)
    g.file("loader", build.loader(t).read_bytes(), 0o755)
    g.file("empty.bundle", EMPTY_BUNDLE)
    actions = " ".join(" ".join(a) for a in scenario.actions(psize))
    attach = "--attach auto"
    # The calls come from a child of the traced shell (`; true` keeps sh from exec'ing the
    # loader in its place): what the command forks is traced too.
    # Where the kernel boots with its BPF JIT off and refuses the program to the interpreter
    # (Debian's riscv64), the tool must say so, and runs once the JIT is on, as a user turns it
    # on. Kernels without BPF_JIT_ALWAYS_ON run it interpreted, and s390x has no such sysctl.
    # Where the kernel has session links, only the session is asked for here: its program
    # (kfuncs) is refused before it is verified, where auto goes on to the pair, whose refusal
    # comes at the end of a whole verification (a minute under TCG on riscv64). Auto does try
    # the pair, as a kernel may run that one interpreted.
    jit_attach = attach if name in SINGLE else "--attach session"
    g.step("jit", f"cd /trace && if [ -e {JIT} ] && [ \"$(cat {JIT})\" = 0 ]; then "
                  f"LD_LIBRARY_PATH={python_guest.library_path(t)} "
                  f"{py.python} btfgen_trace.py --run /trace {jit_attach} -- true >/tmp/jit 2>&1; "
                  f"echo \"exit $?\"; head -3 /tmp/jit; echo 1 > {JIT}; fi")
    g.step("trace", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                    f"{py.python} btfgen_trace.py --run /trace {attach} -- sh -c "
                    f"'/loader /empty.bundle {actions}; true' 2>&1")
    if name in TRAMPOLINE:
        g.step("kprobe", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                         f"{py.python} btfgen_trace.py --run /trace --attach session -- sh "
                         f"-c '/loader /empty.bundle {actions}; true' 2>&1")
        # The fentry.multi / fexit.multi pair itself, which auto does not take: its values
        # (entries' arguments, exits' returns), its exits unpaired and said so.
        g.step("fentry", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                         f"{py.python} btfgen_trace.py --run /trace --attach fentry-multi -- sh "
                         f"-c '/loader /empty.bundle {actions}; true' 2>&1")
    if name in FSESSION:
        g.step("fsession", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                           f"{py.python} btfgen_trace.py --run /trace --attach fsession -- sh "
                           f"-c '/loader /empty.bundle {actions}; true' 2>&1")
    if name not in SINGLE or name in WRONG_COOKIES:
        g.step("multi", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                        f"{py.python} btfgen_trace.py --run /trace --attach multi -- sh -c "
                        f"'/loader /empty.bundle {actions}; true' 2>&1")
    # --record: the ring read in place, its spans written to the file (each arch, 32-bit ring
    # positions included), decoded here.
    g.step("record", f"cd /trace && LD_LIBRARY_PATH={python_guest.library_path(t)} "
                     f"{py.python} btfgen_trace.py --run /trace {attach} --record /tmp/r.btfrec "
                     f"-- sh -c '/loader /empty.bundle {actions}; true' 2>&1; rc=$?; "
                     f"{py.python} -c 'import base64; print(\"RECORDING \" + base64.b64encode("
                     f"open(\"/tmp/r.btfrec\", \"rb\").read()).decode())'; exit $rc")
    # Every process, stopped with SIGINT as by Ctrl-C: each line names its caller.
    g.step("everyone", f"cd /trace && export LD_LIBRARY_PATH={python_guest.library_path(t)}; "
                       f"{py.python} btfgen_trace.py --run /trace {attach} 2>/tmp/err "
                       ">/tmp/out & "
                       "until grep -q ': tracing ' /tmp/err || ! kill -0 $! 2>/dev/null; "
                       "do sleep 0.2; done; "
                       f"/loader /empty.bundle lseek {scenario.SEEK_TO:#x} >/dev/null; "
                       "kill -INT $!; wait $!; rc=$?; cat /tmp/err /tmp/out; exit $rc")
    boot = g.run(k, timeout=900)  # up to nine runs of the scenario, under TCG
    jit, _ = boot.section("jit")
    if jit.strip() and jit.split()[:2] != ["exit", "0"]:
        assert "net.core.bpf_jit_enable = 0" in jit, f"{name}: JIT off, not said:\n{jit}"
    text, rc = boot.section("trace")
    assert rc == 0, f"{name}: the tool failed (exit {rc}):\n{text[-3000:]}"
    # Kept for reading (docs/trace.md's example output comes from here).
    cache.write_atomic(cache.ROOT / "results" / f"trace-tool-{name}.txt",
                       f"{k.release}, boot {boot.seconds:.1f}s\n{text}".encode())
    # The path taken is said, and is the one this kernel needs.
    mode = "single" if name in SINGLE else "tracing_multi" if name in TRAMPOLINE else "session"
    problems, checked, groups = _check(name, k, table, present, psize, text, mode)
    if name in TRAMPOLINE:
        refused = re.search(r"\(the BPF trampoline: the kernel's cheapest; (\d+) functions the "
                            r"trampoline cannot take \(as .*\) on one kprobe.session link\)$",
                            text, re.M)
        assert refused, f"{name}: what the trampoline refuses not said:\n{text[:2000]}"
        assert "was refused" not in text, f"{name}: the trampoline fell back:\n{text[:2000]}"
        # The exits whose entry the kernel skipped are counted, said with the missed calls.
        assert re.search(r"^btfgen_trace: \d+ of them entries whose exit ran", text, re.M), text
        kprobe, rc = boot.section("kprobe")
        assert rc == 0, f"{name}: --attach session failed (exit {rc}):\n{kprobe[-3000:]}"
        more, _, _ = _check(name, k, table, present, psize, kprobe, "session")
        problems += [f"--attach session: {p}" for p in more]
        pair, rc = boot.section("fentry")
        assert rc == 0, f"{name}: --attach fentry-multi failed (exit {rc}):\n{pair[-3000:]}"
        assert "was refused" not in pair, pair[:2000]
        assert "exits are shown without their entry's arguments and duration" in pair, pair[:2000]
        more, _, _ = _check(name, k, table, present, psize, pair, "fentry_multi")
        problems += [f"--attach fentry-multi: {p}" for p in more]
    if name in FSESSION:
        each, rc = boot.section("fsession")
        assert rc == 0, f"{name}: --attach fsession failed (exit {rc}):\n{each[-3000:]}"
        assert "was refused" not in each, each[:2000]
        more, _, _ = _check(name, k, table, present, psize, each, "fsession")
        problems += [f"--attach fsession: {p}" for p in more]
    if name in WRONG_COOKIES:
        said = re.search(rf"^btfgen_trace: attaching one kprobe and kretprobe per function "
                         rf"\(.*{COOKIES_SAID}.*\)$", text, re.M)
        assert said, f"{name}: auto did not say the cookies are wrong:\n{text[:2000]}"
        pair, rc = boot.section("multi")
        assert rc == 2, f"{name}: --attach multi not refused (exit {rc}):\n{pair[-3000:]}"
        assert re.search(rf"^btfgen_trace: --attach multi: {COOKIES_SAID}", pair, re.M), pair
    elif name not in SINGLE:
        pair, rc = boot.section("multi")
        assert rc == 0, f"{name}: the tool failed with --attach multi (exit {rc}):\n{pair[-3000:]}"
        more, _, _ = _check(name, k, table, present, psize, pair, "multi")
        problems += [f"--attach multi: {p}" for p in more]
    recorded, rc = boot.section("record")
    assert rc == 0, f"{name}: --record failed (exit {rc}):\n{recorded[-3000:]}"
    problems += [f"--record: {p}" for p in _check(name, k, table, present, psize,
                                                   _decoded(recorded, tmp_path), mode)[0]]
    everyone, rc = boot.section("everyone")
    assert rc == 0, f"{name}: tracing every process failed (exit {rc}):\n{everyone[-2000:]}"
    seek = re.compile(rf"^loader\[\d+\] shmem_file_llseek\(file=0x[0-9a-f]+, "
                      rf"offset={scenario.SEEK_TO}, whence=0\)$", re.M)
    if "shmem_file_llseek" in present and not seek.search(everyone):
        problems.append(f"every process: no loader[PID] shmem_file_llseek line:\n{everyone}")
    assert not problems, f"{name} ({k.release}):\n" + "\n".join(problems) + "\n" + text[-2000:]
    assert groups, f"{name}: no struct-by-value function was checked"
    assert checked >= 15, f"{name}: only {checked} values checked"


def _check(name: str, k, table, present: list[str], psize: int, text: str,
           mode: str) -> tuple[list[str], int, set[str]]:
    """(problems, values checked, struct groups checked) of one traced run of the scenario."""
    lines = [line.rstrip() for line in text.splitlines()]
    assert f"btfgen_trace: attaching {SAID[mode]}" in text, f"{name}: not {mode}:\n{text[:2000]}"
    assert re.search(r"^btfgen_trace: 0 records lost \(ring buffer full\)$", text, re.M), text
    # The ring is read in place on every arch (libatomic's fence where loads are reordered).
    assert "reading the ring buffer through libbpf" not in text, text[:2000]
    # The calls the kernel did not run the program for are read from it and said, every run
    # (on kernels before 6.7, with what they leave uncounted).
    missed = re.search(r"^btfgen_trace: (\d+) calls missed by the kernel \((.*)\)$", text, re.M)
    assert missed, text[-2000:]
    old_kernel = tuple(int(x) for x in k.release.split(".")[:2]) < (6, 7)
    assert ("before 6.7" in missed.group(2)) == old_kernel, missed.group(0)
    pagesize, calls = printed.loader_said(lines)
    problems, checked = [], 0
    groups: set[str] = set()
    for exp in scenario.expectations(psize, pagesize):
        f = exp.function
        if f not in present:
            assert exp.group, f"{name}: {f} not in the kernel's BTF"
            continue
        params = {p.name for p in table.find_funcs(f)[0].proto.params}
        want = {a: v for a, v in exp.args.items() if a in params or a not in exp.optional}
        at = _find_entry(lines, f, want)
        if at is None:
            seen = [line for line in lines if line.startswith(f + "(")]
            problems.append(f"{f}: no call with {want}; printed: {seen[:5]}")
            continue
        checked += len(want)
        if exp.group:
            groups.add(exp.group)
        ret = exp.returned(calls)
        if ret is None:
            continue
        got = next((DURATION.sub("", line.split(" -> ", 1)[1]) for line in lines[at + 1:]
                    if line.startswith(f + " -> ")), None)
        if got is None or not printed.same(ret, printed.value(got)):
            problems.append(f"{f}: return expected {ret:#x}, printed {got}")
        checked += 1
    return problems, checked, groups


def _decoded(section: str, tmp_path) -> str:
    """A --record step's output with the recording it printed (base64) decoded here in its
    place, as `btfgen decode` prints it."""
    import base64
    import contextlib
    import io

    from btfgen.recordings import replay

    kept, data = [], None
    for line in section.splitlines():
        if line.startswith("RECORDING "):
            data = base64.b64decode(line.split(" ", 1)[1])
        else:
            kept.append(line)
    assert data, f"no recording printed:\n{section[-2000:]}"
    path = tmp_path / "guest.btfrec"
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        replay.print_recording(str(path), out)
    assert "; 0 records lost" in err.getvalue(), err.getvalue()
    return "\n".join(kept) + "\n" + out.getvalue()


def _find_entry(lines: list[str], fn: str, want: dict[str, int]) -> int | None:
    for i, line in enumerate(lines):
        if line.startswith(fn + "(") and line.endswith(")"):
            args = printed.fields(line[len(fn) + 1:-1])
            if all(a in args and printed.same(v, printed.value(args[a])) for a, v in want.items()):
                return i
    return None
