"""Which processes a trace runs and reports: a program run under it (started, gated until the
probes are in place), a running process (--pid), or every process."""

from __future__ import annotations

import os
import shutil
import signal
from dataclasses import dataclass

from . import prog
from .errors import RunError
from .manifest import Manifest
from .options import Options


@dataclass(frozen=True)
class Processes:
    """What a trace runs and which processes it reports."""
    argv: tuple[str, ...] | None  # run this command, and report it and its children
    pid: int  # else report this process and its children; 0: every process but the tracer


def processes(manifest: Manifest, opts: Options) -> Processes:
    """A program is run (its arguments after --) unless --pid; a library (the manifest's
    `library`: only a probe target, never run, though glibc's libc.so.6 would run) and the
    kernel are traced in the command after --, in --pid, or else in every process."""
    if opts.pid:
        return Processes(None, opts.pid)
    if manifest.kind == "kernel" or manifest.library:
        return Processes(tuple(opts.command) or None, 0)
    return Processes((manifest.program, *opts.command), 0)


def everyone(choice: Processes) -> bool:
    return choice.argv is None and not choice.pid


# The gate the command waits behind: a shell reading one line from fd 3, then exec'ing the
# command in its own pid. A line comes on start(); end of file (the tracer gave up) ends it.
GATE_FD = 3
GATE = f'read -r go <&{GATE_FD} || exit 1; exec "$@" {GATE_FD}<&-'


class Gated:
    """A command started now but exec'd only on start(): its pid can be filtered on, and the
    probes are in place, before it runs.

    The process that waits is /bin/sh, spawned (vfork, as posix_spawn does), never a fork of
    the tracer. A forked tracer has a copy of the tracer's page tables (a whole kernel's
    decoders: ~550 MB resident), and its exec then tears them down in the command's pid, after
    the gate, with every probe attached: in the whole-kernel guest run that teardown made
    ~750,000 of the ~865,000 events said to be the command's (docs/benchmarks.md). The shell's
    own teardown is a few hundred pages."""

    def __init__(self, argv: list[str]) -> None:
        path = command_path(argv[0])
        r, self._w = os.pipe()
        if r == GATE_FD:  # dup2 onto itself would leave it close-on-exec
            r, was = os.dup(r), r
            os.close(was)
        try:
            self.pid = os.posix_spawn(
                "/bin/sh", ["sh", "-c", GATE, prog.NAME, path, *argv[1:]], os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, r, GATE_FD)],
                # What Python ignores for itself (a write to a closed pipe, a file too large)
                # is the default again in the command, as subprocess does.
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as e:
            os.close(self._w)
            raise RunError(f"cannot start /bin/sh to run {argv[0]}: {e.strerror}") from None
        finally:
            os.close(r)

    def start(self) -> None:
        os.write(self._w, b"go\n")
        os.close(self._w)

    def cancel(self) -> None:
        os.close(self._w)
        os.waitpid(self.pid, 0)

    def poll(self) -> int | None:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return None
        return os.waitstatus_to_exitcode(status)


def command_path(name: str) -> str:
    """Where `name` runs from, as execvp finds it (a name with a slash as it is, else the first
    executable file of that name on PATH); said in one line, before anything is attached,
    where there is none."""
    if "/" not in name:
        found = shutil.which(name)
        if found is None:
            raise RunError(f"cannot run {name}: not found on PATH")
        return found
    if not os.path.exists(name):
        raise RunError(f"cannot run {name}: no such file")
    if not (os.path.isfile(name) and os.access(name, os.X_OK)):
        raise RunError(f"cannot run {name}: not an executable file")
    return name
