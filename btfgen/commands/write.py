"""Writing generated files: atomically (temp file + rename in the same directory, so a reader
never sees half a file) and only when the content changed (so make does not rebuild)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_if_changed(path: Path, content: str) -> bool:
    """Write `content` to `path` unless it already holds exactly that; True if written."""
    data = content.encode("utf-8")
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True
