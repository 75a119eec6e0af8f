"""A minimal GDB remote serial protocol client, enough to drive qemu-user's gdbstub.

Debian's gdb-multiarch cannot talk to qemu-loongarch64 (it has no LoongArch support), so the
harness speaks the protocol itself: breakpoints, continue, read registers and memory.
"""

from __future__ import annotations

import socket
import time


class RspError(RuntimeError):
    pass


class Remote:
    def __init__(self, port: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                self._sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
                # Small request/reply packets: Nagle's delay would cost 40 ms per command.
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RspError(f"cannot connect to the gdbstub on port {port}") from None
                time.sleep(0.05)
        self._buf = b""
        # qemu (7.2) answers 'p' and sizes its 'g' reply only once the client has read the
        # target description, as gdb always does first.
        self.command("qXfer:features:read:target.xml:0,ffb")

    def close(self) -> None:
        self._sock.close()

    def _recv_more(self) -> None:
        data = self._sock.recv(65536)
        if not data:
            raise RspError("gdbstub closed the connection")
        self._buf += data

    def _packet(self) -> str:
        while True:
            start = self._buf.find(b"$")
            if start >= 0:
                end = self._buf.find(b"#", start)
                if end >= 0 and len(self._buf) >= end + 3:
                    body = self._buf[start + 1:end]
                    self._buf = self._buf[end + 3:]
                    self._sock.sendall(b"+")
                    return body.decode("latin-1")
            self._recv_more()

    def command(self, body: str) -> str:
        checksum = sum(body.encode()) & 0xFF
        self._sock.sendall(f"${body}#{checksum:02x}".encode())
        reply = self._packet()
        if reply.startswith("E") and len(reply) == 3:
            raise RspError(f"{body!r}: error {reply}")
        return reply

    def registers(self, width: int) -> list[bytes]:
        """The 'g' packet cut into `width`-byte registers (raw, target byte order)."""
        raw = bytes.fromhex(self.command("g"))
        return [raw[i:i + width] for i in range(0, len(raw) - width + 1, width)]

    def register(self, number: int) -> bytes:
        return bytes.fromhex(self.command(f"p{number:x}"))

    def read(self, addr: int, size: int, chunk: int = 1024) -> bytes:
        out = b""
        while len(out) < size:
            n = min(chunk, size - len(out))
            out += bytes.fromhex(self.command(f"m{addr + len(out):x},{n:x}"))
        return out

    def breakpoint(self, addr: int, insert: bool = True) -> None:
        if self.command(f"{'Z' if insert else 'z'}0,{addr:x},4") != "OK":
            raise RspError(f"breakpoint at {addr:#x} refused")

    def cont(self) -> str:
        return self.command("c")

    def kill(self) -> None:
        self._sock.sendall(b"$k#6b")
