"""The Python values a decoded field can be besides ints, floats, bytes, lists and dicts."""

from __future__ import annotations


class Enumerator(int):
    """An enum value: compares and computes as its number; `name` is its enumerator or None."""

    def __new__(cls, value: int, name: str | None):
        self = int.__new__(cls, value)
        self.name = name
        return self

    def __repr__(self) -> str:
        return f"{self.name}({int(self)})" if self.name else f"<enum {int(self)}>"

    def __reduce__(self):
        return (Enumerator, (int(self), self.name))


class Unavailable:
    """A value the trace ctx does not hold (e.g. a float in an FP register)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unavailable({self.reason!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Unavailable) and other.reason == self.reason

    __hash__ = None  # type: ignore[assignment]


class Unread:
    """A by-reference value whose memory was not read (no `read_memory` given)."""

    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def __repr__(self) -> str:
        return f"Unread(0x{self.address:x})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Unread) and other.address == self.address

    __hash__ = None  # type: ignore[assignment]


class CapturedString(str):
    """A string read from the traced process or the kernel: `truncated` when it went on past
    the limit (the text is its first characters), `space` the memory it was read from."""

    def __new__(cls, text: str, truncated: bool, space: str):
        self = str.__new__(cls, text)
        self.truncated, self.space = truncated, space
        return self

    def __reduce__(self):
        return (CapturedString, (str(self), self.truncated, self.space))


class CapturedBytes(bytes):
    """A buffer read from the traced process or the kernel (`PATH[LEN]`): the bytes read;
    `length` the length the call said (more than the bytes when cut: `truncated`), `space` the
    memory it was read from."""

    def __new__(cls, data: bytes, length: int, space: str):
        self = bytes.__new__(cls, data)
        self.length, self.space = length, space
        return self

    @property
    def truncated(self) -> bool:
        return self.length > len(self)

    def __repr__(self) -> str:
        return f"CapturedBytes({bytes(self)!r}, length={self.length})"

    def __reduce__(self):
        return (CapturedBytes, (bytes(self), self.length, self.space))
