"""The workload of the fetcher comparison, run in the guest by Debian's python3 (standard library
only): file, process, memory and network system calls in a loop, so that the kernel functions
traced by both btfgen and the kernel's own fprobe events are called many times with many values.

Usage: fetcher_workload.py ROUNDS
"""

import mmap
import os
import socket
import sys

DIR = "/tmp/fetcher"


def files(n: int) -> None:
    os.makedirs(DIR, exist_ok=True)
    path = f"{DIR}/f{n % 3}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600 + n % 0o100)
    os.write(fd, bytes(range(256)) * (1 + n % 7))
    os.lseek(fd, 0x1000 * n + 17, os.SEEK_SET)
    os.write(fd, b"x")
    os.pread(fd, 64, 5 + n)
    os.fstat(fd)
    os.ftruncate(fd, 4096 + n)
    os.fsync(fd)
    os.close(fd)
    os.rename(path, path + ".moved")
    os.stat(path + ".moved")
    os.listdir(DIR)
    os.unlink(path + ".moved")
    r, w = os.pipe()
    os.write(w, b"through a pipe")
    os.read(r, 100)
    os.close(r)
    os.close(w)


def processes(n: int) -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(n % 100)
    os.waitpid(pid, 0)
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/busybox", ["true", "true"])
    os.waitpid(pid, 0)


def memory(n: int) -> None:
    size = 0x1000 * (4 + n % 8)
    m = mmap.mmap(-1, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for at in range(0, size, 0x1000):
        m[at] = n & 0xFF
    m.close()
    with open(f"{DIR}/map", "wb+") as f:
        f.write(bytes(0x2000))
        f.flush()
        shared = mmap.mmap(f.fileno(), 0x2000)
        shared[0x1000] = 1
        shared.flush()
        shared.close()


def network(n: int) -> None:
    a, b = socket.socketpair()
    a.sendall(b"unix %d" % n)
    b.recv(64)
    a.close()
    b.close()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    client.sendall(b"tcp" * (1 + n))
    peer.recv(4096)
    for s in (client, peer, server):
        s.close()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.sendto(b"udp", udp.getsockname())
    udp.recvfrom(64)
    udp.close()


def main() -> None:
    rounds = int(sys.argv[1])
    for n in range(rounds):
        files(n)
        processes(n)
        memory(n)
        network(n)
    print(f"workload: {rounds} rounds")


if __name__ == "__main__":
    main()
