"""Making names from BTF safe to print into generated code.

A BTF name is untrusted text: it may hold quotes, newlines, `*/`, keywords, or collide with another
name once cleaned. One filter per target language turns any string into an identifier of that
language; a `Namespace` then keeps the results of one scope distinct. Text that is not an
identifier (comments, string literals) has its own escapers, so nothing in a name can end a comment
or a literal early.
"""

from __future__ import annotations

import keyword
import re
from functools import lru_cache

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

C_KEYWORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local asm typeof __attribute__ __typeof__
    __asm__ __inline__ __restrict__ __volatile__ __extension__ __builtin_va_list __int128
    __label__ __auto_type __const__ __signed__ bool true false alignas alignof nullptr
    static_assert thread_local typeof_unqual constexpr""".split()
)
PY_RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)


def is_c_ident(name: str) -> bool:
    """True when `name` can be printed into C as it is (vmlinux.h spells it the same way)."""
    return bool(_IDENT.match(name)) and name not in C_KEYWORDS


@lru_cache(maxsize=1 << 16)
def c_ident(name: str, fallback: str = "anon") -> str:
    """The C identifier for `name`: bad characters become `_`, a keyword gets a trailing `_`."""
    ident = _NOT_IDENT.sub("_", name) or fallback
    if ident[0].isdigit():
        ident = "_" + ident
    if ident in C_KEYWORDS:
        ident += "_"
    return ident


def py_ident(name: str, fallback: str = "anon") -> str:
    """The Python identifier for `name` (ASCII only, so no Unicode normalisation surprises)."""
    ident = _NOT_IDENT.sub("_", name) or fallback
    if ident[0].isdigit():
        ident = "_" + ident
    if ident in PY_RESERVED or ident.startswith("__"):
        ident = "n" + ident if ident.startswith("__") else ident + "_"
    return ident


class Namespace:
    """One scope of generated names: every name handed out is distinct and deterministic (it
    depends only on the order of requests)."""

    __slots__ = ("_taken", "_clean")

    def __init__(self, clean=c_ident, reserved: frozenset[str] | set[str] = frozenset()):
        self._taken: set[str] = set(reserved)
        self._clean = clean

    def take(self, name: str, suffix: str = "") -> str:
        """A fresh identifier for `name`; `suffix` (e.g. a BTF id) is tried before counters."""
        base = self._clean(name)
        candidates = [base]
        if suffix:
            candidates.append(f"{base}__{suffix}")
        for candidate in candidates:
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate
        n = 2
        while f"{candidates[-1]}_{n}" in self._taken:
            n += 1
        candidate = f"{candidates[-1]}_{n}"
        self._taken.add(candidate)
        return candidate


def function_keys(functions, clean=c_ident) -> list[str]:
    """One distinct name per function (anything with `.name` and `.btf_id`), the same rule for
    every output: the name through `clean` (the C filter; `str` for the Python module's dict
    keys, which are printed as string literals); `name__<btf id>` where several functions share
    a name (static functions of different files) or the name is taken; then a counter, for
    names made to collide once cleaned."""
    counts: dict[str, int] = {}
    for f in functions:
        counts[f.name] = counts.get(f.name, 0) + 1
    ns = Namespace(clean)
    return [ns.take(f"{clean(f.name)}__{f.btf_id}") if counts[f.name] > 1
            else ns.take(f.name, str(f.btf_id)) for f in functions]


_COMMENT_BAD = re.compile(r"[^\x20-\x7e]|\*/|/\*|\\|\?\?")


# Printable ASCII but for the characters c_string escapes: quote, backslash and `?` (trigraphs).
_C_STRING_PLAIN = re.compile(r"[\x20\x21\x23-\x3e\x40-\x5b\x5d-\x7e]*")


@lru_cache(maxsize=1 << 16)
def c_comment(text: str) -> str:
    """`text` made safe inside a /* */ comment on one line (no `*/`, newline, trigraph or
    line-continuation backslash survives)."""
    return _COMMENT_BAD.sub("?", text)


def c_string(text: str) -> str:
    """A C string literal holding `text` (printable ASCII; everything else as octal escapes)."""
    if _C_STRING_PLAIN.fullmatch(text):  # most names: nothing to escape
        return f'"{text}"'
    out = []
    for byte in text.encode("utf-8", "replace"):
        ch = chr(byte)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'
