"""btfgen's output for a live kernel: run the CLI on the kernel's BTF, wrap, compile, bundle,
and read the records back with the layouts from the compiled object's BTF."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from btfgen.btf import measure, walk
from btfgen.btf import types as T
from btfgen.btf.reader import load_btf

from . import build, bundle, cache, wrapper
from . import kernel as kernels

REPO = Path(__file__).resolve().parents[2]


class GenerateError(RuntimeError):
    pass


@dataclass(frozen=True)
class Generated:
    directory: Path
    functions: list[str]  # in spec order: index = kprobe_multi cookie = record key
    self_contained: bool

    def python_module(self, arch: str):
        path = self.directory / f"btfgen_{arch}.py"
        spec = importlib.util.spec_from_file_location(f"btfgen_live_{arch}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


def generate(kernel: kernels.Kernel, btf: Path, functions: list[str]) -> Generated:
    out = cache.ROOT / "generated" / cache.digest(kernel.key, *functions, _btfgen_sources())
    cmd = [sys.executable, "-m", "btfgen", str(btf), "--arch", kernel.target.arch,
           "--lang", "bpf,python", "-o", str(out), "-q"]
    for f in functions:
        cmd += ["--func", f]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        raise GenerateError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    specs = (out / "btfgen_specs.h").read_text()
    order = sorted(
        (int(n), name) for name, n in re.findall(r"#define BTFGEN_SPEC_(\w+) (\d+)", specs)
    )
    header = (out / "btfgen.bpf.h").read_text()
    return Generated(out, [name for _, name in order], "typedef signed char __s8;" in header)


def _btfgen_sources() -> str:
    """A change to the generator must regenerate: key the cache by its sources."""
    parts = []
    for d in ("btfgen", "templates", "grammars"):
        for p in sorted((REPO / d).rglob("*")):
            if p.is_file() and p.suffix in (".py", ".j2", ".lark", ".abi"):
                parts.append(p.read_bytes())
    return cache.digest(*parts)


def compile_bundle(kernel: kernels.Kernel, gen: Generated, vmlinux_h: Path | None,
                   multi: bool, pointer_size: int) -> tuple[bytes, bytes]:
    """(BPF object, bundle) for the wrapper around the generated header."""
    text = wrapper.source(gen.functions, gen.self_contained, multi, pointer_size)
    # Named by its content: tests running at once may want other wrappers of one generated set.
    src = gen.directory / f"live_wrapper-{cache.digest(text)}.bpf.c"
    if not src.exists():
        cache.write_atomic(src, text.encode())
    include = [gen.directory] + ([vmlinux_h.parent] if vmlinux_h else [])
    obj = build.bpf_object(kernel.target, src, include, debug=True)
    cookies = [(f, i) for i, f in enumerate(gen.functions)] if multi else None
    return obj, bundle.make(obj, cookies)


class Layouts:
    """Member offsets of the wrapper's record structs, from the object's BTF."""

    def __init__(self, obj: bytes, big_endian: bool):
        self.btf = load_btf("wrapper object", obj)
        self.order = "big" if big_endian else "little"

    def struct(self, name: str) -> T.Struct:
        found = self.btf.find_types(name, kind=T.Kind.STRUCT)
        if not found:
            raise GenerateError(f"wrapper object: no struct {name}")
        return found[0]

    def fields(self, name: str, rec: bytes) -> dict[str, object]:
        """Top-level members; struct members one level down as dicts of integers."""
        out: dict[str, object] = {}
        for m in self.struct(name).members:
            out[m.name] = self._value(m.type, rec, m.offset)
        return out

    def _value(self, t: T.Type, rec: bytes, off: int):
        s = walk.strip(t)
        if isinstance(s, T.Struct):
            inner = {m.name: self._value(m.type, rec, off + m.offset) for m in s.members}
            # A kernel one-member struct (kuid_t's val) and btfgen's return struct (its `value`)
            # stand for their member; the argument structs stay dicts of names.
            if len(inner) == 1 and not s.name.startswith("btfgen_args_"):
                return next(iter(inner.values()))
            return inner
        size = measure.size_of(s)
        if isinstance(s, T.Array):
            n = s.nelems
            step = size // n
            return [int.from_bytes(rec[off + i * step: off + (i + 1) * step], self.order)
                    for i in range(n)]
        return int.from_bytes(rec[off: off + size], self.order)
