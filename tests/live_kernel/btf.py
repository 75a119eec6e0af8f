"""The guest kernel's own BTF, read out once per kernel build and cached.

Where the kernel has /sys/kernel/btf/vmlinux, a boot prints it gzip'd and base64'd on the console;
where it has none (bookworm's 686-pae), `pahole -J` makes it from the -dbg package's vmlinux.
"""

from __future__ import annotations

import base64
import gzip
import re
import subprocess
import tempfile
from pathlib import Path

from . import cache
from . import kernel as kernels
from .guest import Guest

_B64 = re.compile(r"^[A-Za-z0-9+/=]+$")


def vmlinux_btf(kernel: kernels.Kernel) -> Path:
    dest = cache.ROOT / "btf" / f"{kernel.key}.btf"
    if dest.exists():
        return dest
    if kernel.target.btf_from_dbg or dest.with_suffix(".pahole.btf").exists():
        return _from_dbg(kernel, dest)
    g = Guest()
    g.step("btf", "[ -e /sys/kernel/btf/vmlinux ] || { echo NOBTF; exit 0; }; "
                  "gzip -c /sys/kernel/btf/vmlinux | base64")
    # Once per kernel build, and a serial console is slow under TCG: be patient.
    boot = g.run(kernel, timeout=900)
    text, rc = boot.section("btf")
    if rc:
        raise boot.fail("reading /sys/kernel/btf/vmlinux failed")
    if "NOBTF" in text:
        return _from_dbg(kernel, dest)
    # Kernel messages may interleave with the dump; base64 lines are recognisable on their own.
    data = "".join(line for line in text.splitlines() if _B64.match(line))
    try:
        raw = gzip.decompress(base64.b64decode(data))
    except (ValueError, OSError, EOFError) as e:
        raise boot.fail(f"BTF dump damaged on the console: {e}") from None
    if raw[:2] not in (b"\x9f\xeb", b"\xeb\x9f"):
        raise boot.fail("/sys/kernel/btf/vmlinux is not BTF (bad magic)")
    return cache.write_atomic(dest, raw)


def _from_dbg(kernel: kernels.Kernel, dest: Path) -> Path:
    dest = dest.with_suffix(".pahole.btf")  # keyed apart: made here, not read from the kernel
    if dest.exists():
        return dest
    vmlinux = kernels.debug_vmlinux(kernel)
    with tempfile.TemporaryDirectory(prefix="btfgen-pahole-") as tmp:
        out = Path(tmp) / "vmlinux.btf"
        # As the kernel's own build does: Rust units would put Rust type names into the BTF.
        proc = subprocess.run(
            ["pahole", "--lang_exclude=rust", f"--btf_encode_detached={out}", str(vmlinux)],
            capture_output=True,
            text=True,
        )
        if proc.returncode or not out.exists():
            raise RuntimeError(f"pahole -J {vmlinux}: {proc.stderr.strip()[-300:]}")
        return cache.write_atomic(dest, out.read_bytes())
