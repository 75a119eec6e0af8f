"""`btfgen trace`'s build step: everything that needs btfgen and clang, written to a directory
that run.py loads on the target with only the standard library and libbpf.

The directory holds the generated decoder module (btfgen_<arch>.py), the compiled BPF object
(trace.bpf.o), the manifest (trace.json: the functions in cookie order and what they were built
for) and copies of the run-side modules (btfgen_trace.py is tool.py), so copying it to the target
is the whole install.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from btfgen.abi.arches import run_side_facts
from btfgen.btf.reader import DEFAULT_PATH
from btfgen.codegen import outputs
from btfgen.trace import deny
from btfgen.trace import run as trace_run

HERE = Path(__file__).resolve().parent
# The run side, as the trace directory names it: module in this package -> file there.
RUNTIME = {"tool.py": "btfgen_trace.py", "bpfload.py": "bpfload.py", "run.py": "run.py",
           "output.py": "output.py", "recording.py": "recording.py",
           "../decoder/spec_format.py": "spec_format.py"}
MANIFEST = "trace.json"
OBJECT = "trace.bpf.o"
# Every function's `struct btfgen_spec`, in cookie order: made here, where it is quick, so the
# run side fills the specs map from one read (tens of thousands made there took a minute).
SPECS = "specs.bin"
# What makes a name a glob (target.select's rule): the deny list leaves out only what globs
# matched, never a function named as it is.
_GLOB = re.compile(r"[*?\[]")


class BuildError(Exception):
    """Bad input or a missing tool: one line for the user, and the exit status it means."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status  # 2: bad usage or input, as every command; 1: a missing function


@dataclass
class Request:
    functions: list[str]  # names (globs for kernel functions)
    kernel: bool = False
    btf: str | None = None  # kernel: the BTF file, else the running kernel's
    dwarf: str | None = None  # DWARF of the same build; else the input's own, if it has any
    arch: str | None = None  # btfgen arch name, else the input's ELF machine, else the host's
    program: str | None = None  # user: the executable
    headers: list[str] = field(default_factory=list)  # user: prototypes from C headers
    include: list[str] = field(default_factory=list)
    define: list[str] = field(default_factory=list)
    deny: bool = True  # kernel: leave out of the globs what btfgen itself calls (deny.txt)
    timings: bool = False  # say how long each stage took


def open_target(req: Request):
    """The request's input as `btfgen.open` opens it: the kernel's BTF (or --btf), the
    program's own BTF or DWARF, or its C headers; the arch by the one rule."""
    from btfgen.target import AUTO
    from btfgen.target import open as open_target_

    if req.kernel:
        input = req.btf or DEFAULT_PATH
        if not Path(input).exists():
            raise BuildError(f"{input}: no such file (a kernel without BTF? give --btf FILE)")
    else:
        input = req.program
        if not Path(input).is_file():
            raise BuildError(f"{input}: no such file")
    return open_target_(input, headers=req.headers, include_dirs=req.include,
                        defines=req.define, arch=req.arch, ctx="pt_regs",
                        dwarf=req.dwarf or AUTO)


def build(req: Request, out: Path) -> dict:
    """Write the trace directory `out`; return its manifest."""
    timings = trace_run.Timings(req.timings)
    with timings.stage("build: BTF load"):
        target = open_target(req)
    source = req.headers[0] if req.headers else target.input
    with timings.stage("build: selection"):
        funcs = _select(target, req, source)
    with timings.stage("build: placement"):
        placement = target.placement(funcs)
        layout, conv, types = placement.layout, target.convention, target.types
    for line in placement.notes():
        print(f"btfgen trace: {line}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    with timings.stage("build: generation"):
        for name, text in outputs.generate(layout, types, ("bpf", "python"),
                                           self_contained=True).items():
            (out / name).write_text(text)
    with timings.stage("build: compile"):
        _compile(out, conv.target_arch, conv.byte_order, user=not req.kernel)
    for module, name in RUNTIME.items():
        shutil.copyfile(HERE / module, out / name)
    names = [f.name for f in layout.functions]
    with timings.stage("build: spec table"):
        decoders = trace_run.load_decoders(out, {"module": outputs.file_name("python",
                                                                             layout.arch)})
        (out / SPECS).write_bytes(b"".join(decoders.spec(n) for n in names))
    manifest = {
        "format": trace_run.FORMAT,
        "kind": "kernel" if req.kernel else "user",
        "arch": layout.arch,
        # the run side has no arch descriptions: uname spellings, byte order, bpf() number
        **run_side_facts(conv),
        "module": outputs.file_name("python", layout.arch),
        "object": OBJECT,
        "functions": names,  # index = attach cookie = key in the specs map
        "btf_ids": [f.btf_id for f in layout.functions],  # what each one's records carry
        "specs": SPECS,
        "btf": source,
    }
    if req.kernel:
        # The run step warns when the target kernel's BTF is not the one built for.
        manifest["btf_sha256"] = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    else:
        from btfgen.trace import bpfload  # pyelftools, on the build machine only

        manifest["program"] = str(Path(req.program).resolve())
        with timings.stage("build: symbol resolution"):
            manifest["offsets"] = bpfload.function_file_offsets(req.program, names)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if req.timings:
        print(f"{trace_run.PROG}: time: build: total: {sum(timings.seconds.values()):.6f} s",
              file=sys.stderr)
    return manifest


def _select(target, req: Request, source: str) -> list:
    found, missing = target.select(req.functions)
    if missing:
        raise BuildError(f"no function {missing[0]!r} in {source}"
                         + (f" (nor {', '.join(missing[1:])})" if missing[1:] else ""), status=1)
    # Static functions of one name in several files: a probe names a function by its symbol,
    # so one prototype per name. Where they differ, which one a call went to is unknown, and
    # decoding with the wrong one would print wrong values: leave the name out.
    by_name: dict[str, list] = {}
    for f in found:
        by_name.setdefault(f.name, []).append(f)
    ambiguous = [n for n, fs in by_name.items() if len({f.type_id for f in fs}) > 1]
    if ambiguous:
        from btfgen.trace import run

        print(f"{run.PROG}: left out, several static functions of that name with different "
              f"prototypes: {', '.join(ambiguous)}", file=sys.stderr)
    funcs = [fs[0] for n, fs in by_name.items() if n not in ambiguous]
    if req.kernel and req.deny:
        funcs = _without_denied(funcs, req.functions)
    if not funcs:
        raise BuildError("nothing left to trace", status=1)
    # No limit on the count: the run side sizes the specs map to the functions it loads.
    return funcs


def _without_denied(funcs: list, asked: list[str]) -> list:
    """`funcs` without what deny.txt lists, unless named as it is; the count left out and why
    said on one line."""
    named = {w for w in asked if not _GLOB.search(w)}
    denied = deny.split([f.name for f in funcs if f.name not in named], deny.patterns())
    if not denied.left_out:
        return funcs
    out = {n for names in denied.left_out.values() for n in names}
    groups = "; ".join(f"{why}: {len(names)} ({', '.join(names[:3])}"
                       f"{', ...' if len(names) > 3 else ''})"
                       for why, names in denied.left_out.items())
    print(f"{trace_run.PROG}: left out {len(out)} functions btfgen's own probes and run side "
          f"call (deny list; --no-deny keeps them): {groups}", file=sys.stderr)
    return [f for f in funcs if f.name not in out]


def _compile(out: Path, target_arch: str, byte_order: str, user: bool) -> None:
    clang = shutil.which("clang-19") or shutil.which("clang")
    if clang is None:
        raise BuildError("clang is needed to compile the BPF program", status=1)
    cmd = [clang, "-O2", "-g", "-target", "bpfel" if byte_order == "little" else "bpfeb",
           f"-D__TARGET_ARCH_{target_arch}", *(["-DBTFGEN_USER"] if user else []),
           f"-I{out}", "-c", str(HERE / "trace.bpf.c"), "-o", str(out / OBJECT)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise BuildError(f"compiling trace.bpf.c failed: {proc.stderr.strip()}", status=1)
