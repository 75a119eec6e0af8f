#!/usr/bin/env python3
"""Trace functions of a user program: every call's typed arguments and every return value.

    sudo python3 examples/btfgen_trace.py ./prog parse_header checksum -- input.bin
    sudo python3 examples/btfgen_trace.py --header api.h ./prog api_open api_close
    sudo python3 examples/btfgen_trace.py --pid 4242 /usr/bin/prog parse_header

Types come from the program's DWARF (turned into BTF by pahole, as the kernel build does) or,
for a program without debug information, from its C headers (--header, parsed by libclang).
btfgen places the functions' values for this machine's calling convention and generates the
BPF and Python decoders; this script only compiles, loads, attaches (one uprobe_multi link per
direction) and prints. x86_64 only: the read helper in trace.bpf.c and bpfload's syscall number
are this arch's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if (HERE.parent / "btfgen").is_dir():  # run from a source checkout
    sys.path.insert(0, str(HERE.parent))

import bpfload  # noqa: E402

from btfgen.abi.arches import load_arch  # noqa: E402
from btfgen.btf.reader import open_btf  # noqa: E402
from btfgen.codegen import outputs  # noqa: E402
from btfgen.errors import BtfgenError  # noqa: E402
from btfgen.place import place_functions  # noqa: E402

ARCH = "x86_64"
PAHOLE = ("pahole", "-J", "--btf_gen_floats")


def types_of(args, work: Path):
    """The type table the functions come from: headers, or the program's own .BTF/DWARF."""
    if args.header:
        from btfgen.cheader import load_headers

        return load_headers(args.header, arch=ARCH, include_dirs=args.include,
                            defines=args.define)
    try:
        return open_btf(args.program)
    except BtfgenError:
        pass  # no .BTF: make one from the DWARF, on a copy
    copy = work / "program.btf"
    shutil.copyfile(args.program, copy)
    proc = subprocess.run([*PAHOLE, str(copy)], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"btfgen_trace: {args.program}: pahole could not make BTF (built with -g?): "
                 f"{proc.stderr.strip()}")
    return open_btf(str(copy))


def generate(types, names: list[str], work: Path):
    funcs = []
    for name in names:
        found = types.find_funcs(name)
        if not found:
            sys.exit(f"btfgen_trace: no function {name!r} in {types.path}")
        funcs.append(found[0])
    layout = place_functions(types, load_arch(ARCH), funcs, ctx="pt_regs")
    files = outputs.generate(layout, types, ("bpf", "python"), self_contained=True)
    for name, text in files.items():
        (work / name).write_text(text)
    module_path = work / outputs.file_names(layout.arch).module
    spec = importlib.util.spec_from_file_location("btfgen_decoders", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return layout, module


def compile_bpf(work: Path) -> Path:
    clang = shutil.which("clang-19") or shutil.which("clang")
    if clang is None:
        sys.exit("btfgen_trace: clang is needed to compile the BPF program")
    obj = work / "trace.bpf.o"
    cmd = [clang, "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", f"-I{work}",
           "-c", str(HERE / "trace.bpf.c"), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"btfgen_trace: compiling trace.bpf.c failed:\n{proc.stderr}")
    return obj


def show(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value))
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return repr(value)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("program", help="the executable whose functions to trace")
    p.add_argument("functions", nargs="+", metavar="FUNC")
    p.add_argument("--header", action="append", metavar="FILE",
                   help="take the prototypes from C headers instead of debug information")
    p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VAL]")
    p.add_argument("--pid", type=int, default=0,
                   help="trace this running process (until it exits or Ctrl-C) instead of "
                        "running the program")
    argv = sys.argv[1:] if argv is None else argv
    run_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, run_args = argv[:at], argv[at + 1:]
    args = p.parse_args(argv)
    reason = bpfload.bpf_unavailable()
    if reason:
        sys.exit(f"btfgen_trace: BPF uprobes unavailable: {reason}")
    bpfload.mount_tracefs()

    with tempfile.TemporaryDirectory(prefix="btfgen-trace-") as tmp:
        work = Path(tmp)
        try:
            types = types_of(args, work)
            layout, decoders = generate(types, args.functions, work)
        except BtfgenError as e:
            sys.exit(f"btfgen_trace: {e}")
        obj_path = compile_bpf(work)
        by_id = {f.btf_id: f.name for f in layout.functions}
        names = [f.name for f in layout.functions]

        def on_record(rec: bytes) -> None:
            btf_id, kind = struct.unpack_from("<II", rec)
            fn = decoders.function(by_id[btf_id])
            value = fn.decode_record(rec)
            if kind == 0:
                args_text = ", ".join(f"{k}={show(v)}" for k, v in fn.as_dict(value).items())
                print(f"{fn.name}({args_text})", flush=True)
            else:
                print(f"{fn.name} -> {show(value)}", flush=True)

        with bpfload.BpfObject(str(obj_path)) as obj:
            obj.expect_uprobe_multi("trace_entry")
            obj.expect_uprobe_multi("trace_exit")
            obj.load()
            for i, name in enumerate(names):
                obj.update("specs", struct.pack("<I", i), decoders.spec(name))
            cookies = list(range(len(names)))
            binary = os.path.realpath(args.program)
            obj.attach_uprobe_multi("trace_entry", binary, names, cookies, pid=args.pid)
            obj.attach_uprobe_multi("trace_exit", binary, names, cookies, retprobe=True,
                                    pid=args.pid)
            with bpfload.RingBuffer(obj.map_fd("events"), on_record) as rb:
                if args.pid:
                    return follow(rb, args.pid)
                proc = subprocess.Popen([binary, *run_args])
                while proc.poll() is None:
                    rb.poll(100)
                while rb.poll(50) > 0:
                    pass
                rb.drain()
                return proc.returncode


def follow(rb, pid: int) -> int:
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while not stop and os.path.exists(f"/proc/{pid}"):
        rb.poll(200)
    rb.drain()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bpfload.BpfLoadError as e:  # one line, plus libbpf's log when it has one
        sys.exit(f"btfgen_trace: {e}")
