"""`--by kstack` / `--by ustack`, as given: `--count` and `--latency` keyed by each call's
stack (bpftrace's `@[kstack] = count()`, bcc's stackcount): a kernel function's by its kernel
stack or its task's user stack, a user function's by its user stack. Parsed here, apart from the
kernel's keys (btfgen.trace.summary): a stack key is counted by the tracer from each call's
event (stack_summary.py), not in the kernel's maps, so it keys every traced function and is
not one of a combined key's parts. Standard library only."""

from __future__ import annotations

# the key's word -> the stack it takes (--stack=WHAT)
STACK_KEYS = {"kstack": "kernel", "ustack": "user"}


def split(bys: list[str], kernel: bool) -> tuple[str | None, list[str]]:
    """(the stack key asked, or None; the other --by options). A stack key that does not fit
    is a ValueError of one line naming the --by and its column."""
    key, rest = None, []
    for text in bys:
        word = text.strip()
        if word in STACK_KEYS:
            if key is not None:
                raise ValueError(f"--by {text!r}: column 1: " + (
                    f"--by {word} is given already" if word == key else
                    "one stack key: kstack or ustack for kernel functions, ustack for user "
                    "functions"))
            key = word
            continue
        _check_not_a_part(text)
        rest.append(text)
    if key is None:
        return None, rest
    if rest:
        raise ValueError(f"--by {rest[0]!r}: column 1: --by {key} keys every function by its "
                         "stack, counted by the tracer from each call's event; other keys are "
                         "counted in the kernel, and the two are not combined")
    if key == "kstack" and not kernel:
        raise ValueError("--by kstack: column 1: a user function's call has no kernel stack "
                         "of its own (the uprobe's); give --by ustack")
    return key, rest


def _check_not_a_part(text: str) -> None:
    """`--by 'FUNC: ustack'`: a stack key is every function's, never a part of one's key."""
    func, colon, parts = text.partition(":")
    if not colon:
        return
    at = len(func) + 1
    for piece in parts.split(","):
        if piece.strip() in STACK_KEYS:
            column = at + 1 + len(piece) - len(piece.lstrip())
            raise ValueError(f"--by {text!r}: column {column}: a stack key keys every traced "
                             f"function: give it alone, `--by {piece.strip()}`")
        at += len(piece) + 1
