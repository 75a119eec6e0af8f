"""Manifests made up for tests of the run side: btfgen.probe.manifest.Manifest with what a test
does not say filled in (a kernel trace on x86_64 of no function), nested entries given as the
dicts trace.json holds, with their own fields filled in the same way."""

from __future__ import annotations

from btfgen.probe.manifest import Manifest

BASE = {"kind": "kernel", "arch": "x86_64", "uname": ["x86_64"], "byte_order": "little",
        "bpf_syscall": 321, "module": "btfgen_x86_64.py", "object": "trace.bpf.o",
        "session_objects": {}, "functions": [], "btf_ids": [], "specs": "specs.bin",
        "btf": "/sys/kernel/btf/vmlinux", "filters": []}
NESTED = {"summary": {"count": False, "latency": False, "by": [], "keys": [], "key_size": 0,
                      "keyspecs": "sum_keys.bin"},
          "trampoline": {"variants": [], "objects": {}, "specs": "t.bin", "module": "t.py",
                         "refused": {}},
          "btf_module": {"name": "mod", "btf": "mod.ko", "first_id": 0, "btf_sha256": ""}}


def manifest(**fields) -> Manifest:
    data = {**BASE, **fields}
    for name, base in NESTED.items():
        if isinstance(data.get(name), dict):
            data[name] = {**base, **data[name]}
    made, unknown = Manifest.from_dict(data, "test")
    assert not unknown, unknown
    return made
