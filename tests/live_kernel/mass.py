"""Mass attach in a guest: which kernel functions can be attached (asked of the guest once and
kept), trace directories for a set of them, the floor (an empty program on the same set
through one kprobe_multi link, or one kprobe each) measured in the guest, and the run side's
`--timings` lines read back. Shared by tests/live_kernel/test_mass_attach.py and
benchmarks/bench_mass_attach.py."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from btfgen.btf.reader import open_btf
from btfgen.trace import build as trace_build

from . import cache, python_guest
from .guest import Guest
from .kernel import Kernel

# An empty program: what any kprobe tool's attach costs at least, the floor btfgen's is held to.
EMPTY_BPF = """\
#define SEC(name) __attribute__((section(name), used))
SEC("kprobe") int empty(void *ctx) { return 0; }
SEC("kprobe") int empty_session(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
"""

# The trampoline's empty programs (--attach tracing-multi's link kinds, Linux 7.2 x86_64): type
# TRACING, set before load (floor.py), their own object (a kernel without them refuses the load).
EMPTY_TRAMPOLINE_BPF = """\
#define SEC(name) __attribute__((section(name), used))
SEC("kprobe") int empty_fsession_multi(void *ctx) { return 0; }
SEC("kprobe") int empty_fentry_multi(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
"""

# Run in the guest beside a trace directory's run side (/btfgen_probe): attach the empty
# program to the names of /names-N for each N asked, then detach, timing both (the same clock
# as --timings), and the memory the links took (MemAvailable before and after the attach): one
# link ("floor": one kprobe_multi link, or one kprobe each), an entry and a return link
# ("pair": what btfgen attaches without kprobe.session, or a kprobe and a kretprobe each), one
# kprobe.session link ("session", multi only: the same link kind as btfgen's kprobe path on 7.2,
# which registers the return hooks an entry-only link does not), and with mode multi+tramp one
# tracing_multi link of an fsession.multi program ("tramp": on the BTF ids of /tramp-ids-N, the
# functions the trampoline takes).
FLOOR_PY = """\
import sys, time
from btfgen_probe import bpf_object, syscall as sc
mode, syscall, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
obj = bpf_object.BpfObject("/empty.bpf.o", bpf_syscall=syscall)
if mode != "single":
    obj.expect_kprobe_multi("empty")
    obj.expect_kprobe_multi("empty_session", session=True)
obj.load()
links = [("floor", (False,)), ("pair", (False, True))]
if mode != "single":
    links.append(("session", (None,)))
if mode == "multi+tramp":
    tramp = bpf_object.BpfObject("/empty-tramp.bpf.o", bpf_syscall=syscall)
    tramp.expect_tracing("empty_fsession_multi", sc.BPF_TRACE_FSESSION_MULTI)
    tramp.set_autoload("empty_fentry_multi", False)
    tramp.load()
    links.append(("tramp", ("tramp",)))
def available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
for n in sizes:
    chosen = open(f"/names-{n}").read().split()
    for what, returns in links:
        if what == "tramp":
            ids = [int(i) for i in open(f"/tramp-ids-{n}").read().split()]
        before = available()
        start = time.perf_counter()
        for ret in returns:
            if ret == "tramp":
                try:
                    tramp.attach_tracing_multi("empty_fsession_multi", ids,
                                               list(range(len(ids))),
                                               sc.BPF_TRACE_FSESSION_MULTI, "fsession.multi")
                except Exception as e:  # said, and the other floors still measured
                    print(f"tramp {len(ids)} refused: {str(e).splitlines()[0]}", flush=True)
                    break
            elif ret is None:
                obj.attach_kprobe_multi("empty_session", chosen, list(range(len(chosen))),
                                        session=True)
            elif mode != "single":
                obj.attach_kprobe_multi("empty", chosen, list(range(len(chosen))), retprobe=ret)
            else:
                for i, name in enumerate(chosen):
                    obj.attach_kprobe("empty", name, i, retprobe=ret)
        attached = time.perf_counter()
        took = before - available()
        if what == "tramp" and not tramp.links:
            continue
        for o in (obj, tramp) if what == "tramp" else (obj,):
            for link in reversed(o.links):
                link.destroy()
            o.links.clear()
        print(f"{what} {len(ids) if what == 'tramp' else len(chosen)} attach "
              f"{attached - start:.6f} detach {time.perf_counter() - attached:.6f} "
              f"kib {took}", flush=True)
obj.close()
"""
FLOOR_LINE = re.compile(r"^(floor|pair|session|tramp) (\d+) attach (\d+\.\d+) detach "
                        r"(\d+\.\d+) kib (-?\d+)$", re.M)
TIME_LINE = re.compile(r"^btfgen_trace: time: ([a-z]+: [A-Za-z ]+): (\d+\.\d+) s$", re.M)
BUILD_LINE = re.compile(r"^btfgen trace: time: build: ([A-Za-z ]+): (\d+\.\d+) s$", re.M)
# What the guest needs of a trace directory (the generated C headers are the build's only).
RUN_FILES = re.compile(r"\.(py|json|o|bin)$")


def attachable(kernel: Kernel, btf: Path, unique: bool = False) -> list[str]:
    """The kernel functions ftrace can attach to (the guest's available_filter_functions) that
    its BTF has, sorted; asked of the guest once per kernel and kept in the live cache.
    `unique`, for one kprobe each: only names listed once (a kprobe by name refuses one several
    functions share, EADDRNOTAVAIL; kprobe_multi takes it) and not on the kprobe blacklist
    (NOKPROBE_SYMBOL: ftrace may attach there, a kprobe may not, EINVAL)."""
    dest = cache.ROOT / "results" / f"available-filter-functions-{kernel.release}.txt"
    if not dest.exists():
        g = Guest()
        g.step("aff", "cat /sys/kernel/tracing/available_filter_functions")
        boot = g.run(kernel)
        text, rc = boot.section("aff")
        assert rc == 0 and text.strip(), text[-2000:]
        cache.write_atomic(dest, text.encode())
    listed = [line.split()[0] for line in dest.read_text().splitlines() if line.strip()]
    known = set(listed)
    if unique:
        known -= {n for n, count in Counter(listed).items() if count > 1}
        known -= _kprobe_blacklist(kernel)
    names = {f.name for f in open_btf(str(btf)).funcs()}
    return sorted(known & names)


def _kprobe_blacklist(kernel: Kernel) -> set[str]:
    dest = cache.ROOT / "results" / f"kprobe-blacklist-{kernel.release}.txt"
    if not dest.exists():
        g = Guest()
        g.step("blacklist", "mount -t debugfs debugfs /sys/kernel/debug && "
                            "cat /sys/kernel/debug/kprobes/blacklist")
        text, rc = g.run(kernel).section("blacklist")
        assert rc == 0 and text.strip(), text[-2000:]
        cache.write_atomic(dest, text.encode())
    # "0xSTART-0xEND\tNAME" a line
    return {line.split()[-1] for line in dest.read_text().splitlines() if line.strip()}


def build_trace(btf: Path, arch: str, names: list[str], out: Path, deny: bool = True,
                stages: dict | None = None, trampoline: bool = True) -> list[str]:
    """A trace directory for `names` (globs leave out the deny list; names are kept as they
    are); the functions it traces, in cookie order. `stages` gets the build's --timings.
    trampoline=False: without the trampoline's programs, as for a kernel without them."""
    req = trace_build.Request(functions=names, kernel=True, btf=str(btf), arch=arch, deny=deny,
                              timings=stages is not None)
    said = io.StringIO()
    variants = trace_build.trampoline_variants
    try:
        if not trampoline:
            trace_build.trampoline_variants = lambda types: []
        with contextlib.redirect_stderr(said):
            functions = trace_build.build(req, out).functions
    finally:
        trace_build.trampoline_variants = variants
    if stages is not None:
        stages.update({m.group(1): float(m.group(2)) for m in BUILD_LINE.finditer(said.getvalue())})
    return functions


def empty_object(out: Path, name: str = "empty", text: str = EMPTY_BPF) -> Path:
    clang = shutil.which("clang-19") or shutil.which("clang")
    (out / f"{name}.bpf.c").write_text(text)
    subprocess.run([clang, "-O2", "-target", "bpfel", "-c", str(out / f"{name}.bpf.c"), "-o",
                    str(out / f"{name}.bpf.o")], check=True)
    return out / f"{name}.bpf.o"


def guest_with(kernel: Kernel, directories: dict[str, Path]) -> tuple[Guest, python_guest.Files]:
    """A guest with Debian's python3 and libbpf, each trace directory at /NAME (its run-side
    files only) and the run side's package at / too (floor.py's)."""
    py = python_guest.files(kernel.target)
    g = Guest(files=dict(py.files), links=dict(py.links))
    for name, directory in directories.items():
        for rel, f in python_guest.directory_files(directory):
            if RUN_FILES.search(f.name):
                g.file(f"{name}/{rel}", f.read_bytes(), 0o755 if f.suffix == ".py" else 0o644)
    first = next(iter(directories.values()))
    for rel, f in python_guest.directory_files(first / trace_build.PROBE_COPY):
        g.file(f"{trace_build.PROBE_COPY}/{rel}", f.read_bytes())
    g.file("floor.py", FLOOR_PY.encode(), 0o755)
    return g, py


def timings(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in TIME_LINE.finditer(text)}


def floors(text: str) -> dict[tuple[str, int], tuple[float, float, float]]:
    """("floor", "pair", "session" or "tramp", functions) -> (attach, detach) seconds and the
    KiB of memory the links took; the functions of "tramp" are those the trampoline takes."""
    return {(m.group(1), int(m.group(2))): (float(m.group(3)), float(m.group(4)),
                                            float(m.group(5)))
            for m in FLOOR_LINE.finditer(text)}


def spread(names: list[str], n: int) -> list[str]:
    """`n` of `names`, evenly spread over them (not the first n: one subsystem's prefix)."""
    if n >= len(names):
        return list(names)
    step = len(names) / n
    return [names[int(i * step)] for i in range(n)]
