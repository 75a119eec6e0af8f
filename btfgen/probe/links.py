"""The links a BpfObject holds, each destroyed once: one made by libbpf, or one made with the
raw syscall (a multi or session link: a file descriptor)."""

from __future__ import annotations

import os

from .libbpf import libbpf


class FdLink:
    """A link made with the raw syscall: a file descriptor to close."""

    def __init__(self, fd: int, kprobe_multi: bool = False) -> None:
        self.fd = fd
        self.kprobe_multi = kprobe_multi  # a kprobe_multi link (a kprobe session's too)

    def destroy(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class LibbpfLink:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def destroy(self) -> None:
        if self.ptr:
            libbpf().bpf_link__destroy(self.ptr)
            self.ptr = 0

