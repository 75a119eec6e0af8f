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
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from btfgen.abi.arches import load_arch, run_side_facts
from btfgen.btf.reader import DEFAULT_PATH, open_btf
from btfgen.codegen import outputs
from btfgen.codegen.select import select_functions
from btfgen.place import place_functions

HERE = Path(__file__).resolve().parent
# The run side, as the trace directory names it: module in this package -> file there.
RUNTIME = {"tool.py": "btfgen_trace.py", "bpfload.py": "bpfload.py", "run.py": "run.py",
           "output.py": "output.py", "recording.py": "recording.py"}
MANIFEST = "trace.json"
OBJECT = "trace.bpf.o"
MAX_FUNCTIONS = 4096  # the specs map's size in trace.bpf.c


class BuildError(Exception):
    """Bad input or a missing tool: one line for the user."""


@dataclass
class Request:
    functions: list[str]  # names (globs for kernel functions)
    kernel: bool = False
    btf: str | None = None  # kernel: the BTF file, else the running kernel's
    dwarf: str | None = None  # DWARF of the same build; else the input's own, if it has any
    arch: str | None = None  # btfgen arch name, else the host's
    program: str | None = None  # user: the executable
    headers: list[str] = field(default_factory=list)  # user: prototypes from C headers
    include: list[str] = field(default_factory=list)
    define: list[str] = field(default_factory=list)


def build(req: Request, out: Path) -> dict:
    """Write the trace directory `out`; return its manifest."""
    out.mkdir(parents=True, exist_ok=True)
    types, source = _kernel_types(req) if req.kernel else _program_types(req, out)
    conv = load_arch(req.arch or platform.machine(), getattr(types, "pointer_size", None))
    funcs = _select(types, req, source)
    layout = _with_dwarf(place_functions(types, conv, funcs, ctx="pt_regs"), req, source, conv)
    for name, text in outputs.generate(layout, types, ("bpf", "python"),
                                       self_contained=True).items():
        (out / name).write_text(text)
    _compile(out, conv.target_arch, conv.byte_order, user=not req.kernel)
    for module, name in RUNTIME.items():
        shutil.copyfile(HERE / module, out / name)
    names = [f.name for f in layout.functions]
    manifest = {
        "format": 2,
        "kind": "kernel" if req.kernel else "user",
        "arch": layout.arch,
        # the run side has no arch descriptions: uname spellings, byte order, bpf() number
        **run_side_facts(conv),
        "module": outputs.file_name("python", layout.arch),
        "object": OBJECT,
        "functions": names,  # index = attach cookie = key in the specs map
        "btf": source,
    }
    if req.kernel:
        # The run step warns when the target kernel's BTF is not the one built for.
        manifest["btf_sha256"] = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    else:
        from btfgen.trace import bpfload  # pyelftools, on the build machine only

        manifest["program"] = str(Path(req.program).resolve())
        manifest["offsets"] = [bpfload.function_file_offset(req.program, n) for n in names]
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _kernel_types(req: Request):
    path = req.btf or DEFAULT_PATH
    if not Path(path).exists():
        raise BuildError(f"{path}: no such file (a kernel without BTF? give --btf FILE)")
    return open_btf(path), path


def _program_types(req: Request, work: Path):
    if req.headers:
        from btfgen.cheader import load_headers

        return load_headers(req.headers, arch=req.arch or platform.machine(),
                            include_dirs=req.include, defines=req.define), req.headers[0]
    if not Path(req.program).is_file():
        raise BuildError(f"{req.program}: no such file")
    from btfgen.dwarf.pahole import open_input

    return open_input(req.program), req.program


def _with_dwarf(layout, req: Request, source: str, conv):
    """The layout corrected by the input's DWARF (a -g program, a -dbg vmlinux given as --btf):
    a function compiled with another convention than its prototype is placed where the compiler
    says, or unavailable; never traced silently wrong."""
    from btfgen.dwarf.reader import has_dwarf

    path = req.dwarf
    if path is None:
        if req.headers or not source or not Path(source).is_file() or not has_dwarf(source):
            return layout
        path = source
    elif not Path(path).is_file():
        raise BuildError(f"{path}: no such file")
    from btfgen.dwarf.correct import correct_layout

    layout, corrections = correct_layout(layout, path, conv, selected=True)
    if corrections:
        print(f"btfgen trace: placed from DWARF ({path}): "
              + ", ".join(c.name for c in corrections), file=sys.stderr)
    return layout


def _select(types, req: Request, source: str) -> list:
    if not req.kernel:
        funcs = []
        for name in dict.fromkeys(req.functions):
            found = types.find_funcs(name)
            if not found:
                raise BuildError(f"no function {name!r} in {source}")
            funcs.append(found[0])
        return funcs
    found, missing = select_functions(types, req.functions)
    if missing:
        raise BuildError(f"no function {missing[0]!r} in {source}"
                         + (f" (nor {', '.join(missing[1:])})" if missing[1:] else ""))
    # Static functions of one name in several files: a kprobe_multi link names a function by
    # its symbol, so one prototype per name. Where they differ, which one a call went to is
    # unknown, and decoding with the wrong one would print wrong values: leave the name out.
    by_name: dict[str, list] = {}
    for f in found:
        by_name.setdefault(f.name, []).append(f)
    ambiguous = [n for n, fs in by_name.items() if len({f.type_id for f in fs}) > 1]
    if ambiguous:
        from btfgen.trace import run

        print(f"{run.PROG}: left out, several static functions of that name with different "
              f"prototypes: {', '.join(ambiguous)}", file=sys.stderr)
    funcs = [fs[0] for n, fs in by_name.items() if n not in ambiguous]
    if not funcs:
        raise BuildError("nothing left to trace")
    if len(funcs) > MAX_FUNCTIONS:
        raise BuildError(f"{len(funcs)} functions match; at most {MAX_FUNCTIONS} at once")
    return funcs


def _compile(out: Path, target_arch: str, byte_order: str, user: bool) -> None:
    clang = shutil.which("clang-19") or shutil.which("clang")
    if clang is None:
        raise BuildError("clang is needed to compile the BPF program")
    cmd = [clang, "-O2", "-g", "-target", "bpfel" if byte_order == "little" else "bpfeb",
           f"-D__TARGET_ARCH_{target_arch}", *(["-DBTFGEN_USER"] if user else []),
           f"-I{out}", "-c", str(HERE / "trace.bpf.c"), "-o", str(out / OBJECT)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise BuildError(f"compiling trace.bpf.c failed: {proc.stderr.strip()}")
