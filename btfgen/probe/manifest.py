"""A trace directory as the run side finds it: its manifest (trace.json, which the build
wrote), its generated decoder module, and whether both fit this machine."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import platform
import sys
from pathlib import Path

from .errors import InputError, RunError

# (btfgen.btf.reader.DEFAULT_PATH: this side runs without btfgen.)
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
# What trace.json holds: 2 added the arch facts this side once kept in tables of its own; 3 the
# functions' BTF ids and the spec table (specs.bin) this side no longer makes.
FORMAT = 3


def load_manifest(directory: Path) -> dict:
    path = directory / "trace.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{directory}: not a trace directory (no trace.json; make one with "
                         "--build)") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from None
    if manifest.get("format") != FORMAT:
        raise InputError(f"{path}: format {manifest.get('format')!r}, this btfgen trace reads "
                         f"{FORMAT}: build the directory again")
    return manifest


def load_decoders(directory: Path, manifest: dict):
    path = directory / manifest["module"]
    spec = importlib.util.spec_from_file_location("btfgen_trace_decoders", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError as e:
        raise RunError(f"{path}: {e}") from None
    return module


def check_target(manifest: dict) -> list[str]:
    """Refuse another arch; warnings (not errors) for what may still work."""
    here = platform.machine()
    if here not in manifest["uname"] or sys.byteorder != manifest["byte_order"]:
        raise RunError(f"built for {manifest['arch']} ({manifest['byte_order']}-endian "
                       f"{' or '.join(manifest['uname'])}), this machine is {sys.byteorder}-"
                       f"endian {here}")
    warnings = []
    if manifest["kind"] == "kernel" and manifest.get("btf_sha256"):
        try:
            digest = hashlib.sha256(KERNEL_BTF.read_bytes()).hexdigest()
        except OSError:
            digest = None
        if digest and digest != manifest["btf_sha256"]:
            warnings.append(f"built for the BTF of {manifest['btf']}, not this kernel's: "
                            "arguments may be misplaced")
        module = manifest.get("btf_module")
        if module:
            try:
                here = hashlib.sha256((KERNEL_BTF.parent / module["name"]).read_bytes())
            except OSError:
                here = None
            if here is None:
                warnings.append(f"module {module['name']} is not loaded here: its functions "
                                "cannot be traced")
            elif here.hexdigest() != module["btf_sha256"]:
                warnings.append(f"built for the BTF of module {module['name']} in "
                                f"{module['btf']}, not the one loaded here: its arguments may "
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

