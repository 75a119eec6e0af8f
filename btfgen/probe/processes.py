"""Which processes a trace runs and reports: a program run under it (forked, gated until the
probes are in place), a running process (--pid), or every process."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from . import prog
from .options import Options


@dataclass(frozen=True)
class Processes:
    """What a trace runs and which processes it reports."""
    argv: tuple[str, ...] | None  # run this command, and report it and its children
    pid: int  # else report this process and its children; 0: every process but the tracer


def processes(manifest: dict, opts: Options) -> Processes:
    """A program is run (its arguments after --) unless --pid; a library (the manifest's
    `library`: only a probe target, never run, though glibc's libc.so.6 would run) and the
    kernel are traced in the command after --, in --pid, or else in every process."""
    if opts.pid:
        return Processes(None, opts.pid)
    if manifest["kind"] == "kernel" or manifest.get("library"):
        return Processes(tuple(opts.command) or None, 0)
    return Processes((manifest["program"], *opts.command), 0)


def everyone(choice: Processes) -> bool:
    return choice.argv is None and not choice.pid


class Gated:
    """A command forked now but exec'd only on start(): its pid can be filtered on, and the
    probes are in place, before it runs."""

    def __init__(self, argv: list[str]) -> None:
        r, self._w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._w)
            if os.read(r, 1) != b"x":  # the tracer gave up
                os._exit(1)
            try:
                os.execvp(argv[0], argv)
            except OSError as e:
                print(f"{prog.NAME}: cannot run {argv[0]}: {e.strerror}", file=sys.stderr)
            os._exit(127)
        os.close(r)

    def start(self) -> None:
        os.write(self._w, b"x")
        os.close(self._w)

    def cancel(self) -> None:
        os.close(self._w)
        os.waitpid(self.pid, 0)

    def poll(self) -> int | None:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return None
        return os.waitstatus_to_exitcode(status)
