"""Run independent pieces of work in forked children, for the whole-kernel outputs.

Rendering the BPF header, the spec table, the Python module and the layout of ~56k functions
are independent once placement is done, and each is pure Python: threads would share one
interpreter lock, so they run in forked children that inherit the placed layout for free and
send back only their text. Where fork is missing the work runs here, one piece after another.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable

Work = Callable[[], dict[str, str]]


class ChildFailed(RuntimeError):
    """A child died without a result, or raised something that does not survive pickling."""


def run(works: list[Work]) -> dict[str, str]:
    """Each work's files, merged in order. The first runs in this process while the others run
    in children; an exception in a child is raised here."""
    if len(works) <= 1 or not hasattr(os, "fork"):
        out: dict[str, str] = {}
        for w in works:
            out.update(w())
        return out
    children = [_spawn(w) for w in works[1:]]
    out = {}
    try:
        out.update(works[0]())
    except BaseException:  # Ctrl-C included: reap the children, keep this exception
        for pid, fd in children:
            os.close(fd)
            os.waitpid(pid, 0)
        raise
    for pid, fd in children:
        out.update(_collect(pid, fd))
    return out


def _spawn(work: Work) -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        return pid, r
    os.close(r)
    code = 0
    try:
        try:
            data = pickle.dumps((True, work()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as e:  # handed to the parent, which raises it
            code = 1
            try:
                data = pickle.dumps((False, e))
            except Exception:
                data = pickle.dumps((False, ChildFailed(f"{type(e).__name__}: {e}")))
        with os.fdopen(w, "wb") as f:
            f.write(data)
    finally:
        # Never return into the parent's code path (its atexit handlers, its buffered output).
        os._exit(code)


def _collect(pid: int, fd: int) -> dict[str, str]:
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise ChildFailed(f"a code generation child ended without a result (status {status})")
    ok, value = pickle.loads(data)
    if not ok:
        raise value
    return value
