"""What goes wrong on the run side, each said in one line (a load error with libbpf's log)."""

from __future__ import annotations


class BpfLoadError(RuntimeError):
    def __init__(self, message: str, errno: int = 0):
        super().__init__(message)
        self.errno = errno  # what the kernel or libbpf said, where known (0: not known)


class RunError(Exception):
    """One line for the user."""


class InputError(RunError):
    """Bad input (a directory that is no trace directory): exit status 2, as every command."""


class Interrupted(Exception):
    """SIGINT or SIGTERM before any function was attached: one line, and 128 + the signal
    (nothing was traced, so there is nothing else to say)."""

    def __init__(self, signum: int):
        import signal

        super().__init__(f"interrupted ({signal.Signals(signum).name}) before tracing began: "
                         "nothing attached")
        self.signum = signum


class BadInput(Exception):
    """What the build refused: bad usage or input (2, as every btfgen command), or a function
    that is not there (1, as `btfgen` and `btfgen layout` say it)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
