"""The example modules' sources as kbuild.build_module takes them: each example's C file, the
ring and proc files they share (examples/common/btfgen_ring.h) and the generated header, one
directory (the Kbuild kbuild.py writes adds it to the include path)."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def sources(example: str, header: bytes) -> dict[str, bytes]:
    """`example` ("fprobe", "kprobe"): btfgen_<example>.c, btfgen_ring.h, btfgen.kernel.h."""
    return {f"btfgen_{example}.c": (EXAMPLES / example / f"btfgen_{example}.c").read_bytes(),
            "btfgen_ring.h": (EXAMPLES / "common" / "btfgen_ring.h").read_bytes(),
            "btfgen.kernel.h": header}
