#!/usr/bin/env python3
"""Trace functions of a user program, a shared library or the kernel: every call's typed
arguments and every return value.

    sudo btfgen trace ./prog parse_header checksum -- input.bin
    sudo btfgen trace --header api.h ./prog api_open api_close
    sudo btfgen trace --pid 4242 /usr/bin/prog parse_header
    sudo btfgen trace --header /usr/include/fcntl.h libc.so.6 open openat -- cat /etc/hostname
    sudo btfgen trace --header /usr/include/fcntl.h libc.so.6 open      (every process)
    sudo btfgen trace --kernel 'vfs_*' do_sys_openat2 -- cat /etc/hostname
    sudo btfgen trace --kernel --duration 5 shmem_file_llseek

Build on one machine, run on another (the target needs only Python and libbpf):

    btfgen trace --kernel --btf target-vmlinux --arch riscv64 \\
        --build DIR vfs_fallocate
    sudo python3 DIR/btfgen_trace.py --run DIR -- fallocate -l 1M /tmp/f

Types come from a program's DWARF (turned into BTF by pahole, as the kernel build does), its C
headers (--header, parsed by libclang), or the kernel's BTF. btfgen places the values for the
arch's calling convention and generates the BPF and Python decoders. This module is the
command line: it runs a trace (run.py: standard library and libbpf), and builds one through
the builder `btfgen trace` hands it (btfgen.trace.command: btfgen and clang). A trace
directory's btfgen_trace.py runs it with no builder, so it imports nothing of btfgen.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import output, stack_keys
from . import prog as tool_name
from . import run as trace_run
from .errors import BadInput, BpfLoadError, InputError, Interrupted, RunError
from .event import MAX_ERRNO
from .options import CALL_BUDGET, STRING_SIZE, Options

USAGE = """\
%(prog)s [options] PROGRAM FUNC... [-- ARGS...]
       %(prog)s [options] LIBRARY FUNC... [-- COMMAND...]   (no COMMAND, no --pid: every process)
       %(prog)s --kernel [options] FUNC_OR_GLOB... [-- COMMAND...]
       %(prog)s --build DIR [--kernel] [options] ...      (build only)
       %(prog)s --run DIR [--pid PID | --duration S] [-- COMMAND or ARGS...]"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        tool_name.say(f"{message} (see --help)")
        self.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=tool_name.NAME, usage=USAGE, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="PROGRAM or LIBRARY (a path, or a name: libc.so.6, c, cat) then its "
                        "functions; with --kernel, kernel functions or globs")
    p.add_argument("--kernel", action="store_true", help="trace kernel functions "
                   "(kprobe_multi: Linux 5.18+ with CONFIG_FPROBE; else one kprobe each: 5.15+)")
    p.add_argument("--attach", choices=("auto", "tracing-multi", "fentry-multi", "fsession",
                                        "session", "multi", "single"),
                   default="auto",
                   help="kernel functions on the BPF trampoline: one fsession.multi link, or "
                        "fentry.multi and fexit.multi links (tracing-multi: Linux 7.2, "
                        "x86_64; fentry-multi: that pair itself, its exits never paired with "
                        "their entries), or one fsession program per function (fsession: Linux "
                        "7.0, a few functions), what the trampoline cannot take on a kprobe link; "
                        "one kprobe.session (uprobe.session) link for entry and exit (session: "
                        "Linux 6.10+, 6.13+ for programs), a kprobe_multi (uprobe_multi) link "
                        "per direction (multi), one kprobe and kretprobe (uprobe and uretprobe) "
                        "each with a BPF cookie (single: Linux 5.15+, for kernels without "
                        "kprobe_multi/uprobe_multi), or (auto, the default) one fsession.multi "
                        "link where the kernel has it, else the first of session, multi and "
                        "single it has (kernel functions: not session or multi where a probe "
                        "finds their cookies wrong, as on Debian's 7.2.13 ppc64el); the one used "
                        "is said")
    p.add_argument("--no-sleepable", dest="sleepable", action="store_false",
                   help="user functions: the non-sleepable uprobe programs, which cannot fault "
                        "in a page of user memory not yet mapped (a string there reads as a "
                        "fault), and cost less a call; by default sleepable ones where the "
                        "kernel takes them (Linux 6.0+ single uprobes, 6.6+ uprobe_multi, "
                        "uprobe.session), said")
    p.add_argument("--no-deny", action="store_true",
                   help="kernel globs: keep what they match of the functions btfgen's own "
                        "probes and run side call (BPF helpers and maps, kprobe/fprobe/ftrace "
                        "machinery, RCU and preemption primitives: the deny list, left out by "
                        "default and said); a function named without a glob is always kept")
    p.add_argument("--timings", action="store_true",
                   help="say how long each stage took: build (BTF load, selection, placement, "
                        "generation, compile) and run (decoders load, symbol check, object "
                        "load, spec map fill, attach, tracing, detach)")
    p.add_argument("--btf", metavar="FILE", help="kernel types from FILE (a vmlinux or raw "
                   "BTF) instead of /sys/kernel/btf/vmlinux")
    p.add_argument("--module", metavar="NAME",
                   help="kernel functions of module NAME too (its BTF, split over the kernel's: "
                        "/sys/kernel/btf/NAME unless --module-btf): a glob matches the module's "
                        "functions, a name either's; on the trampoline, a link per BTF object")
    p.add_argument("--module-btf", metavar="FILE",
                   help="the module's BTF from FILE (its .ko, or raw split BTF), built for "
                        "another machine's kernel (--btf)")
    p.add_argument("--dwarf", metavar="FILE",
                   help="an ELF file with DWARF for the same build (a -dbg vmlinux): functions "
                        "compiled with another convention than their prototype are read where "
                        "it says (default: the input itself when it has .debug_info)")
    p.add_argument("--arch", help="the target's arch (default: the ELF machine of the input "
                   "(--btf, the program), else this machine's)")
    p.add_argument("--header", action="append", default=[], metavar="FILE",
                   help="take a program's prototypes from C headers instead of its debug "
                        "information")
    p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VAL]")
    p.add_argument("--filter", action="append", default=[], metavar="'FUNC: EXPR'",
                   help="only the calls of FUNC (a name or glob) where EXPR holds, decided in "
                        "the BPF program: e.g. 'vfs_read: count > 4096 && file->f_flags & "
                        "0x800', 'f: prefix(path, \"/etc/\")', 'f: $retval < 0' (exit); "
                        "repeatable, one per function")
    p.add_argument("--capture", action="append", default=[], metavar="'FUNC: PATH, ...'",
                   help="also record what these paths from FUNC's arguments point to: "
                        "'vfs_read: file->f_path.dentry->d_name.name', 'do_sys_openat2: "
                        "how->flags', '*file' for the whole pointee, '**file' with what its "
                        "pointers point to (a star a level); a path "
                        "ending at a char pointer is a string; 'SSL_write: buf[num]', "
                        "'SSL_read: buf[retval]' (at exit) a buffer of that many bytes "
                        "(repeatable)")
    p.add_argument("--value-size", "--string-size", dest="string_size", type=int,
                   default=STRING_SIZE, metavar="BYTES",
                   help=f"bytes of a captured string or buffer kept (default {STRING_SIZE}, as "
                        "retsnoop; at most 4093: one record operation; more than fits "
                        "the --capture-budget needs a larger one); a longer one is "
                        "marked cut (--string-size: its old name)")
    p.add_argument("--capture-budget", type=int, default=CALL_BUDGET, metavar="BYTES",
                   help=f"record bytes a call's captures may take (default {CALL_BUDGET}, at "
                        "most 8192); "
                        "what --capture names is placed first, the default strings after, "
                        "shrunk to the room left")
    p.add_argument("--bytes", dest="bytes_as", choices=("auto", "text", "hex"),
                   default="auto",
                   help="a captured buffer as text (escaped) or hex; auto (the default): text "
                        "where every byte is printable, else hex")
    p.add_argument("--no-strings", dest="strings", action="store_false",
                   help="do not capture the string behind every char * argument")
    p.add_argument("--pid", type=int, default=0,
                   help="trace this running process and its new children (until it exits "
                        "or Ctrl-C) instead of running a command; with a LIBRARY, its "
                        "functions as that process calls them")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--errors", action="store_true",
                   help="--errors[=WHAT]: print only the calls that returned an error, with "
                        "the arguments they were called with: a kernel function's negative "
                        f"errno (-1..-{MAX_ERRNO}, named) or NULL or error pointer; a user "
                        "function's "
                        "WHAT, a comma list of -1, negative, null (default: -1,null), or "
                        "every return a --filter on $retval lets through. A user function's "
                        "-1 or NULL is named by the error of the last system call it made, "
                        "where that failed, else shown bare")
    p.add_argument("--errors-are", dest="errors_are", help=argparse.SUPPRESS)
    p.add_argument("--stack", action="store_true",
                   help="--stack[=WHAT]: show where each call came from, under its entry "
                        "line: WHAT a comma list of kernel, user (default: a kernel "
                        "function's kernel stack, a user function's user stack), each frame "
                        "as func+0xoff (object); a user stack is unwound from the objects' "
                        ".eh_frame")
    p.add_argument("--stack-is", dest="stack_is", help=argparse.SUPPRESS)
    p.add_argument("--kallsyms", metavar="FILE",
                   help="--stack: name kernel frames by FILE (the traced machine's System.map "
                        "or /proc/kallsyms) instead of this machine's /proc/kallsyms")
    p.add_argument("--json", action="store_true",
                   help="JSON lines (timestamp, cpu, pid, tid, comm, function, kind, typed "
                        "arguments or return value) instead of text")
    p.add_argument("--record", metavar="FILE",
                   help="write the raw events, and what decodes them, to FILE instead of "
                        "printing (`btfgen decode FILE` prints them, anywhere)")
    p.add_argument("--ring-size", type=int, metavar="MIB", dest="ring_mib",
                   help="the ring buffer's size in MiB, a power of two (default: 16, more for "
                        "many functions, up to 64); events it had no room for are counted "
                        "and said")
    # ---- summaries kept in the kernel (summary.py) ----
    p.add_argument("--count", action="store_true",
                   help="count the calls of each function in the kernel (BPF maps) and print "
                        "the counts at the end (and every --interval), as bcc's funccount; "
                        "no event is sent per call unless --record is given too")
    p.add_argument("--latency", action="store_true",
                   help="a log2 histogram of each function's duration in nanoseconds, kept "
                        "in the kernel and printed as bcc's funclatency prints it")
    p.add_argument("--by", action="append", default=[], metavar="KEY",
                   help="key --count and --latency by `comm`, or 'FUNC: ARG' (an argument: "
                        "an enum by name), or 'FUNC: PATH' (a capture path: 'vfs_read: "
                        "file->f_path.dentry->d_name.name'); one a function (repeatable); or "
                        "by each call's stack, `kstack` (kernel functions) or `ustack` (the "
                        "user stack: a user function's, or a kernel function's task's), "
                        "counted by the tracer from each call's event")
    p.add_argument("--interval", type=float, metavar="S",
                   help="with --count or --latency: print what came in each S seconds")
    p.add_argument("--map-size", type=int, metavar="KEYS", dest="map_size",
                   help="keys each summary map holds (default 10240); calls whose key did "
                        "not fit are counted and said")
    p.add_argument("--build", metavar="DIR", type=Path,
                   help="only write the trace directory DIR (generated decoders, BPF object, "
                        "manifest, these scripts)")
    p.add_argument("--run", metavar="DIR", type=Path, help="trace with a directory --build wrote")
    return p


# Builds a trace directory from the parsed options (`btfgen trace` gives one; a trace
# directory's launcher has none: it only runs).
Builder = Callable[[argparse.Namespace, Path], None]


def main(argv=None, build: Builder | None = None) -> int:
    """The tool's exit status: the traced command's, 1 when tracing failed or a function is
    missing, 2 on bad usage or input. Its name in what it says is the copy's (prog.NAME)."""
    try:
        return _main(sys.argv[1:] if argv is None else argv, build)
    except BadInput as e:
        tool_name.say(str(e))
        return e.status
    except InputError as e:
        tool_name.say(str(e))
        return 2
    except (RunError, BpfLoadError) as e:  # one line, plus libbpf's log
        tool_name.say(str(e))
        return 1
    except Interrupted as e:
        tool_name.say(str(e))
        return 128 + e.signum
    except KeyboardInterrupt:
        # Ctrl-C while building (the run catches its own signals from its start): one line
        # and the status a shell gives, never a traceback.
        tool_name.say(str(Interrupted(2)))
        return 130


def _main(argv: list[str], build: Builder | None) -> int:
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    p = _parser()
    args = p.parse_args(stack_value(output.errors_value(argv)))
    _check(p, args, command)
    errors = args.errors
    if args.errors_are is not None:
        try:
            errors = output.errors_are(args.errors_are)
        except ValueError as e:
            p.error(str(e))
    opts = Options(command, args.pid, args.duration, errors=errors, as_json=args.json,
                   record=args.record, attach=args.attach, ring_mib=args.ring_mib,
                   sleepable=args.sleepable,
                   timings=args.timings, bytes_as=args.bytes_as, interval=args.interval,
                   map_size=args.map_size, kallsyms=args.kallsyms)
    if args.run:
        return trace_run.run(args.run, opts)
    if build is None:
        raise RunError("building needs btfgen (`btfgen trace`); build elsewhere and use "
                       "--run here")
    if args.build:
        build(args, args.build)
        return 0
    with tempfile.TemporaryDirectory(prefix="btfgen-trace-") as tmp:
        build(args, Path(tmp))
        return trace_run.run(Path(tmp), opts)


def stack_value(argv: list) -> list:
    """argv with `--stack=WHAT` as `--stack --stack-is=WHAT` (as output.errors_value: an
    optional value would take the program after a bare `--stack`)."""
    return [x for a in argv for x in
            (("--stack", "--stack-is=" + a[len("--stack="):])
             if isinstance(a, str) and a.startswith("--stack=") else (a,))]


STACKS = ("kernel", "user")


def stacks_asked(args) -> tuple[str, ...]:
    """What --stack[=WHAT] asks for, in STACKS order: () without it; a kernel trace's kernel
    stack or a user trace's user stack where WHAT is not given. A WHAT naming anything else is
    a ValueError of one line."""
    if args.stack_is is None:
        return (("kernel",) if args.kernel else ("user",)) if args.stack else ()
    asked = [w.strip() for w in args.stack_is.split(",")]
    for w in asked:
        if w not in STACKS:
            raise ValueError(f"--stack={args.stack_is}: {w!r} is not one of kernel, user "
                             "(a comma list)")
    return tuple(w for w in STACKS if w in asked)


def _check(p: argparse.ArgumentParser, args, command: list[str]) -> None:
    if args.run and args.build:
        p.error("--build and --run are two steps: give one")
    if args.run and (args.names or args.kernel or args.btf or args.module or args.module_btf
                     or args.header or args.arch
                     or args.filter or args.capture or not args.strings
                     or args.string_size != STRING_SIZE or args.capture_budget != CALL_BUDGET
                     or args.no_deny):
        p.error("--run takes no functions, types, filters or captures: they were chosen at "
                "--build")
    if args.pid and command:
        p.error("--pid traces a running process: give no command after --")
    if args.record and (args.errors or args.json):
        p.error("--record keeps every raw event: choose --errors or --json when decoding")
    if args.build and (args.record or args.errors or args.json):
        p.error("--record, --errors and --json are for tracing: give them with --run")
    if args.kallsyms is not None and (args.build or not Path(args.kallsyms).is_file()):
        p.error(f"--kallsyms {args.kallsyms}: " + ("it names frames when tracing: give it with "
                "--run" if args.build else "no such file"))
    if (args.attach != "auto" or args.ring_mib or not args.sleepable) and args.build:
        p.error("--attach, --ring-size and --no-sleepable are for tracing: give them with --run")
    if args.ring_mib is not None and (args.ring_mib < 1 or args.ring_mib & (args.ring_mib - 1)
                                      or args.ring_mib > 1024):
        p.error("--ring-size: a power of two from 1 to 1024 (MiB)")
    if args.pid < 0 or (args.duration is not None and args.duration <= 0):
        p.error("--pid and --duration must be positive")
    _check_summary(p, args)
    _check_stack_keys(p, args)
    _check_stack(p, args)
    if args.run:
        return
    if args.kernel and args.header:
        p.error("--header is for user programs; kernel types come from BTF")
    if not args.kernel and (args.btf or args.no_deny):
        p.error("--btf and --no-deny are for kernel functions (--kernel)")
    if not args.kernel and (args.module or args.module_btf):
        p.error("--module is for kernel functions (--kernel)")
    if args.module_btf and not args.module:
        p.error("--module-btf is the BTF of a --module NAME: give its name")
    if args.module and not re.fullmatch(r"[A-Za-z0-9_-]+", args.module):
        p.error(f"--module {args.module!r}: a module's name (as lsmod says it)")
    if args.kernel and not args.names:
        p.error("name the kernel functions to trace")
    if not args.kernel and len(args.names) < 2:
        p.error("name the program or library and at least one of its functions (or use "
                "--kernel)")


def _check_stack(p: argparse.ArgumentParser, args) -> None:
    """--stack[=WHAT]: chosen at the build (the BPF program takes the stacks); what a trace of
    this kind can take."""
    if args.stack_is is not None:
        args.stack = True
    if not args.stack:
        return
    if args.run:
        p.error("--stack was chosen at --build")
    try:
        asked = stacks_asked(args)
    except ValueError as e:
        p.error(str(e))
    if (args.count or args.latency) and not args.stack_key:
        p.error("--stack shows each call's stack; --count and --latency sum calls: key them "
                "by the stack with --by kstack (a kernel function's kernel stack) or --by "
                "ustack (the user stack)")
    if "kernel" in asked and not args.kernel:
        p.error("--stack=kernel: a user function's call has no kernel stack of its own (the "
                "uprobe's); give --stack or --stack=user")


def _check_stack_keys(p: argparse.ArgumentParser, args) -> None:
    """--by kstack / ustack (stack_keys.py): taken out of args.by into args.stack_key; the
    build then takes that stack as --stack=WHAT would (the tracer counts each call's event)."""
    try:
        args.stack_key, args.by = stack_keys.split(args.by, args.kernel)
    except ValueError as e:
        p.error(str(e))
    if args.stack_key is None or args.run or not (args.count or args.latency):
        return  # (_check_summary said what --run or a --by without a summary is)
    if args.record:
        p.error(f"--by {args.stack_key}: its calls are counted by the tracer from their events; "
                "recording them beside it is not built yet")
    want = stack_keys.STACK_KEYS[args.stack_key]
    if args.stack_is is not None and want not in [w.strip() for w in args.stack_is.split(",")]:
        p.error(f"--by {args.stack_key} keys calls by their {want} stack: --stack="
                f"{args.stack_is} does not take it")
    if args.stack_is is None:
        args.stack_is = want
    args.stack = True


def _check_summary(p: argparse.ArgumentParser, args) -> None:
    """--count / --latency and their options (the build checks the --by keys themselves)."""
    summary = args.count or args.latency
    if args.run and (summary or args.by):
        p.error("--count, --latency and --by were chosen at --build")
    if args.by and not (summary or args.run):
        p.error("--by keys a summary: give --count or --latency")
    if summary and args.errors:
        p.error("--errors prints calls; --count and --latency sum them")
    if args.build and (args.interval is not None or args.map_size is not None):
        p.error("--interval and --map-size are for tracing: give them with --run")
    if args.interval is not None and args.interval <= 0:
        p.error("--interval must be positive")
    if args.map_size is not None and not 1 <= args.map_size <= 1 << 24:
        p.error("--map-size: from 1 to 16777216 keys")
