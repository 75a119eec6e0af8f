"""Values as `btfgen trace` and the example project's loader print them, read back as numbers
to compare with what the system calls passed."""

from __future__ import annotations

import re

_MASK = (1 << 64) - 1


def loader_said(lines: list[str]) -> tuple[int, dict[str, str]]:
    """The guest loader's own lines: (`pagesize N`, {action: what `call ACTION = R` returned})."""
    pagesize = next((m.group(1) for line in lines if (m := re.match(r"pagesize (\d+)$", line))),
                    None)
    assert pagesize is not None, "the loader printed no pagesize line"
    calls = dict(m.groups() for line in lines if (m := re.match(r"call (\S+) = (\S+)$", line)))
    return int(pagesize), calls


def fields(text: str) -> dict[str, str]:
    """`a=1, b={c=2, d=3}` -> {"a": "1", "b": "{c=2, d=3}"}: split at top-level commas."""
    out, depth, start = {}, 0, 0
    for i, ch in enumerate(text + ","):
        if ch in "{[(<":
            depth += 1
        elif ch in "}])>":
            depth -= 1
        elif ch == "," and depth == 0:
            key, _, value = text[start:i].strip().partition("=")
            out[key] = value
            start = i + 1
    return out


def value(text: str, order: str = "little"):
    """A printed value as a number: ints, hex pointers, NAME(7) enums, one-member structs, a
    struct's raw bytes (`bytes:..`, in the target's byte `order`); else the text itself."""
    text = text.strip()
    if re.fullmatch(r"-?\d+|0x[0-9a-f]+", text):
        return int(text, 0)
    if m := re.fullmatch(r"\w+\((-?\d+)\)", text):
        return int(m.group(1))
    if m := re.fullmatch(r"bytes:([0-9a-f]+)", text):
        return int.from_bytes(bytes.fromhex(m.group(1)), order)
    if text.startswith("{") and text.endswith("}"):
        inner = fields(text[1:-1])
        if len(inner) == 1:
            return value(next(iter(inner.values())), order)
    return text


def same(expected: int, printed) -> bool:
    """Whether a printed number is the expected one, both taken as 64-bit patterns."""
    return isinstance(printed, int) and expected & _MASK == printed & _MASK
