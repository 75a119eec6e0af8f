#!/usr/bin/env python3
"""The ring buffer's readers side by side: how many of `btfgen trace`'s records a second each
takes out of a BPF_MAP_TYPE_RINGBUF map and hands on.

  sudo python3 benchmarks/bench_reader.py [--records N] [--rounds R] [--json FILE]

Uprobes top out near 200,000 calls a second here, below what a reader can take, so the records
come from a producer instead: a `tc` program run under BPF_PROG_TEST_RUN with `repeat` (as
bench_generic.py runs its programs) that does what trace.bpf.c does at a call and a return --
struct trace_event's head (the caller, bpf_ktime_get_ns, the CPU), then the generic decoder by
the function's attach cookie and spec (btfgen_generic_decode_by_cookie, the generated header's)
into the record -- and writes it to the ring at its real length. The functions are real: a
small program (TRACED, built with gcc -g) traced with `btfgen trace --build`, whose directory
gives the specs, the cookies, the BTF ids and the generated decoders the readers decode with:

- `six(long, int, unsigned short, void *, unsigned char, long long)`: six scalars, all in
  registers (decoded on the register image);
- `named(const char *name, long n)`: its string captured (trace's default, 256 bytes), here
  255 characters and the NUL, read from this process's memory by bpf_probe_read_user_str.

Every call is an entry record and an exit record, as a traced call makes. A ring has one
consumer position, so the readers take turns: a reader's ring (each its own, of one size, so
that its position stays its own, as a tracer's single reader's does) is filled with --records
records (a call's pair --records/2 times), then drained by that reader alone; then the next
reader's. The order alternates from round to round, and each figure is the median of the
rounds. Each reader is made once and reads every round, as a tracer's reader reads for as long
as it runs: a first round, which faults its mapping of the ring in, is not counted. Its clock
runs from its first read of the ring to its last write (a recording's header, written when the
file is made, is outside); each must take every record the producer made, and the table says
where one did not. The readers:

- `libbpf (C)`: benchmarks/ring_reader.c, built here with cc and -lbpf, one process serving
  every round: ring_buffer__consume() with a callback that copies each record into a 1 MiB
  buffer written to a file whenever full, what a recorder written in C does; again with the
  buffer written to /dev/null (libbpf's consumer and the copy alone);
- `--record`: the run side's recording path as run.run wires it: run.recorder's writer
  (recording.Writer, as `btfgen trace --record` makes it) taking each span of the ring in one
  write, fed through losses.Behind by run.reader (ringspan.RingReader: the ring's pages read in
  place);
- `text`: the run side's printing path as run.run wires it: output.Printer (lines batched,
  written after each drain) fed each span, the same way, its records read where they lie
  (ringspan.Span.places), writing to /dev/null.

Records/s and MB/s (10^6 bytes of records, without the ring's 8-byte headers) at each size,
and --record's records/s over libbpf's C consumer's (the median of each round's ratio); then
the same per second of each reader's own CPU time (user and system: the C reader's thread's, a
Python reader's process's, whose threads are the reader's alone while it reads), which other
work on a shared machine moves less. Needs root (BPF), x86_64 (the producer's register image
is x86_64's pt_regs), gcc, clang and pahole (the trace build); the C rows need libbpf's headers
(Debian: libbpf-dev) and say so when they are missing. Prints figures, asserts nothing of their
speed (tests/trace/test_bench_reader.py runs it small and checks the counts).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from btfgen.probe import features, spec_format  # noqa: E402 (after the path insert above)

C_READER = ROOT / "benchmarks" / "ring_reader.c"
DEFAULT_RECORDS = 100_000
DEFAULT_ROUNDS = 5

TRACED = r"""
/* The functions bench_reader.py's records are of (never run: the trace build reads them). */
__attribute__((noinline)) long six(long a, int b, unsigned short c, void *d, unsigned char e,
				   long long f)
{
	__asm__ volatile("" : : : "memory");
	return a + b + c + e + f + (long)d;
}

__attribute__((noinline)) long named(const char *name, long n)
{
	__asm__ volatile("" : : "r"(name) : "memory");
	return name[0] + n;
}

int main(int argc, char **argv)
{
	return (int)(six(argc, 1, 2, 0, 3, 4) + named(argv[0], argc));
}
"""

PRODUCER = r"""
/* bench_reader.py's producer: a traced call's entry and exit records, as trace.bpf.c makes
 * them, written to a ring at each run (program call<key>_<ring>: function <key>, ring <ring>).
 * Built with trace.bpf.c's flags (BTFGEN_USER: values read with bpf_probe_read_user, here from
 * the benchmark's own memory, the task that runs BPF_PROG_TEST_RUN). */
#include "btfgen.bpf.h"
#include "trace_event.h"
char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, BTFGEN_TRACE_MAX_FUNCTIONS);
	__type(key, __u32);
	__type(value, struct btfgen_spec);
} specs SEC(".maps");

/* A ring a reader (events0, events1, ...): each reader's position in its own ring stays its
 * own from round to round, as a tracer's single reader's does. Beside each, the count of what
 * was committed to it, as trace.bpf.c keeps it on 64-bit targets (its `committed`): the
 * --record reader that is given it hands over raw spans, unwalked. */
#define RING(n) \
	struct { \
		__uint(type, 27 /* BPF_MAP_TYPE_RINGBUF */); \
		__uint(max_entries, 1 << 22); /* sized by the benchmark before loading */ \
	} events##n SEC(".maps"); \
	struct { \
		__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */); \
		__uint(max_entries, 1); \
		__uint(map_flags, 1 << 10 /* BPF_F_MMAPABLE */); \
		__type(key, __u32); \
		__type(value, __u64); \
	} committed##n SEC(".maps");
RING(0)
RING(1)
RING(2)
RING(3)
RING(4)

/* What a call of each function finds, as user space sets it: the pt_regs image (arguments and
 * return value), the stack image, the function's attach cookie, and who called. */
struct call {
	__u64 regs[32];
	__u64 stack[16];
	__u64 cookie;
	__u32 tgid;
	__u32 pid;
	char comm[16];
};

struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct call);
} calls SEC(".maps");

/* [0]: records written; [1]: records the ring had no room for. One CPU runs the producer at a
 * time (BPF_PROG_TEST_RUN on the caller's), so plain adds. */
struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* The event is made here, then copied to the ring at the length the tracer's record of this
 * function and kind has (a constant per program: SIZE_<key>_<kind>), as a tracer writing a
 * record shorter than struct trace_event would copy it. */
struct trace_event scratch;

static __always_inline void count(__u32 at)
{
	__u64 *n = bpf_map_lookup_elem(&counts, &at);

	if (n)
		*n += 1;
}

static __always_inline int one(void *ring, void *committed, struct call *c, __u32 kind,
			       __u32 size)
{
	__u32 zero = 0;
	__u64 *sum;
	struct trace_event *e = &scratch;

	e->tgid = c->tgid;
	e->pid = c->pid;
	__builtin_memcpy(e->comm, c->comm, sizeof(e->comm));
	e->ns = bpf_ktime_get_ns();
	e->cpu = bpf_get_smp_processor_id();
	e->flags = 0;
	if (btfgen_generic_decode_by_cookie(c->regs, (__u64)(unsigned long)c->stack, c->cookie,
					    &specs, kind, &e->rec) == -2)
		return 1; /* no spec at the cookie's key: nothing written */
	if (bpf_ringbuf_output(ring, e, size, 1 /* BPF_RB_NO_WAKEUP */)) {
		count(1);
		return 0;
	}
	sum = bpf_map_lookup_elem(committed, &zero);
	if (sum)
		__sync_fetch_and_add(sum, (((__u64)size + 8 + 7) & ~7ULL) + (1ULL << 36));
	count(0);
	return 0;
}

#define CALL(key, ring) \
	SEC("tc") int call##key##_##ring(void *skb) \
	{ \
		__u32 k = key; \
		struct call *c = bpf_map_lookup_elem(&calls, &k); \
		if (!c) \
			return 1; \
		return one(&events##ring, &committed##ring, c, 0, SIZE_##key##_0) | \
		       one(&events##ring, &committed##ring, c, 1, SIZE_##key##_1); \
	}
#define CALLS(ring) CALL(0, ring) CALL(1, ring)
CALLS(0)
CALLS(1)
CALLS(2)
CALLS(3)
CALLS(4)
"""

# x86_64 pt_regs, by word: di, si, dx, cx, r8, r9 (PT_REGS_PARM1..6), ax (the return value).
ARG_WORDS = (14, 13, 12, 11, 9, 8)
RET_WORD = 10
CALL = struct.Struct("<32Q16QQII16s")  # struct call
STRING = b"0123456789abcdef" * 15 + b"0123456789abcde"  # 255 characters: 256 bytes with the NUL
# Each function's arguments and return value in the producer's register image.
VALUES = {"six": ((-5, 1234, 65535, 0xDEADBEEF000, 200, 1 << 40), 1099511694330)}
SIZES = (("six", "6 arguments"), ("named", "a 256-byte string"))


class Failed(Exception):
    """The benchmark cannot run here, or a step failed: one line."""


class Setup(NamedTuple):
    directory: Path  # the trace directory
    manifest: dict
    decoders: object  # the generated module
    obj: object  # the producer, loaded (btfgen.probe.bpf_object.BpfObject)
    keys: dict  # function name -> its key (specs, calls, program call<key>)
    sizes: dict  # function name -> (entry, exit) record bytes
    size_source: str
    c_reader: Path | None
    c_missing: str  # why the C reader is missing ("" when built)
    work: Path


def checks() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    if platform.machine() != "x86_64":
        return f"the producer's register image is x86_64's pt_regs; this is {platform.machine()}"
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_tracers import missing_tools

    missing = missing_tools()
    if missing:
        return f"not installed: {', '.join(missing)}"
    return features.bpf_programs().why or None


def record_sizes(decoders, name: str) -> tuple[tuple[int, int], str]:
    """The bytes of `name`'s entry and exit records in the ring, as the tracer writes them,
    and where that figure comes from: the run side's spec_format.event_size (from the
    function's descriptor) where this tree has it, else a whole struct trace_event (its head,
    the record's head and the generic record's data), every record's length before records
    took the size of what they hold."""
    sized = getattr(spec_format, "event_size", None)
    if sized is not None:
        desc = decoders._descriptor(name)[0]  # what run.recorder hands the writer
        return (sized(desc, 0), sized(desc, 1)), "spec_format.event_size (the descriptor's)"
    from btfgen.decoder.generic import DATA_SIZE

    whole = (spec_format.size_of(spec_format.EVENT_HEAD)
             + spec_format.size_of(spec_format.RECORD_HEAD) + DATA_SIZE)
    return (whole, whole), "sizeof(struct trace_event), every record's length in this tree"


def _check(argv: list, what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise Failed(f"{what}: {said[-1] if said else f'exit {proc.returncode}'}")


def build_c_reader(work: Path) -> tuple[Path | None, str]:
    """ring_reader.c built against the system's libbpf, or why it cannot be."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler (cc)"
    probe = subprocess.run([cc, "-E", "-x", "c", "-"], input="#include <bpf/libbpf.h>\n",
                           capture_output=True, text=True)
    if probe.returncode:
        return None, "libbpf's headers are not installed (Debian: libbpf-dev)"
    exe = work / "ring_reader"
    _check([cc, "-O2", "-Wall", str(C_READER), "-lbpf", "-o", str(exe)], "building ring_reader.c")
    return exe, ""


def build(work: Path, records: int) -> Setup:
    from btfgen.probe.bpf_object import BpfObject
    from btfgen.probe.manifest import cookies, load_decoders, load_manifest

    (work / "traced.c").write_text(TRACED)
    exe = work / "traced"
    _check(["gcc", "-O2", "-g", str(work / "traced.c"), "-o", str(exe)], "compiling traced.c")
    directory = work / "trace-dir"
    _check([sys.executable, "-m", "btfgen", "trace", "--build", str(directory), str(exe),
            *(name for name, _ in SIZES)], "btfgen trace --build")
    manifest = load_manifest(directory)
    decoders = load_decoders(directory, manifest)
    names, order = manifest.functions, manifest.byte_order
    specs = (directory / manifest.specs).read_bytes()
    keys = {name: names.index(name) for name, _ in SIZES}
    sizes, source = {}, ""
    for name in keys:
        sizes[name], source = record_sizes(decoders, name)
    flags = [f"-DSIZE_{keys[n]}_{kind}={sizes[n][kind]}" for n in keys for kind in (0, 1)]
    clang = shutil.which("clang-19") or shutil.which("clang")
    (work / "producer.bpf.c").write_text(PRODUCER)
    _check([clang, "-O2", "-g", "-target", "bpfel" if order == "little" else "bpfeb",
            "-D__TARGET_ARCH_x86", "-DBTFGEN_USER", "-DBTFGEN_GENERIC_ONLY", *flags,
            f"-I{directory}", f"-I{ROOT / 'btfgen' / 'trace'}", "-c",
            str(work / "producer.bpf.c"), "-o", str(work / "producer.bpf.o")],
           "compiling the producer")
    c_reader, c_missing = build_c_reader(work)
    obj = BpfObject(str(work / "producer.bpf.o"), bpf_syscall=manifest.bpf_syscall)
    try:
        for ring in range(RINGS):
            obj.set_max_entries(f"events{ring}",
                                ring_bytes(records, max(max(s) for s in sizes.values())))
        obj.load()
        obj.fill_array("specs", specs, len(names))
        each = cookies(decoders, specs, len(names), order)
        for name, key in keys.items():
            obj.update("calls", struct.pack("I", key), call_image(name, each[key]))
        setup = Setup(directory, manifest, decoders, obj, keys, sizes, source, c_reader,
                      c_missing, work)
        check_records(setup)
    except BaseException:
        obj.close()
        raise
    return setup


def check_records(setup: Setup) -> None:
    """One call of each function through the ring, decoded by the generated module: the
    records are the tracer's (their lengths, values and string), or the benchmark stops."""
    from btfgen.probe.ringbuf import RingBuffer

    event_head = spec_format.size_of(spec_format.EVENT_HEAD)
    for name in setup.keys:
        fill(setup, name, 2)
        got: list = []
        with RingBuffer(setup.obj.map_fd("events0"), got.append) as rb:
            while rb.drain() > 0:
                pass
        fn = setup.decoders.function(name)
        lengths = tuple(len(raw) for raw in got)
        entry, ret = (memoryview(raw)[event_head:] for raw in got) if len(got) == 2 else (b"", b"")
        args = fn.decode_record(entry) if entry else None
        if name == "named":
            caps = fn.decode_captures(entry) if entry else {}
            string = caps.get("name")
            ok = (args == (ctypes.addressof(_STRING_BUF), 42) and string == STRING.decode()
                  and not string.truncated and fn.decode_record(ret) == ord("0") + 42)
        else:
            ok = args == VALUES[name][0] and fn.decode_record(ret) == VALUES[name][1]
        if lengths != setup.sizes[name] or not ok:
            raise Failed(f"the producer's records of {name} are not the tracer's: lengths "
                         f"{lengths} (expected {setup.sizes[name]}), decoded {args!r}")


_STRING_BUF = ctypes.create_string_buffer(STRING)  # kept for as long as the producer reads it


def call_image(name: str, cookie: int) -> bytes:
    regs = [0] * 32
    if name == "named":  # its string, read by bpf_probe_read_user_str from this process
        args, ret = (ctypes.addressof(_STRING_BUF), 42), ord("0") + 42
    else:
        args, ret = VALUES[name]
    for word, value in zip(ARG_WORDS, args):
        regs[word] = value & (1 << 64) - 1
    regs[RET_WORD] = ret & (1 << 64) - 1
    comm = Path("/proc/self/comm").read_bytes().strip()[:15]
    return CALL.pack(*regs, *[0] * 16, cookie, os.getpid(), os.getpid(), comm)


def ring_bytes(records: int, size: int) -> int:
    """A ring holding `records` records of `size` bytes (each with its 8-byte header, padded to
    8): a power of two, at least 16 pages."""
    need = records * ((size + 8 + 7) // 8 * 8)
    ring = 16 * os.sysconf("SC_PAGE_SIZE")
    while ring < need:
        ring *= 2
    return ring


# -- the producer -----------------------------------------------------------------------------

def _counts(obj) -> tuple[int, int]:
    made, lost = (int.from_bytes(obj.lookup("counts", struct.pack("I", at), 8), "little")
                  for at in (0, 1))
    return made, lost


class Made(NamedTuple):
    records: int
    run_ns: float  # the producer's mean time a run (a call: two records), as the kernel says


def fill(setup: Setup, name: str, records: int, ring: int = 0) -> Made:
    """Put `records` records of `name` in ring `ring` (a call's entry and exit, records/2
    times): the records made, which must be all of them."""
    from btfgen.probe.libbpf import TestRunOpts, libbpf

    lib = libbpf()
    lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.c_void_p]
    obj = setup.obj
    for at in (0, 1):
        obj.update("counts", struct.pack("I", at), bytes(8))
    packet = ctypes.create_string_buffer(64)  # an Ethernet header's worth: tc's minimum
    opts = TestRunOpts(sz=ctypes.sizeof(TestRunOpts), data_in=ctypes.addressof(packet),
                       data_size_in=64, repeat=records // 2)
    fd = lib.bpf_program__fd(obj.program(f"call{setup.keys[name]}_{ring}"))
    if lib.bpf_prog_test_run_opts(fd, ctypes.byref(opts)) or opts.retval:
        raise Failed(f"the producer failed (errno {ctypes.get_errno()}, returned {opts.retval})")
    made, lost = _counts(obj)
    if lost or made != records // 2 * 2:
        raise Failed(f"the producer made {made} of {records // 2 * 2} records ({lost} found no "
                     "room in the ring)")
    return Made(made, float(opts.duration))


# -- the readers ------------------------------------------------------------------------------

class Read(NamedTuple):
    records: int  # what the reader handed on (counted where it lands: file, lines)
    seconds: float
    cpu: float  # seconds of the reader's CPU time (user and system; a Python reader's threads)


class _Lines:
    """/dev/null for the printer, counting the lines it is given (a batch's join: one count
    a write)."""

    def __init__(self) -> None:
        self.file = open(os.devnull, "w")  # noqa: SIM115 (closed by close())
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return self.file.write(text)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


# Each reader is made once and reads every round, as a tracer's reader reads for as long as it
# runs: its mapping of the ring (faulted in by the first round, which is not counted), its
# decoders and its handlers are warm after that.

class CReader:
    """ring_reader, one process for every round, its buffer written to `out`."""

    def __init__(self, setup: Setup, fd: int, out: Path) -> None:
        self.proc = subprocess.Popen([str(setup.c_reader), str(fd), str(out)], pass_fds=(fd,),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def read(self, expect: int) -> Read:
        self.proc.stdin.write(f"{expect}\n")
        self.proc.stdin.flush()
        said = self.proc.stdout.readline()
        m = re.match(r"ring_reader: (\d+) records (\d+) bytes (\d+) ns (\d+) cpu ns", said)
        if not m:
            self.proc.kill()
            raise Failed(f"ring_reader: {self.proc.communicate()[1].strip() or 'no answer'}")
        return Read(int(m[1]), int(m[3]) / 1e9, int(m[4]) / 1e9)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


class RecordReader:
    """`btfgen trace --record`'s path, as run.run wires it: run.recorder's writer (a new
    recording a round, its header written when the file is made, outside the clock), its
    `span` fed through losses.Behind by run.reader (the ring's pages read in place: ringspan);
    the recording then read back, outside the clock, for the events it holds."""

    def __init__(self, setup: Setup, fd: int, committed_fd: int | None = None) -> None:
        from btfgen.probe import run
        from btfgen.probe.losses import Behind

        self.setup, self.path = setup, setup.work / f"bench-{fd}.rec"
        self.writer = None
        self.ring = run.reader(fd, Behind(self._span, setup.manifest.byte_order).span,
                               committed_fd)

    def _span(self, span) -> None:
        self.writer.span(span)

    def read(self, expect: int) -> Read:
        from btfgen.probe import run
        from btfgen.recordings.reader import Reader

        setup = self.setup
        self.writer = run.recorder(str(self.path), setup.manifest, setup.decoders, who=False)
        # The process's CPU time: the writer takes a long span's checks on a thread of its own.
        cpu, start = time.process_time(), time.perf_counter()
        while self.ring.drain() > 0:
            pass
        self.writer.close(0)
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        with Reader(str(self.path)) as r:
            kept = sum(sum(1 for _ in batch.events(r.strides)) for batch in r.batches())
            if r.cut or r.events != kept:
                raise Failed(f"{self.path}: the recording says {r.events} events, holds {kept}"
                             + (f", cut at byte {r.cut[0]}" if r.cut else ""))
        self.path.unlink()
        return Read(kept, took, cpu)

    def close(self) -> None:
        self.ring.close()


class TextReader:
    """`btfgen trace`'s text path, as run.run wires it: output.Printer (lines batched, written
    after each drain of the ring) fed a span at a time (Printer.records), through
    losses.Behind, by run.reader; writing to /dev/null, a line an event."""

    def __init__(self, setup: Setup, fd: int) -> None:
        from btfgen.probe import output, run
        from btfgen.probe.losses import Behind
        from btfgen.probe.manifest import LazyFunctions

        m = setup.manifest
        self.out = _Lines()
        self.printer = output.Printer(LazyFunctions(setup.decoders, m.functions,
                                                    m.btf_ids),
                                      m.byte_order, self.out, batch=True)

        self.ring = run.reader(fd, Behind(self.printer.records, m.byte_order).span)  # run's

    def read(self, expect: int) -> Read:
        before = self.out.lines
        cpu, start = time.process_time(), time.perf_counter()
        while self.ring.drain() > 0:
            self.printer.flush_lines()
        self.printer.flush_lines()
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        return Read(self.out.lines - before, took, cpu)

    def close(self) -> None:
        self.ring.close()
        self.out.close()


# (key, label, how it is made): the C consumer twice, its buffer written to a file as a
# recorder's (what --record is set against) and to /dev/null (libbpf's consume and the copy
# alone).
# --record twice: as the tracer reads on a 64-bit target (the BPF side's count: raw spans, no
# header walked), and with no count (a 32-bit target's: every header walked).
READERS = (("c", "libbpf (C)", lambda s, fd, c: CReader(s, fd, s.work / "c-reader.out")),
           ("c_null", "libbpf (C), to /dev/null",
            lambda s, fd, c: CReader(s, fd, Path(os.devnull))),
           ("record", "--record", RecordReader),
           ("record_walked", "--record, every header walked (no count: 32-bit)",
            lambda s, fd, c: RecordReader(s, fd)),
           ("text", "text", lambda s, fd, c: TextReader(s, fd)))
C_READERS = ("c", "c_null")
RINGS = 5  # the producer's rings (events0..4): one a reader


# -- the rounds and the table -----------------------------------------------------------------

def measure(setup: Setup, records: int, rounds: int, progress=lambda _: None) -> dict:
    """Per size, per reader: each round's (records made, records read, seconds, CPU seconds);
    and per
    size, "producer": each fill's ns a call. Each reader first reads one round uncounted."""
    runs: dict = {name: {"producer": []} for name, _ in SIZES}
    readers = []
    try:
        for ring, (key, label, make) in enumerate(READERS):
            if key not in C_READERS or setup.c_reader:
                fd = setup.obj.map_fd(f"events{ring}")
                counted = setup.obj.map_fd(f"committed{ring}")
                readers.append((key, label, ring, _said(label, make)(setup, fd, counted)))
        for name, _ in SIZES:
            for key, label, ring, reader in readers:
                runs[name][key] = []
                fill(setup, name, records, ring)
                _said(label, reader.read)(records)
            for r in range(rounds):
                for key, label, ring, reader in (readers if r % 2 == 0 else readers[::-1]):
                    made, run_ns = fill(setup, name, records, ring)
                    runs[name]["producer"].append(run_ns)
                    got = _said(f"{label} ({name})", reader.read)(made)
                    runs[name][key].append((made, got.records, got.seconds, got.cpu))
                    progress(f"{name} round {r + 1}/{rounds}: {label}")
    finally:
        for *_, reader in readers:
            reader.close()
    return runs


def _said(what: str, fn):
    """`fn`, its failure said in one line as `what`'s."""
    def call(*args):
        try:
            return fn(*args)
        except Failed:
            raise
        except Exception as e:  # a reader that fails says so in one line, as itself
            raise Failed(f"{what}: {type(e).__name__}: {e}") from e
    return call


def summary(setup: Setup, runs: dict) -> dict:
    rows = {}
    for key, label, _ in READERS:
        row = {"label": label}
        if not setup.c_reader and key in C_READERS:
            row["unavailable"] = setup.c_missing
        else:
            for name, _ in SIZES:
                each = runs[name][key]
                per_call = sum(setup.sizes[name])  # an entry's and an exit's bytes
                rate = statistics.median(read / s for _, read, s, _ in each)
                row[name] = {"records_s": rate, "mb_s": rate * per_call / 2 / 1e6,
                             "cpu_records_s": statistics.median(read / c for _, read, _, c
                                                                in each),
                             "made": [m for m, *_ in each], "read": [g for _, g, *_ in each],
                             "seconds": [s for *_, s, _ in each],
                             "cpu": [c for *_, c in each]}
        rows[key] = row
    return rows


def table(setup: Setup, rows: dict) -> str:
    def sized(name: str) -> str:
        entry, exit_ = setup.sizes[name]
        return f"{entry:,} B" if entry == exit_ else f"entry {entry:,} B, exit {exit_:,} B"

    head = "| reader | " + " | ".join(f"{what} ({sized(n)}): records/s | MB/s"
                                      for n, what in SIZES) + " |"
    lines = [head, "|---" * (1 + 2 * len(SIZES)) + "|"]
    for key, label, _ in READERS:
        row = rows[key]
        if "unavailable" in row:
            lines.append(f"| {label} | unavailable: {row['unavailable']} |")
            continue
        cells = []
        for name, _ in SIZES:
            fig = row[name]
            short = [f"{g:,} of {m:,}" for m, g in zip(fig["made"], fig["read"]) if g != m]
            note = f" (read {', '.join(short)})" if short else ""
            cells += [f"{fig['records_s']:,.0f}{note}", f"{fig['mb_s']:,.0f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for key in C_READERS:
        if "unavailable" not in rows[key]:
            ratios = [f"{ratio(rows['record'][n], rows[key][n]):.3f}x" for n, _ in SIZES]
            lines.append(f"| --record / {rows[key]['label']} | "
                         + " |  | ".join(ratios) + " |  |")
    return "\n".join(lines)


def ratio(a: dict, b: dict, clock: str = "seconds") -> float:
    """The median over the rounds of reader a's records/s over reader b's in the same round:
    the two read one after the other, so a busy spell of the machine weighs on both, where a
    ratio of the two medians would set one round's luck against another's. `clock`: "cpu",
    per second of the readers' own CPU time."""
    rates = [[read / s for read, s in zip(f["read"], f[clock])] for f in (a, b)]
    return statistics.median(x / y for x, y in zip(*rates))


def cpu_figures(rows: dict) -> str:
    """Records a second of each reader's own CPU time (user and system, every thread's): what
    it would take with a CPU of its own, which other work on a shared machine moves less than
    the time."""
    said = []
    for key, label, _ in READERS:
        if "unavailable" not in rows[key]:
            said.append(f"{label} " + " / ".join(f"{rows[key][n]['cpu_records_s']:,.0f}"
                                                 for n, _ in SIZES))
    if "unavailable" not in rows["c"]:
        said.append("--record / libbpf (C) " + " / ".join(
            f"{ratio(rows['record'][n], rows['c'][n], 'cpu'):.3f}x" for n, _ in SIZES))
    return ("records a second of the reader's CPU time (" + " / ".join(w for _, w in SIZES)
            + "): " + "; ".join(said))


def host() -> str:
    return (f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}, {os.cpu_count()} CPUs, "
            f"load {os.getloadavg()[0]:.1f}, Linux {platform.release()}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--records", type=int, default=DEFAULT_RECORDS,
                    help="records in the ring a round (an entry and an exit a call: even)")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    if args.records < 2 or args.records % 2 or args.rounds < 1:
        print("bench_reader: --records must be even and >= 2, --rounds >= 1", file=sys.stderr)
        return 2
    reason = checks()
    if reason:
        print(f"skipped: {reason}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-reader-") as t:
        try:
            setup = build(Path(t), args.records)
        except Failed as e:
            print(f"bench_reader: {e}", file=sys.stderr)
            return 1
        try:
            runs = measure(setup, args.records, args.rounds,
                           lambda said: print(f"  {said}", file=sys.stderr, flush=True))
        except Failed as e:
            print(f"bench_reader: {e}", file=sys.stderr)
            return 1
        finally:
            setup.obj.close()
    rows = summary(setup, runs)
    print(f"# {host()}")
    rounds = f"median of {args.rounds} rounds" if args.rounds > 1 else "one round"
    print(f"{args.records:,} records a round (entry and exit of {args.records // 2:,} calls), "
          f"{rounds}, the readers alternating; record lengths: {setup.size_source}")
    print(table(setup, rows))
    print(cpu_figures(rows))
    print("the producer (BPF_PROG_TEST_RUN, its mean a run): " + ", ".join(
        f"{what} {2e3 / max(statistics.median(runs[n]['producer']), 1):,.1f} M records/s"
        for n, what in SIZES))
    print("libbpf (C): ring_buffer__consume, each record copied into a 1 MiB buffer written to "
          "a file whenever full (or to /dev/null); --record: the ring read in place, its spans "
          "written to the recording (a file) as they come; text: the ring read in place, "
          "lines to /dev/null")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"records": args.records, "rounds": args.rounds, "sizes": setup.sizes,
             "size_source": setup.size_source, "rows": rows,
             "producer_run_ns": {n: runs[n]["producer"] for n, _ in SIZES}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
