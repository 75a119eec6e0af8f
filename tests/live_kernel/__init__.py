"""Live-kernel tests: btfgen-generated BPF loaded into Debian kernels booted under QEMU (TCG)."""
