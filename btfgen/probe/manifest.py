"""A trace directory as the run side finds it: its manifest (trace.json, which the build
wrote), its generated decoder module, and whether both fit this machine."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import platform
import sys
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path

from . import prog
from .errors import InputError, RunError

# (btfgen.btf.reader.DEFAULT_PATH: this side runs without btfgen.)
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
MANIFEST = "trace.json"  # the manifest's file name in a trace directory
# What trace.json holds: 2 added the arch facts this side once kept in tables of its own; 3 the
# functions' BTF ids and the spec table (specs.bin) this side no longer makes.
FORMAT = 3


@dataclass(frozen=True, kw_only=True)
class BtfModule:
    """A kernel module's functions traced (--module): the module's name, the BTF file it was
    built from, the first BTF id of its own (the functions from it on are its: a link of their
    own on the trampoline), and its BTF's digest (compared with /sys/kernel/btf/NAME's)."""

    name: str
    btf: str
    first_id: int
    btf_sha256: str


@dataclass(frozen=True, kw_only=True)
class SummarySpec:
    """--count / --latency as built: the --by keys, the functions counted at exit (their filter
    decides on $retval), whether a call's exit has work (else the entry is attached alone), the
    key's size and its spec table's file."""

    count: bool
    latency: bool
    by: list
    keys: list
    at_exit: list = field(default_factory=list)
    exit: bool = True  # a directory built before the manifest said so: yes
    key_size: int
    keyspecs: str


@dataclass(frozen=True, kw_only=True)
class StackKeys:
    """--count / --latency --by kstack|ustack as built: counted by the tracer from each call's
    event, which carries its stack (stack_summary.py); no summary in the kernel."""

    count: bool
    latency: bool
    by: str  # "kstack" or "ustack"


@dataclass(frozen=True, kw_only=True)
class Trampoline:
    """The BPF trampoline's part of a kernel trace directory: the variants the target kernel
    names, their objects, its spec table and decoder module (the trampoline ctx's), and the
    functions it cannot take (index, a string as JSON has it -> why): those go through a kprobe
    link of the same run."""

    variants: list
    objects: dict
    specs: str
    module: str
    refused: dict


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """trace.json: what the build (btfgen.trace.build) made and the run side needs, in
    format FORMAT. Written by to_json, read by load_manifest; the run side changes nothing in
    it. A field is None where the directory has none (a user trace has no btf_sha256, a kernel
    trace no program)."""

    kind: str  # "kernel" or "user"
    arch: str
    # the arch facts the run side has no descriptions for: uname spellings, byte order, bpf()
    uname: list
    byte_order: str
    bpf_syscall: int
    module: str  # the generated decoder module's file
    object: str  # the kprobe/uprobe programs' object
    # the session program's objects, by the session kfuncs' prototype (None: an older build)
    session_objects: dict | None = None
    # a user trace's sleepable programs' objects: "pair" (single or multi), and the session's
    # by the kfuncs' prototype (None: a kernel trace, or an older build)
    sleepable_objects: dict | None = None
    # the BPF objects the directory holds: every one its other fields name where built for a
    # run anywhere (--build), only those the run would load where built for a run on the
    # machine it was built on (one command: attach.objects_loaded); None: an older build, all
    objects: list | None = None
    functions: list  # index = attach cookie = key in the specs map
    btf_ids: list  # what each one's records carry
    specs: str  # the spec table's file
    btf: str  # what the types came from (the kernel's BTF where a module was traced)
    filters: list  # compiled into the object; for the record
    summary: SummarySpec | None = None
    trampoline: Trampoline | None = None
    btf_sha256: str | None = None  # kernel: the run side warns on another kernel's BTF
    btf_module: BtfModule | None = None
    program: str | None = None  # user: the traced file
    library: bool | None = None  # user: a library is only probed, never run
    offsets: list | None = None  # user: each function's file offset
    # the functions (indexes) whose --filter decides on $retval: under --errors, the filter
    # is what the user says is an error, and every exit it lets through is printed
    retval_filtered: list | None = None
    # --stack: what each entry's record carries after its data ("kernel", "user": stack_wire)
    stack: list | None = None
    # --by kstack / ustack: the calls summed by their stack from their events (with `stack`)
    stack_keys: StackKeys | None = None

    @property
    def kernel(self) -> bool:
        return self.kind == "kernel"

    def holds(self, obj: str) -> bool:
        """Whether the directory has the BPF object `obj` (a name its other fields give)."""
        return self.objects is None or obj in self.objects

    def to_json(self) -> str:
        """trace.json's text: `format` first, then the fields in their order, those that are
        None left out."""
        return json.dumps({"format": FORMAT, **_fields(self)}, indent=1) + "\n"

    @classmethod
    def from_dict(cls, data: dict, where: str) -> tuple[Manifest, list[str]]:
        """The manifest `data` (trace.json's object) holds, and what it holds that this
        version does not know (said by the caller); a field it lacks is an InputError of one
        line."""
        unknown: list[str] = []
        known = {f.name for f in fields(cls)} | {"format"}
        data = {k: v for k, v in data.items() if k in known or unknown.append(k)}
        data.pop("format", None)
        for name, typ in (("summary", SummarySpec), ("stack_keys", StackKeys),
                          ("trampoline", Trampoline),
                          ("btf_module", BtfModule)):
            if data.get(name) is not None:
                data[name] = _typed(typ, data[name], f"{where}: {name}", unknown)
        return _typed(cls, data, where, unknown), unknown


def _fields(obj) -> dict:
    out = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is not None:
            out[f.name] = _fields(value) if is_dataclass(value) else value
    return out


def _typed(cls, data, where: str, unknown: list[str]):
    """`cls` from the dict `data`: its unknown fields added to `unknown` (by their path), a
    missing one an InputError."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: not an object")
    names = {f.name for f in fields(cls)}
    prefix = where.partition(": ")[2]
    unknown.extend(f"{prefix}.{k}" if prefix else k for k in data if k not in names)
    for f in fields(cls):
        if f.name not in data and f.default is MISSING and f.default_factory is MISSING:
            raise InputError(f"{where}: no field {f.name!r} (written by another version of "
                             "btfgen trace?): build the directory again")
    return cls(**{k: v for k, v in data.items() if k in names})


def load_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{directory}: not a trace directory (no {MANIFEST}; make one with "
                         "--build)") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else None
        raise InputError(f"{path}: format {got!r}, this btfgen trace reads "
                         f"{FORMAT}: build the directory again")
    manifest, unknown = Manifest.from_dict(data, str(path))
    if unknown:
        prog.say(f"warning: {path}: fields this version does not know, ignored: "
                 f"{', '.join(unknown)}")
    return manifest


def load_decoders(directory: Path, module: str | Manifest):
    """The generated decoder module `module`: a file name in `directory` (the trampoline's
    Trampoline.module), or a Manifest's own (Manifest.module)."""
    path = directory / (module.module if isinstance(module, Manifest) else module)
    spec = importlib.util.spec_from_file_location("btfgen_trace_decoders", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError as e:
        raise RunError(f"{path}: {e}") from None
    return module


def check_target(manifest: Manifest) -> list[str]:
    """Refuse another arch; warnings (not errors) for what may still work."""
    here = platform.machine()
    if here not in manifest.uname or sys.byteorder != manifest.byte_order:
        raise RunError(f"built for {manifest.arch} ({manifest.byte_order}-endian "
                       f"{' or '.join(manifest.uname)}), this machine is {sys.byteorder}-"
                       f"endian {here}")
    warnings = []
    if manifest.kernel and manifest.btf_sha256:
        try:
            digest = hashlib.sha256(KERNEL_BTF.read_bytes()).hexdigest()
        except OSError:
            digest = None
        if digest and digest != manifest.btf_sha256:
            warnings.append(f"built for the BTF of {manifest.btf}, not this kernel's: "
                            "arguments may be misplaced")
        module = manifest.btf_module
        if module:
            try:
                here = hashlib.sha256((KERNEL_BTF.parent / module.name).read_bytes())
            except OSError:
                here = None
            if here is None:
                warnings.append(f"module {module.name} is not loaded here: its functions "
                                "cannot be traced")
            elif here.hexdigest() != module.btf_sha256:
                warnings.append(f"built for the BTF of module {module.name} in "
                                f"{module.btf}, not the one loaded here: its arguments may "
                                "be misplaced")
    return warnings


class DecoderView:
    """The generated module as the output sees it, a function's decoder from the module of
    the ctx its calls are attached through: the trampoline's (slots: its own module, the
    trampoline entry's `module`) for the functions on the trampoline, the directory's for the
    rest. Chosen before any event (use()), as the attach mode is."""

    def __init__(self, base) -> None:
        self._base, self._other, self._names = base, None, frozenset()

    def use(self, other, names) -> None:
        """`other` (a module, or None) decodes the functions `names`."""
        self._other, self._names = other, frozenset(names) if other is not None else frozenset()

    def _module(self, name: str):
        return self._other if name in self._names else self._base

    def function(self, name: str):
        return self._module(name).function(name)

    def _descriptor(self, name: str):
        return self._module(name)._descriptor(name)

    def descriptors(self, names: list[str]) -> list:
        """Each function's FunctionDesc, checked and made once a prototype (functions of one
        prototype differ only in name and id): a whole kernel's 42,926 functions share 24,663,
        and each made whole (its ops evaluated too, which a descriptor does not hold) took most
        of the tracer's start-up in a guest. Descriptors of one prototype share their fields'
        objects (a recording's writer encodes those once)."""
        made: dict = {}
        out = []
        for name in names:
            module = self._module(name)
            protos = getattr(module, "_FUNCTION_PROTOS", None)
            if protos is None:  # a module without prototypes' tables: as a decoder does
                out.append(module._descriptor(name)[0])
                continue
            fname, btf_id, k = protos[name]
            first = made.get((id(module), k))
            if first is None:
                first = made[id(module), k] = module.FunctionDesc.check(
                    (fname, btf_id) + module._values(k))
                out.append(first)
            else:
                out.append(first._replace(name=fname, btf_id=btf_id))
        return out

    def __getattr__(self, attr: str):  # BYTE_ORDER, POINTER_SIZE, ...: the same in both
        return getattr(self._base, attr)


class LazyFunctions(dict):
    """BTF id -> the decoder of the function with that id, made at its first event: making
    every one up front took a minute and most of a guest's memory for the whole kernel."""

    def __init__(self, decoders, names: list[str], btf_ids: list[int]) -> None:
        super().__init__()
        self._decoders = decoders
        self._names = dict(zip(btf_ids, names))

    def get(self, btf_id: int, default=None):
        fn = super().get(btf_id)
        if fn is None and btf_id in self._names:
            fn = self[btf_id] = self._decoders.function(self._names[btf_id])
        return default if fn is None else fn


def cookies(decoders, specs: bytes, n: int, byte_order: str) -> list[int]:
    """Each function's attach cookie (spec_format.Cookie: its index, the key of its spec, and
    whether the register image decodes it) from the `n` specs of specs.bin, by the generated
    module's copy of spec_format."""
    return decoders.cookies(specs, n, byte_order)

