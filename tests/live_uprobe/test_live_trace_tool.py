"""`btfgen trace` end to end, as a user runs it: on the target built with -g (types
from its DWARF via pahole), on the same program built without debug information (types from
target.h via libclang), built and run as two steps, and its one-line errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import live_harness as harness
import pytest

from btfgen.abi.arches import host_bpf_syscall
from btfgen.probe import features

TOOL = ["-m", "btfgen", "trace"]

# What target.c passes and returns (live_expected.py), as the tool prints it.
EXPECTED = """\
add7(a=-1, b=-2, c=-3, d=-4, e=4000000000, f=20015998343868, g=-77)
add7 -> 20019998343781
take_pair(p={a=-5, b=1234567890123}, k=3)
take_pair -> 1234567890108
take_big(k=-9, b={x=11, y=-22, z=33}, c=BLUE(7))
take_big -> 20
make_pair(a=21, b=-8)
make_pair -> {a=42, b=-9}
make_big(a=1000)
make_big -> {x=1000, y=1001, z=-1000}
many(a=1, b=-2, c=3, d=-4, e=5, f=-6, g=7, h=-8, s={a=-70000, b=-300, c=-7, d=True}, i=90)
many -> -70220
take_flags(f={lo=5, mid=-200, hi=987654}, yes=True, u=18364758544493064720)
take_flags -> 1986216788
"""
FUNCS = ["add7", "take_pair", "take_big", "make_pair", "make_big", "many", "take_flags"]


def _trace(*args) -> str:
    proc = subprocess.run([sys.executable, *TOOL, *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.endswith("btfgen trace: 0 records lost (ring buffer full)\n"), proc.stderr
    return untimed(proc.stdout)


def untimed(text: str) -> str:
    """The lines without the call durations, after checking every exit has one (each was
    paired with its entry)."""
    lines = text.splitlines()
    for line in lines:
        if " -> " in line:
            assert re.search(r" \(\d+\.\d{3} us\)$", line), line
    return "".join(re.sub(r" \(\d+\.\d{3} us\)$", "", line) + "\n" for line in lines)


def test_types_from_debug_info(tmp_path):
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)
    assert _trace(str(exe), *FUNCS) == EXPECTED


def test_types_from_the_header_for_a_program_without_debug_info(tmp_path):
    harness.require_live()
    exe = tmp_path / "target-nodebug"
    harness.run(["gcc", "-O2", "-I", str(harness.HERE), str(harness.HERE / "target.c"), "-o",
                 str(exe)], "compiling the target without -g")
    out = _trace("--header", str(harness.HERE / "target.h"), str(exe), *FUNCS)
    assert out == EXPECTED


def test_unknown_function_is_one_line(tmp_path):
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)
    proc = subprocess.run([sys.executable, *TOOL, str(exe), "no_such_function"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("btfgen trace: no function 'no_such_function'")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_build_here_run_with_bare_python(tmp_path):
    """The two steps: --build needs btfgen and clang; --run only Python's standard library and
    libbpf, from the copied directory alone: a Python that cannot import btfgen (-I: no
    PYTHONPATH, no current directory; -S: no site-packages), elsewhere than the tree."""
    harness.require_live()
    exe, _ = harness.build_target(tmp_path)
    built = tmp_path / "built"
    proc = subprocess.run([sys.executable, *TOOL, "--build", str(built), str(exe), *FUNCS],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bare = [sys.executable, "-I", "-S"]
    proc = subprocess.run([*bare, "-c", "import importlib.util as u; "
                           "print(u.find_spec('btfgen'))"], capture_output=True, text=True,
                          cwd=elsewhere)
    assert proc.stdout == "None\n", proc.stdout + proc.stderr  # btfgen is out of reach
    proc = subprocess.run([*bare, str(built / "btfgen_trace.py"), "--help"],
                          capture_output=True, text=True, timeout=60, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: btfgen_trace ") and "--run DIR" in proc.stdout
    proc = subprocess.run([*bare, str(built / "btfgen_trace.py"), "--run", str(built)],
                          capture_output=True, text=True, timeout=300, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert untimed(proc.stdout) == EXPECTED
    # Building is btfgen's: the directory's own copy says so in one line.
    proc = subprocess.run([*bare, str(built / "btfgen_trace.py"), "--build", str(tmp_path / "b"),
                           str(exe), *FUNCS], capture_output=True, text=True, cwd=elsewhere)
    assert proc.returncode == 1
    assert proc.stderr == ("btfgen_trace: building needs btfgen (`btfgen trace`); build "
                           "elsewhere and use --run here\n"), proc.stderr


def test_kernel_functions_on_this_kernel():
    """This machine's kernel has no kprobe_multi and no kprobes (the QEMU tests in
    tests/live_kernel run the tool on kernels that do): the tool must say so in one line,
    after probing for both."""
    harness.require_live()
    multi = features.kprobe_multi_links(host_bpf_syscall())
    single = features.kprobes()
    proc = subprocess.run([sys.executable, *TOOL, "--kernel", "make_kuid", "--", "true"],
                          capture_output=True, text=True, timeout=300)
    if multi or single:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"btfgen trace: {multi.why}; {single.why}"


@pytest.mark.parametrize("args, status, start", [
    (["--kernel", "btfgen_no_such_function"], 1, "no function 'btfgen_no_such_function' in "),
    (["--kernel"], 2, "name the kernel functions"),
    (["--run", "/nonexistent-dir"], 2, "/nonexistent-dir: not a trace directory"),
    (["--run", "/tmp", "vfs_read"], 2, "--run takes no functions"),
    (["--kernel", "--btf", "/nonexistent.btf", "vfs_read"], 2, "/nonexistent.btf: no such file"),
    (["--kernel", "--btf", "/etc/passwd", "vfs_read"], 2, "/etc/passwd: neither BTF"),
    (["/nonexistent", "f"], 2, "/nonexistent: no such file"),
    (["--kernel", "--arch", "vax", "vfs_read"], 2, "unknown arch 'vax'"),
    (["--kernel", "--duration", "0", "vfs_read"], 2, "--pid and --duration must be positive"),
    (["--run", "/tmp", "--ring-size", "3"], 2, "--ring-size: a power of two"),
    (["--build", "/tmp/x", "--ring-size", "8", "--kernel", "vfs_read"], 2,
     "--attach, --ring-size and --no-sleepable are for tracing"),
])
def test_bad_input_is_one_line(args, status, start):
    if "btfgen_no_such_function" in args and not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("this kernel has no BTF to look the function up in")
    proc = subprocess.run([sys.executable, *TOOL, *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == status, proc.stderr
    assert proc.stderr.startswith(f"btfgen trace: {start}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_static_functions_of_one_name_with_different_prototypes_are_left_out(tmp_path):
    """kprobe_multi attaches by symbol name: where static functions of one name differ in
    prototype, which one a call reached is unknown, so the name is left out (and said so)
    rather than decoded with a guessed prototype. Same-prototype duplicates stay."""
    if shutil.which("clang-19") is None and shutil.which("clang") is None:
        pytest.skip("no clang to compile the BPF object")
    sys.path.insert(0, str(harness.HERE.parent / "btf"))
    from rawbtf import BtfWriter

    w = BtfWriter()
    i32 = w.int_("int", 4, encoding=1)
    i64 = w.int_("long", 8, encoding=1)
    one = w.func_proto(i32, [("a", i32)])
    two = w.func_proto(i64, [("a", i64), ("b", i64)])
    w.func("dup", one, linkage=0)
    w.func("dup", two, linkage=0)
    w.func("same", one, linkage=0)
    w.func("same", one, linkage=0)
    w.func("other", two)
    btf = tmp_path / "vmlinux.btf"
    btf.write_bytes(w.bytes())
    out = tmp_path / "trace"
    proc = subprocess.run([sys.executable, *TOOL, "--kernel", "--btf", str(btf), "--arch",
                           "x86_64", "--build", str(out), "dup", "same", "other"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "different prototypes: dup" in proc.stderr
    assert json.loads((out / "trace.json").read_text())["functions"] == ["same", "other"]
    only = subprocess.run([sys.executable, *TOOL, "--kernel", "--btf", str(btf), "--arch",
                           "x86_64", "--build", str(tmp_path / "t2"), "dup"],
                          capture_output=True, text=True, timeout=300)
    assert only.returncode == 1
    assert only.stderr.strip().splitlines()[-1] == "btfgen trace: nothing left to trace"


FORKS = r"""
#include <sys/wait.h>
#include <unistd.h>
long __attribute__((noinline)) work(int x, long y) { return x + y; }
int main(void)
{
	if (fork() == 0)
		return (int)work(7, -9) + 2;  /* exits 0 */
	wait(0);
	return (int)work(1, 2) - 3;
}
"""


def test_child_processes_of_the_traced_program_are_traced(tmp_path):
    """The tool follows what the program forks (sched_process_fork), and only that: a copy of
    the program run beside it is not traced."""
    harness.require_live()
    src = tmp_path / "forks.c"
    src.write_text(FORKS)
    exe = tmp_path / "forks"
    harness.run(["gcc", "-O2", "-g", str(src), "-o", str(exe)], "compiling forks.c")
    stranger = subprocess.Popen(["sh", "-c", f"while :; do {exe}; done"])
    try:
        out = _trace(str(exe), "work")
    finally:
        stranger.kill()
        stranger.wait()
    assert out.splitlines() == ["work(x=7, y=-9)", "work -> -2", "work(x=1, y=2)", "work -> 3"]
