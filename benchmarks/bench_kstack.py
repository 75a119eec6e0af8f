#!/usr/bin/env python3
"""`btfgen trace --kernel --stack kernel` and `--count --by kstack` beside bpftrace's `kstack`:
what each adds to a call of a kernel function, in Debian's amd64 guest under QEMU (TCG).

  python3 benchmarks/bench_kstack.py [--calls N] [--rounds R] [--no-bpftrace | --only-bpftrace]
      [--json FILE]

The function is shmem_file_llseek, called by a Python loop of N `os.lseek` on a tmpfs file in
the guest (the live tests' loop: tests/live_kernel/test_trace_stack.py), which prints its own
loop's time and its process's CPU time, so no tracer's start-up or exit is counted. Each row
runs that loop under one tracer, which takes only the loop's calls (a filter on the offset it
seeks to: Python's start-up seeks too; btfgen follows the process it runs besides); the figure
is the loop's CPU time over N, the median of the rounds, and what it adds over the loop alone:
the guest has one vCPU, which the tracer's reader shares with the loop, so the loop's wall time
(given too) counts whatever the reader did meanwhile, while its CPU time is its own and its
system calls' (the BPF program runs in the calling task, charged to it as system time):

- `btfgen trace --kernel` printing each call's entry (text, to a file), without a stack and with
  `--stack kernel` (each entry's kernel stack by bpf_get_stack, named by /proc/kallsyms), on one
  kprobe (`--attach single`, as bpftrace attaches) and as `auto` takes it (the trampoline on
  7.2 amd64); `--count` and `--count --by kstack` (counted by the tracer from each call's
  event) on one kprobe. The event rows run on a 64 MiB ring (`--ring-size`): room for every
  event of the default N, so the figure is the traced call's own cost.
- bpftrace (Debian unstable's package, in the guest, `-c` a shell running the loop then
  waiting 10 s for bpftrace to drain its ring, `/arg1 == OFFSET/`): `printf` a line and
  `print(kstack)` after it, against the `printf` alone; `@[kstack] = count()` against
  `@ = count()`.

Every row is checked: the stacks printed (each through do_syscall_64) or counted, plus the
records or events said lost, are N. bpftrace and what it loads (libLLVM, libclang, libbcc, z3:
~290 MB unpacked) are Debian's packages, fetched once into the live tests' cache
(~/.cache/btfgen-live) and put into the guest's initramfs beside Debian's Python; the guest is
given 3 GiB, its initramfs unpacked in its memory (the tests' 1 GiB was not tried).
Nothing in the test suite needs them. `--no-bpftrace` leaves these rows (and packages) out.

Under TCG every instruction is emulated: absolute times are tens of times a real machine's, so
only the ratios and the differences between rows of one run compare. Needs qemu-system-x86_64,
the network once (Debian's packages), clang and pahole for the trace directories.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # as pytest imports it (the cache pickles its classes)

from live_kernel import btf as live_btf  # noqa: E402
from live_kernel import cache, debian, mass, python_guest, scenario  # noqa: E402
from live_kernel import kernel as kernels  # noqa: E402
from live_kernel.targets import TARGETS  # noqa: E402

from btfgen.trace import build as trace_build  # noqa: E402

TARGET = "unstable-amd64"
FUNCTION = "shmem_file_llseek"
DEFAULT_CALLS = 20_000
DEFAULT_ROUNDS = 1
MEMORY_MIB = "3072"

# bpftrace 0.27's closure in unstable (Depends, recursively), less what only adds files the
# guest never opens (gcc-16-base: docs; libc-gconv-modules-extra: character sets).
BPFTRACE_PACKAGES = [
    "bpftrace", "libbpf1", "libbpfcc", "libbsd0", "libbz2-1.0", "libc6", "libclang-cpp21",
    "libclang1-21", "libdw1t64", "libedit2", "libelf1t64", "libffi8", "libgcc-s1", "libllvm21",
    "liblzma5", "libmd0", "libsframe3", "libstdc++6", "libtinfo6", "libxml2-16", "libz3-4",
    "libzstd1", "zlib1g",
]
_BPFTRACE_WANTED = r"^\./(usr/bin/bpftrace$|(usr/)?lib(64)?/)"

LOOP = f"""import os, sys, time
n = int(sys.argv[1])
fd = os.open('/tmp/seek', os.O_RDWR | os.O_CREAT)
t, cpu = time.perf_counter_ns(), time.process_time_ns()
for _ in range(n):
    os.lseek(fd, {scenario.SEEK_TO}, os.SEEK_SET)
print('loop', n, time.perf_counter_ns() - t, time.process_time_ns() - cpu, file=sys.stderr,
      flush=True)
"""
# bpftrace's command: the loop, then time for bpftrace to print what its ring still holds
# (with `-c` the loop itself, 0.27 stopped with a fifth of print(kstack)'s events unprinted,
# none said lost)
LOOP_THEN_WAIT = "#!/bin/sh\n{python} /loop.py $1\nsleep 10\n"
LOOP_LINE = re.compile(r"^loop (\d+) (\d+) (\d+)$", re.M)

# Run in the guest on a btfgen --json summary: the function's calls counted.
COUNTED = f"""import json
doc = json.load(open('/tmp/out'))
print('counted', sum(r['count'] for r in doc['counts'] if r['function'] == '{FUNCTION}'))
print('lost', doc.get('lost_records', 0))
"""


@dataclasses.dataclass(frozen=True)
class Row:
    label: str
    tool: str  # "btfgen" or "bpftrace"
    directory: str = ""  # btfgen: the trace directory's name in the guest
    options: str = ""  # btfgen: run options
    program: str = ""  # bpftrace: the program
    check: str = "stacks"  # "stacks": do_syscall_64 lines; "entries"; "counted"


def rows(bpftrace: bool, btfgen: bool = True) -> list[Row]:
    ring = "--ring-size 64"
    out = [
        Row("btfgen, entry printed, --attach single", "btfgen", "plain",
            f"--attach single {ring}", check="entries"),
        Row("btfgen, entry and --stack kernel printed, --attach single", "btfgen", "stack",
            f"--attach single {ring}"),
        Row("btfgen, entry printed, --attach auto", "btfgen", "plain", ring, check="entries"),
        Row("btfgen, entry and --stack kernel printed, --attach auto", "btfgen", "stack", ring),
        Row("btfgen --count, --attach single", "btfgen", "count", "--json --attach single",
            check="counted"),
        Row("btfgen --count --by kstack, --attach single", "btfgen", "kstack",
            f"--json --attach single {ring}", check="counted"),
    ]
    if not btfgen:
        out = []
    if bpftrace:
        # the loop's calls only (no other process seeks there); bpftrace's cpid is the shell
        probe = f"kprobe:{FUNCTION} /arg1 == {scenario.SEEK_TO}/"
        out += [
            Row("bpftrace, printf", "bpftrace", program=f'{probe} {{ printf("x\\n"); }}',
                check="entries"),
            Row("bpftrace, printf and print(kstack)", "bpftrace",
                program=f'{probe} {{ printf("x\\n"); print(kstack); }}'),
            Row("bpftrace, @ = count()", "bpftrace", program=f"{probe} {{ @ = count(); }}",
                check="counted"),
            Row("bpftrace, @[kstack] = count()", "bpftrace",
                program=f"{probe} {{ @[kstack] = count(); }}", check="counted"),
        ]
    return out


def bpftrace_files() -> tuple[dict, dict]:
    """bpftrace and its libraries as guest files and links (fetched and unpacked once)."""
    apt = debian.Apt("unstable", "amd64")
    files, links = {}, {}
    for package in BPFTRACE_PACKAGES:
        deb = apt.download(package)
        root = cache.ROOT / "unpacked" / deb.stem
        for path in debian.extract(deb, _BPFTRACE_WANTED):
            rel = str(path.relative_to(root))
            if "/gconv/" in rel or rel.endswith(".a"):
                continue
            if rel.startswith("lib"):  # an unmerged package's /lib: merged as Debian does
                rel = "usr/" + rel
            if path.is_symlink():
                links[rel] = os.readlink(path)
            elif path.is_file():
                files[rel] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return files, links


def build(btf: Path, arch: str, out: Path) -> dict[str, Path]:
    kinds = {"plain": {}, "stack": {"stack": ("kernel",)}, "count": {"count": True},
             "kstack": {"stack": ("kernel",),
                        "stack_keys": {"count": True, "latency": False, "by": "kstack"}}}
    dirs = {}
    for name, extra in kinds.items():
        req = trace_build.Request(functions=[FUNCTION], kernel=True, btf=str(btf), arch=arch,
                                  strings=False,
                                  filters=[f"{FUNCTION}: offset == {scenario.SEEK_TO}"], **extra)
        trace_build.build(req, out / name)
        dirs[name] = out / name
    return dirs


def step_command(row: Row, python: str, libs: str, calls: int) -> str:
    loop = f"{python} /loop.py {calls}"
    if row.tool == "btfgen":
        run = (f"{python} /{row.directory}/btfgen_trace.py --run /{row.directory} "
               f"{row.options} -- {loop}")
    else:
        run = f"bpftrace -e '{row.program}' -c '/bin/busybox sh /loop-then-wait.sh {calls}'"
    tail = "cat /tmp/err | tail -n 5"
    if row.check == "counted" and row.tool == "btfgen":
        tail += f"; {python} /counted.py"
    elif row.check == "counted":
        # `@: N`, or a stack key's closing `]: N`
        tail += ("; echo counted $(awk '/^(@.*|\\]): [0-9]+$/ {s += $NF} END {print s+0}' "
                 "/tmp/out)")
    elif row.check == "stacks":
        tail += "; echo counted $(grep -c do_syscall_64 /tmp/out)"
    else:
        entry = f"^{FUNCTION}(" if row.tool == "btfgen" else "^x$"
        tail += f"; echo counted $(grep -c '{entry}' /tmp/out)"
    return f"cd / && {libs}; {run} >/tmp/out 2>/tmp/err; rc=$?; {tail}; exit $rc"


def lost(text: str) -> int:
    """Records or events the tracer said it lost (btfgen: ring full; bpftrace: perf buffer)."""
    found = re.findall(r"(\d+) records lost|Lost (\d+) events", text)
    return sum(int(a or b) for a, b in found) + sum(
        int(m) for m in re.findall(r"^lost (\d+)$", text, re.M))


def measure(calls: int, rounds: int, with_bpftrace: bool, work: Path,
            with_btfgen: bool = True) -> dict:
    target = TARGETS[TARGET]
    k = kernels.fetch(target)
    kernels.busybox(target)
    btf = live_btf.vmlinux_btf(k)
    dirs = build(btf, target.arch, work)
    g, py = mass.guest_with(k, dirs)
    g.file("loop.py", LOOP.encode())
    g.file("counted.py", COUNTED.encode())
    g.file("loop-then-wait.sh", LOOP_THEN_WAIT.format(python=py.python).encode(), 0o755)
    if with_bpftrace:
        files, links = bpftrace_files()
        g.files.update(files)
        g.links.update(links)
        g.links.setdefault("lib64", "usr/lib64")
        # bpftrace compiles its program through /dev/fd/N
        g.step("devfd", "ln -s /proc/self/fd /dev/fd; bpftrace --version")
        memory = tuple(MEMORY_MIB if a == "1024" else a for a in target.qemu)
        k = dataclasses.replace(k, target=dataclasses.replace(target, qemu=memory))
    libs = f"export LD_LIBRARY_PATH={python_guest.library_path(target)}"
    asked = rows(with_bpftrace, with_btfgen)
    for r in range(rounds):
        g.step(f"alone-{r}", f"cd / && {py.python} /loop.py {calls}")
        for i, row in enumerate(asked):
            g.step(f"row{i}-{r}", step_command(row, py.python, libs, calls))
    boot = g.run(k, timeout=600 + rounds * len(asked) * (120 + calls / 100))
    times: dict[str, list[tuple[int, int]]] = {"loop alone": []}
    said: dict[str, list[int]] = {}
    failed: dict[str, str] = {}
    for r in range(rounds):
        text, rc = boot.section(f"alone-{r}")
        times["loop alone"].append(_loop_ns(text, calls, "alone"))
        for i, row in enumerate(asked):
            text, rc = boot.section(f"row{i}-{r}")
            counted = re.search(r"^counted (\d+)$", text, re.M)
            missing = calls - (int(counted.group(1)) if counted else 0)
            # a row that failed is said, and the others still measured
            if rc or missing != lost(text) or missing < 0:
                failed[row.label] = f"exit {rc}, {calls - missing} of {calls} calls seen"
                print(f"bench_kstack: {row.label}: {failed[row.label]}:\n{text[-3000:]}",
                      file=sys.stderr)
                continue
            times.setdefault(row.label, []).append(_loop_ns(text, calls, row.label))
            said.setdefault(row.label, []).append(lost(text))
    def per_call(label: str, which: int) -> float:
        return statistics.median(t[which] for t in times[label]) / calls

    out = []
    for label in times:
        wall, cpu = per_call(label, 0), per_call(label, 1)
        alone_wall, alone_cpu = per_call("loop alone", 0), per_call("loop alone", 1)
        out.append({"row": label, "ns_per_call": wall, "added_ns": wall - alone_wall,
                    "cpu_ns_per_call": cpu, "added_cpu_ns": cpu - alone_cpu,
                    "cpu_ratio": cpu / alone_cpu, "lost": max(said.get(label, [0]))})
    out += [{"row": label, "failed": why} for label, why in failed.items()]
    return {"kernel": k.release, "calls": calls, "rounds": rounds, "rows": out,
            "bpftrace": _version(boot) if with_bpftrace else None}


def _loop_ns(text: str, calls: int, what: str) -> tuple[int, int]:
    """The loop's wall time and its process's CPU time (user and system), ns."""
    m = LOOP_LINE.search(text)
    if not m or int(m.group(1)) != calls:
        raise SystemExit(f"bench_kstack: {what}: no loop line in:\n{text[-3000:]}")
    return int(m.group(2)), int(m.group(3))


def _version(boot) -> str:
    text, _ = boot.section("devfd")
    m = re.search(r"bpftrace (v\S+)", text)
    return m.group(1) if m else "?"


def table(result: dict) -> str:
    lines = [f"| {result['calls']:,} calls of {FUNCTION}, {result['rounds']} round(s), "
             "medians | loop's CPU a call, µs | added | × the loop alone | wall a call, µs | "
             "added | lost |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        if "failed" in row:
            lines.append(f"| {row['row']} | failed: {row['failed']} | | | | | |")
            continue
        lines.append(f"| {row['row']} | {row['cpu_ns_per_call'] / 1000:,.1f} | "
                     f"{row['added_cpu_ns'] / 1000:,.1f} | {row['cpu_ratio']:.2f} | "
                     f"{row['ns_per_call'] / 1000:,.1f} | {row['added_ns'] / 1000:,.1f} | "
                     f"{row['lost']:,} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--no-bpftrace", action="store_true")
    which.add_argument("--only-bpftrace", action="store_true",
                       help="bpftrace's rows and the loop alone, not btfgen's")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    if args.calls < 1 or args.rounds < 1:
        print("bench_kstack: --calls and --rounds must be at least 1", file=sys.stderr)
        return 2
    if not TARGETS[TARGET].qemu_available():
        print(f"bench_kstack: {TARGETS[TARGET].qemu[0]} is not installed", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-kstack-") as tmp:
        try:
            result = measure(args.calls, args.rounds, not args.no_bpftrace, Path(tmp),
                             not args.only_bpftrace)
        except debian.PackageError as e:
            print(f"bench_kstack: Debian's packages cannot be had: {e}", file=sys.stderr)
            return 2
    print(f"{TARGET} guest, Linux {result['kernel']}, QEMU TCG; bpftrace "
          f"{result['bpftrace'] or 'not run (--no-bpftrace)'}")
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
