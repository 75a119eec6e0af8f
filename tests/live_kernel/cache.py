"""Where downloads and derived artefacts live: outside the checkout, shared by runs on a machine.

Everything is keyed by what determines it (package version, a hash of sources), so a stale entry is
never reused and nothing needs expiring except the package indexes (see `debian.py`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

ROOT = Path(os.environ.get("BTFGEN_LIVE_CACHE", Path.home() / ".cache" / "btfgen-live"))


def path(*parts: str) -> Path:
    p = ROOT.joinpath(*parts)
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def write_atomic(dest: Path, data: bytes) -> Path:
    """Readers never see a half-written entry, even when two test runs race."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, dest)
    return dest


def digest(*items: bytes | str) -> str:
    h = hashlib.sha256()
    for item in items:
        b = item.encode() if isinstance(item, str) else item
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:16]
