"""`btfgen trace --filter` live on this machine's kernel (uprobes on filter_target.c): exactly
the matching calls come out, the verifier accepts the predicates, and a rejected entry takes its
exit with it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.probe import bpf_object, features, tracefs

HERE = Path(__file__).parent
FUNCS = ["f_int", "f_node", "f_str", "f_ret"]


def _require_live() -> None:
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the live target is built for x86_64")
    missing = [t for t in ("gcc", "clang-19", "pahole") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    reason = features.bpf_programs().why
    if reason:
        pytest.skip(f"live uprobes unavailable: {reason}")
    tracefs.mount_tracefs()


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    _require_live()
    out = tmp_path_factory.mktemp("filter") / "filter_target"
    proc = subprocess.run(["gcc", "-O2", "-g", str(HERE / "filter_target.c"), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def trace(exe: Path, *filters: str) -> list[str]:
    args = [a for f in filters for a in ("--filter", f)]
    proc = subprocess.run([sys.executable, "-m", "btfgen", "trace", *args, str(exe), *FUNCS],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.endswith("0 records lost (ring buffer full)\n"), proc.stderr
    # durations and addresses vary from run to run
    lines = [re.sub(r" \(\d+\.\d{3} us\)$", "", line) for line in proc.stdout.splitlines()]
    return [re.sub(r"0x[0-9a-f]{6,}", "ADDR", line) for line in lines]


def test_ints_signed_unsigned_bits_and_enums(exe):
    out = trace(exe, "f_int: a < -1 && flags & 0x800 || c == BLUE",
                "f_node: n->kind == 99", "f_str: s == \"none\"", "f_ret: x == 99")
    assert out == [
        "f_int(a=-5, b=10, flags=2048, c=RED(1))", "f_int -> 2054",
        "f_int(a=3, b=5000, flags=0, c=BLUE(7))", "f_int -> 5010",
        "f_int(a=-2, b=9223372036854775808, flags=2176, c=BLUE(7))",
        "f_int -> -9223372036854773627",
    ]
    # b is unsigned long: 1 << 63 is above 5000, not below it
    out = trace(exe, "f_int: b > 5000", "f_node: n->kind == 99", "f_str: s == \"none\"",
                "f_ret: x == 99")
    assert out == ["f_int(a=-2, b=9223372036854775808, flags=2176, c=BLUE(7))",
                   "f_int -> -9223372036854773627"]


def test_paths_through_pointers_bitfields_and_null(exe):
    out = trace(exe, "f_int: a == 99",
                'f_node: n->busy && n->lvl < 0 || n->next->kind == 9 && '
                'prefix(n->name, "alpha") && n->next->tag == "deep"',
                "f_str: s == \"none\"", "f_ret: x == 99")
    # nodes[0]: busy, lvl -3; nodes[1]: next is NULL (the read faults: false); nodes[2]: through
    # next; f_node(NULL): every path faults
    assert out == ["f_node(n=ADDR)", "f_node -> 1", "f_node(n=ADDR)", "f_node -> 3"]
    out = trace(exe, "f_int: a == 99", "f_node: n == 0 || n->mode == 2",
                "f_str: s == \"none\"", "f_ret: x == 99")
    assert out == ["f_node(n=ADDR)", "f_node -> 2", "f_node(n=0x0)", "f_node -> -1"]


def test_string_equality_and_prefix(exe):
    out = trace(exe, "f_int: a == 99", "f_node: n->kind == 99",
                'f_str: s == "/etc" || prefix(s, "/etc/")', "f_ret: x == 99")
    # "/etc/passwd", "/etc", "/etc/" of "/etc/passwd", "/etc", "/tmp/x", "/etc/", "", NULL
    # (the strings are captured too, by default: the filter's own reads are its own)
    assert out == ['f_str(s="/etc/passwd")', "f_str -> 47", 'f_str(s="/etc")', "f_str -> 47",
                   'f_str(s="/etc/")', "f_str -> 47"]
    out = trace(exe, "f_int: a == 99", "f_node: n->kind == 99", 'f_str: s == ""',
                "f_ret: x == 99")
    assert out == ['f_str(s="")', "f_str -> 0"]


def test_retval_filters_the_exit_and_a_rejected_entry_its_exit(exe):
    out = trace(exe, "f_int: a == 99", "f_node: n->kind == 99", "f_str: s == \"none\"",
                "f_ret: $retval >= 0 && x != 4")
    # x = 0..5 returns 2x - 5: exits of x = 3, 5 (x = 4's entry was rejected, so its exit is)
    assert out == ["f_ret(x=0)", "f_ret(x=1)", "f_ret(x=2)", "f_ret(x=3)", "f_ret -> 1",
                   "f_ret(x=5)", "f_ret -> 5"]


def test_kernel_object_with_filters_passes_the_verifier(tmp_path):
    """This machine's kernel has no kprobes to run it on (the QEMU guests do), but its verifier
    can judge the kernel-side object: filters through kernel pointers and strings, at entry and
    at exit."""
    _require_live()
    from btfgen.abi.arches import host_bpf_syscall

    if not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("no kernel BTF")
    out = tmp_path / "k"
    proc = subprocess.run(
        [sys.executable, "-m", "btfgen", "trace", "--kernel", "--build", str(out),
         "--filter", "vfs_read: count > 4096 && file->f_flags & 0x800 && "
                     "prefix(file->f_path.dentry->d_name.name, \"pass\") && $retval < 0",
         "--filter", "do_sys_openat2: prefix(filename, \"/etc/\") && how->flags != 0",
         "vfs_read", "do_sys_openat2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "btfgen_trace_wanted" in (out / "trace_filter.h").read_text()
    obj = bpf_object.BpfObject(str(out / "trace.bpf.o"), bpf_syscall=host_bpf_syscall())
    try:
        for prog in ("trace_entry", "trace_exit"):
            obj.expect_kprobe_multi(prog)
        obj.load()
    finally:
        obj.close()
