"""Fixtures for the live-kernel tests: one fetched kernel per target, skipped with a reason when
QEMU or the Debian packages cannot be had (a user without network), failed under CI=true (a run
that skipped every kernel it came for must not pass)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import btf, debian
from . import kernel as kernels
from .targets import TARGETS, Target


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "live: boots Debian kernels under QEMU (needs the network once, then cached)"
    )


_kernels: dict[str, kernels.Kernel] = {}


def unavailable(reason: str):
    """Skip for want of something outside the project; under CI, where the install step must
    have provided it, fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a live test that cannot run fails)", pytrace=False)
    pytest.skip(reason)


def kernel_for(name: str) -> kernels.Kernel:
    target: Target = TARGETS[name]
    if not target.qemu_available():
        unavailable(f"{target.qemu[0]} is not installed")
    if name not in _kernels:
        try:
            _kernels[name] = kernels.fetch(target)
            kernels.busybox(target)
        except debian.PackageError as e:
            unavailable(f"{name}: kernel package cannot be had: {e}")
    return _kernels[name]


def btf_for(kernel: kernels.Kernel) -> Path:
    """The kernel's BTF; a -dbg package that cannot be had skips like a kernel package."""
    try:
        return btf.vmlinux_btf(kernel)
    except debian.PackageError as e:
        unavailable(f"{kernel.target.name}: BTF cannot be made: {e}")


def kernel_with_python(name: str) -> tuple[kernels.Kernel, Path]:
    """The kernel and its BTF, for a test that runs the tracer's Python side in the guest:
    skipped when Debian's python3/libbpf1 for the target cannot be had."""
    from . import python_guest

    k = kernel_for(name)
    btf_path = btf_for(k)
    try:
        python_guest.files(k.target)
    except Exception as e:  # noqa: BLE001 - the packages' own errors, as trace_guest says
        pytest.skip(f"{name}: Debian's python3/libbpf1 cannot be had: {e}")
    return k, btf_path
