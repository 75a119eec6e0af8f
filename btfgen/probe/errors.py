"""What goes wrong on the run side, each said in one line (a load error with libbpf's log), all
under one root, ProbeError: the run side imports nothing of btfgen, so not btfgen.errors."""

from __future__ import annotations


class ProbeError(Exception):
    """Anything the run side says in one line and stops on."""


class BpfLoadError(ProbeError):
    def __init__(self, message: str, errno: int = 0):
        super().__init__(message)
        self.errno = errno  # what the kernel or libbpf said, where known (0: not known)


class RunError(ProbeError):
    """One line for the user."""


class InputError(RunError):
    """Bad input (a directory that is no trace directory): exit status 2, as every command."""


class Interrupted(ProbeError):
    """SIGINT or SIGTERM before any function was attached: one line, and 128 + the signal
    (nothing was traced, so there is nothing else to say)."""

    def __init__(self, signum: int):
        import signal

        super().__init__(f"interrupted ({signal.Signals(signum).name}) before tracing began: "
                         "nothing attached")
        self.signum = signum


class BadInput(ProbeError):
    """What the build refused: bad usage or input (2, as every btfgen command), or a function
    that is not there (1, as `btfgen` and `btfgen layout` say it). The build's own refusals
    (trace/build.BuildError, trace/symbols.SymbolError) are kinds of it."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status
