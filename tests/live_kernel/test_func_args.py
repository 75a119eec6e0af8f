"""btfgen's fprobe module beside the kernel's own BTF-driven printer of arguments, on the same
calls (issue 46, item 4; the table in docs/kernel-c.md).

In the amd64 7.2 guest, the function tracer with its `func-args` option (Linux 6.15+:
print_function_args, at most six register arguments, a struct by value as raw words, no return
value, no string) and the example module (examples/fprobe, its header generated with strings)
trace the same functions at once, while guest/func_args.c makes calls whose arguments it knows:
do_mmap (nine arguments, three on the stack on x86_64), vfs_symlink (a kernel `char *`),
make_kuid (returns a struct), from_vfsuid and from_kuid_munged (a struct by value). Both clocks
are CLOCK_MONOTONIC (trace_clock mono; the module's ktime_get_ns). Each thread's calls come in
the same order on both sides; they are paired so (fetcher.pair), and every value both give is
compared (a value as wide as its type: the printer prints whole registers). Asserted: the same
calls on both sides for the workload, every value both give agrees, and what only btfgen gives
is what the workload passed (the stack arguments, the string, the struct returned).

The function-graph tracer's funcgraph-retval (return values) is not in Debian's 7.2.13 amd64
kernel (CONFIG_FUNCTION_GRAPH_RETVAL is not set): there the kernel's printer gives no return
value at all, and funcgraph-args is the same printer as func-args."""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import btfgen
from btfgen.btf import types as T
from btfgen.btf.walk import strip
from btfgen.layout import StackPiece

from . import cache, fetcher, kbuild, modules
from .conftest import btf_for, kernel_for, unavailable
from .guest import Guest

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fprobe"
NAME = "unstable-amd64"
FUNCTIONS = ["do_mmap", "from_kuid_munged", "from_vfsuid", "make_kuid", "vfs_symlink"]
WORKLOAD = "func_args"  # its comm
# What guest/func_args.c passes
PGOFF, MAPS, PAGE = 3, 4, 4096
TARGET = "/btfgen/func-args/symlink-target"
UID, GID = 1000, 100


def _workload(target) -> bytes:
    src = (Path(__file__).parent / "guest" / "func_args.c").read_bytes()
    cmd = [target.cc, "-O2", "-static", "-Wall", "-Werror", "-s"]
    dest = cache.ROOT / "func-args" / f"{target.deb_arch}-{cache.digest(src, *cmd)}"
    if not dest.exists():
        out = dest.with_suffix(".tmp")
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*cmd, "-o", str(out), str(Path(__file__).parent / "guest" / "func_args.c")],
                       check=True)
        out.rename(dest)
    return dest.read_bytes()


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def recording(raw: bytes, gen: Path, out: Path) -> None:
    """The module's ring records (as /proc/btfgen_fprobe gives them) as a btfgen recording,
    written as its reader (examples/fprobe/btfgen_fprobe_record.py) writes one."""
    from btfgen.probe import manifest
    from btfgen.probe import recording as rec

    reader = _load(EXAMPLE / "btfgen_fprobe_record.py", "btfgen_fprobe_record")
    mod = _load(next(gen.glob("btfgen_*.py")), "btfgen_generated_func_args")
    header = {"format": "btfgen trace recording", "arch": mod.ARCH, "who": True,
              "byte_order": mod.BYTE_ORDER, "pointer_size": mod.POINTER_SIZE,
              "kernel_release": "guest", "kind": "kernel", "host": "guest",
              "clock_offset_ns": 0, "program": "btfgen_fprobe", "btf": None, "btf_sha256": None}
    w = rec.Writer(str(out), header, manifest.DecoderView(mod).descriptors(mod.names()),
                   mod.BYTE_ORDER)
    w.records(reader.payloads(raw, mod.BYTE_ORDER))
    w.close(0)


# ---- the kernel's printer --------------------------------------------------------------------

# `func_args-123 [000] ..... 12.345678: do_mmap(file=0x..., ..., ...) <-vm_mmap_pgoff`
_LINE = re.compile(r"^\s*(?P<comm>.*?)-(?P<tid>\d+)\s+\[\d+\]\s+(?:\S+\s+)?(?P<sec>\d+)\."
                   r"(?P<us>\d{6}): (?P<fn>\w+)\((?P<args>.*)\)\s+<-")


@dataclass(frozen=True)
class Printed:
    comm: str
    tid: int
    index: int  # the function's index in FUNCTIONS (fetcher.KernelEvent's)
    ns: int
    args: list[tuple[str, str]]  # (name, text) as printed; ("", "...") past the sixth


def split_args(text: str) -> list[tuple[str, str]]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            item = text[start:i].strip()
            if item:
                name, eq, value = item.partition("=")
                out.append((name, value) if eq else ("", item))
            start = i + 1
    return out


def parse_printed(trace: str) -> list[Printed]:
    out = []
    for line in trace.splitlines():
        m = _LINE.match(line)
        if m and m["fn"] in FUNCTIONS:
            out.append(Printed(m["comm"], int(m["tid"]), FUNCTIONS.index(m["fn"]),
                               (int(m["sec"]) * 1_000_000 + int(m["us"])) * 1000,
                               split_args(m["args"])))
    return out


def printed_words(text: str) -> list[int] | None:
    """A value the printer printed as numbers: one (decimal or 0x-hex), or a struct's raw words
    `(STRUCT)[0x1:0x2]`; None for anything else."""
    m = re.fullmatch(r"\(\w+\)\[(.*)\]", text)
    try:
        return [int(w, 0) for w in m[1].split(":")] if m else [int(text, 0)]
    except ValueError:
        return None


# ---- btfgen's side ---------------------------------------------------------------------------


def entries(events: list[dict]) -> list[fetcher.Call]:
    """btfgen's calls in the order of their entries (the printer prints at entry): each with its
    arguments and the return value of its exit (None where not seen)."""
    out: list[dict] = []
    open_calls: dict[int, list[dict]] = {}
    for e in sorted(events, key=lambda e: e["timestamp"]):
        stack = open_calls.setdefault(e["tid"], [])
        if e["kind"] == "entry":
            call = {"function": e["function"], "tid": e["tid"], "ns": e["timestamp"],
                    "args": e["args"], "ret": None, "captures": e.get("captures") or {}}
            stack.append(call)
            out.append(call)
        elif e["kind"] == "exit":
            at = next((i for i in range(len(stack) - 1, -1, -1)
                       if stack[i]["function"] == e["function"]), None)
            if at is not None:
                stack[at]["ret"] = e.get("return")
                del stack[at:]
    return [fetcher.Call(c["function"], c["tid"], c["ns"], {**c["args"], "__captures__":
                                                            c["captures"]}, c["ret"])
            for c in out]


def value_bytes(value, size: int) -> int | None:
    """btfgen's decoded value as the integer its bytes make (little-endian), a struct's by its
    members in order (the ones here: one scalar member)."""
    n = fetcher.our_number(value)
    return None if n is None else n & ((1 << 8 * size) - 1)


@dataclass
class Tally:
    both: int = 0  # values both give
    agree: int = 0
    structs: int = 0  # of them, structs by value (raw words on the printer's side)
    only_btfgen: dict | None = None  # kind -> count: what the printer does not give
    disagreements: list | None = None


def compare(pairs, layouts) -> Tally:
    t = Tally(only_btfgen={}, disagreements=[])
    for k, c in pairs:
        fn = layouts[c.function]
        printed = k.fields  # the Printed's args, through KernelEvent.fields
        for i, arg in enumerate(fn.args):
            on_stack = any(isinstance(p, StackPiece) for p in arg.pieces)
            text = printed[i][1] if i < len(printed) and printed[i][0] == arg.name else None
            if text is None:
                kind = "stack argument" if on_stack else "argument past the sixth"
                t.only_btfgen[kind] = t.only_btfgen.get(kind, 0) + 1
                continue
            words = printed_words(text)
            size = arg.size
            theirs = None
            if words is not None:
                theirs = sum(w << (64 * j) for j, w in enumerate(words)) & ((1 << 8 * size) - 1)
            ours = value_bytes(c.args.get(arg.name), size)
            t.both += 1
            t.structs += isinstance(strip(arg.type), (T.Struct, T.Union))
            if theirs is not None and theirs == ours:
                t.agree += 1
            else:
                t.disagreements.append(f"{c.function} {arg.name} ({arg.type_name}): printed "
                                       f"{text!r}, btfgen {c.args.get(arg.name)!r}")
        if fn.ret is not None and c.ret is not None:
            kind = ("struct returned" if isinstance(strip(fn.ret.type), (T.Struct, T.Union))
                    else "return value")
            t.only_btfgen[kind] = t.only_btfgen.get(kind, 0) + 1
        for _capture in c.args.get("__captures__", {}):
            t.only_btfgen["string"] = t.only_btfgen.get("string", 0) + 1
    return t


def _module(btf_path: Path, gen: Path) -> Path:
    t = btfgen.open(str(btf_path), arch="x86_64", ctx="ftrace_regs")
    files = t.generate(FUNCTIONS, ("kernel", "python"), strings=True)
    gen.mkdir(parents=True)
    for n, text in files.items():
        (gen / n).write_text(text)
    sources = modules.sources("fprobe", files["btfgen.kernel.h"].encode())
    try:
        return kbuild.build_module(NAME, sources, "btfgen_fprobe", extra_cflags=("-Werror",))
    except kbuild.debian.PackageError as e:
        unavailable(f"{NAME}: the module's toolchain cannot be had: {e}")


TRACING = "/sys/kernel/tracing"


def test_func_args_beside_btfgen(tmp_path):
    k = kernel_for(NAME)
    btf_path = btf_for(k)
    gen = tmp_path / "gen"
    ko = _module(btf_path, gen)
    g = Guest()
    g.file("btfgen_fprobe.ko", ko.read_bytes())
    g.file("func_args", _workload(k.target), 0o755)
    names = "\\n".join(FUNCTIONS)
    g.step("setup", f"cd {TRACING} && echo mono > trace_clock && echo 0 > tracing_on && "
                    f"for f in {' '.join(FUNCTIONS)}; do echo $f >> set_ftrace_filter; done && "
                    "echo function > current_tracer && echo 1 > options/func-args && "
                    "cat set_ftrace_filter && insmod /btfgen_fprobe.ko ring_kb=4096 && "
                    f"printf '{names}\\n' > /proc/btfgen_fprobe_functions && "
                    "cat /proc/btfgen_fprobe_stats")
    g.step("run", f"cd /tmp && echo 1 > {TRACING}/tracing_on && /func_args; rc=$?; "
                  f"echo 0 > {TRACING}/tracing_on; cat /proc/btfgen_fprobe_stats; exit $rc")
    g.step("records", "dd if=/proc/btfgen_fprobe of=/tmp/raw bs=256k 2>/dev/null && "
                      "gzip -c /tmp/raw | base64")
    g.step("printed", f"cat {TRACING}/trace")
    boot = g.run(k, timeout=600)
    for step in ("setup", "run"):
        out, rc = boot.section(step)
        assert rc == 0, out
    stats = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    assert int(stats["lost"]) == 0 and int(stats["missed"]) == 0, out
    text, rc = boot.section("records")
    assert rc == 0, text
    rec = tmp_path / "rec.btfrec"
    recording(gzip.decompress(base64.b64decode("".join(text.split()))), gen, rec)
    p = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "jsonl", str(rec)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    events = [json.loads(line) for line in p.stdout.splitlines()]
    trace, _ = boot.section("printed")
    (tmp_path / "trace.txt").write_text(trace)
    (tmp_path / "events.jsonl").write_text(p.stdout)

    printed = [x for x in parse_printed(trace) if x.comm == WORKLOAD]
    ours = entries(events)
    tids = {x.tid for x in printed}
    ours = [c for c in ours if c.tid in tids]
    kev = [fetcher.KernelEvent(x.tid, x.index, x.ns, x.args) for x in printed]
    pairs, lone_k, lone_c, before = fetcher.pair(kev, ours, FUNCTIONS)
    assert not lone_k and not lone_c and not before, (lone_k, lone_c, before)
    # every function was called, on both sides
    assert {FUNCTIONS[k.index] for k, _ in pairs} == set(FUNCTIONS), pairs
    # one call, one pair: the two sides' times of a call are close (the same clock)
    assert all(abs(k.ns - c.ns) < 5_000_000 for k, c in pairs), pairs

    t = btfgen.open(str(btf_path), arch="x86_64", ctx="ftrace_regs")
    layouts = {f: t.layout(f) for f in FUNCTIONS}
    tally = compare(pairs, layouts)
    print(f"func-args beside btfgen: {len(pairs)} calls, {tally.both} values both give "
          f"({tally.structs} structs by value), {tally.agree} agree; only btfgen: "
          f"{tally.only_btfgen}")
    assert tally.both > 0 and tally.agree == tally.both, tally.disagreements
    assert tally.structs > 0, "no struct by value compared"

    # What only btfgen gives is what the workload passed.
    maps = [c for k, c in pairs if c.function == "do_mmap" and c.args["len"] <= MAPS * PAGE
            and c.args["file"] and c.args["pgoff"] in range(PGOFF, PGOFF + MAPS)]
    assert sorted((c.args["pgoff"], c.args["len"]) for c in maps) == \
        [(PGOFF + i, (i + 1) * PAGE) for i in range(MAPS)], maps
    for k, c in pairs:
        if c.function == "do_mmap":
            assert [a for _, a in k.fields][6:] in ([], ["..."]), k.fields  # none past six
            # populate and uf: vm_mmap_pgoff's locals, on its stack (the call's own frame)
            assert c.args["populate"] and c.args["uf"], c.args
            assert abs(c.args["populate"] - c.args["uf"]) < 256, c.args
    links = [c for k, c in pairs if c.function == "vfs_symlink"]
    assert [c.args["__captures__"].get("oldname") for c in links] == [TARGET], links
    kuids = [c.ret for k, c in pairs if c.function == "make_kuid"]
    assert {"val": UID} in kuids, kuids
