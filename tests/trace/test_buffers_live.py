"""Buffers with a length (`--capture 'F: PATH[LEN]'`) on this host, what bcc's sslsniff does:
`openssl s_server` and `curl` on loopback, Debian's libssl3 traced from its header
(/usr/include/openssl/ssl.h). The request curl writes through SSL_write (`buf[num]`), the
response it reads through SSL_read at exit with the length it returned (`buf[retval]`), as
text; the same from a recording as jsonl and Parquet; a filter on the buffer's prefix; bad
lengths said in one line naming the column, exit 2. A client of ours reads the response through
SSL_read_ex (curl does not call it), its bytes at buf and their count in *readbytes at exit:
two words kept from entry to exit, on every way a uprobe's entry and exit are paired. And a
buffer of 2,000 bytes captured whole through a uprobe, one of 5,000 cut at --value-size.

Needs root and BPF (else skipped), and openssl, curl and libssl-dev (.ci/install): skipped,
with the reason, only where they are absent and CI is not set."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from btfgen.probe import features

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "buffers"
HEADER = "/usr/include/openssl/ssl.h"
BODY = "hello from a TLS server, read back through SSL_read\n"
CAPTURES = ["--capture", "SSL_write: buf[num]", "--capture", "SSL_read: buf[retval]"]


def _missing() -> str | None:
    for tool in ("openssl", "curl", "clang-19"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    if not Path(HEADER).is_file():
        return f"{HEADER} is missing (libssl-dev)"
    return None


@pytest.fixture(scope="module")
def tools():
    reason = _missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: .ci/install installs it")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def server(tools, tmp_path_factory):
    """An `openssl s_server -WWW` on a free loopback port serving hello.txt: -> its URL."""
    reason = features.bpf_programs().why
    if reason:
        pytest.skip(f"live uprobes unavailable: {reason}")
    d = tmp_path_factory.mktemp("tls")
    (d / "hello.txt").write_text(BODY)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    "key.pem", "-out", "cert.pem", "-days", "1", "-subj", "/CN=localhost"],
                   cwd=d, check=True, capture_output=True)
    with socket.socket() as s:  # a port free now; s_server takes it right after
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-key",
                             "key.pem", "-cert", "cert.pem", "-WWW", "-quiet"], cwd=d,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until it listens (it takes well under a second)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("openssl s_server exited")
                time.sleep(0.1)
        yield f"https://127.0.0.1:{port}/hello.txt"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def built(tools, tmp_path_factory):
    """tls_read_ex (linked with libssl) and sink, built here: -> their directory."""
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    d = tmp_path_factory.mktemp("progs")
    subprocess.run(["gcc", "-O2", "-o", str(d / "tls_read_ex"), str(HERE / "tls_read_ex.c"),
                    "-lssl", "-lcrypto"], check=True)
    subprocess.run(["gcc", "-O2", "-g", "-o", str(d / "sink"), str(HERE / "sink.c")],
                   check=True)
    return d


def _btfgen(*args, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def _trace(url: str, *more: str) -> subprocess.CompletedProcess:
    return _btfgen("trace", "--header", HEADER, "--value-size", "509", *more, "libssl.so.3",
                   "SSL_write", "SSL_read", "--", "curl", "-sk", url, "-o", "/dev/null")


def _request(url: str) -> str:
    port = url.split(":")[2].split("/")[0]
    return f"GET /hello.txt HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"


def _json_text(s: str) -> str:
    return json.dumps(s)[1:-1]


def test_request_and_response_as_text(server):
    out = _trace(server, *CAPTURES).stdout
    writes = [line for line in out.splitlines() if line.startswith("SSL_write(")]
    assert len(writes) == 1
    # The request line as curl handed it to TLS: num bytes, all of them.
    num = int(re.search(r"num=(\d+)", writes[0]).group(1))
    m = re.search(r', buf\[num\]="(.*)"\)$', writes[0])
    assert m and m.group(1).startswith(_json_text(_request(server)))
    assert len(json.loads(f'"{m.group(1)}"')) == num
    # Each read with a positive return shows that many bytes, read at exit through the
    # pointer its entry was given; a read of 0 or less says why nothing was captured.
    got = ""
    for line in out.splitlines():
        r = re.match(r"SSL_read -> (-?\d+) buf\[retval\]=(.*) \(\d+\.\d{3} us\)$", line)
        if not r:
            continue
        n, shown = int(r.group(1)), r.group(2)
        if n <= 0:
            # -1 named by the error of the last system call SSL_read made, where one failed
            # (its non-blocking read's EAGAIN, when the response had not come yet): timing's
            assert re.fullmatch(rf"<nothing to read: retval={n}>( E[A-Z0-9]+)?", shown), line
            continue
        text = json.loads(shown)
        assert len(text) == n
        got += text
    assert got.startswith("HTTP/1.0 200 ok\r\n") and got.endswith("\r\n\r\n" + BODY)


def test_recording_as_jsonl_and_parquet(server, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rec = tmp_path / "tls.btfrec"
    _trace(server, *CAPTURES, "--record", str(rec))
    lines = [json.loads(line) for line in
             _btfgen("decode", "--format", "jsonl", str(rec)).stdout.splitlines()]
    (write,) = [e for e in lines if e["function"] == "SSL_write" and e["kind"] == "entry"]
    sent = write["captures"]["buf[num]"]  # bytes in hex, with the length the call said
    assert sent["length"] == write["args"]["num"]
    assert bytes.fromhex(sent["hex"]).decode().startswith(_request(server))
    reads = [e for e in lines if e["function"] == "SSL_read" and e["kind"] == "exit"]
    body = b"".join(bytes.fromhex(e["captures"]["buf[retval]"]["hex"]) for e in reads
                    if e["return"] > 0)
    assert body.endswith(BODY.encode())
    for e in reads:
        if e["return"] <= 0:
            assert e["captures"]["buf[retval]"] == {
                "unavailable": f"nothing to read: retval={e['return']}"}

    ds = tmp_path / "ds"
    _btfgen("decode", "--format", "parquet", "-o", str(ds), str(rec))
    def table(function: str, kind: str):  # each function's partition has its own columns
        (part,) = ds.glob(f"host=*/kernel=*/function={function}")
        return pq.read_table(part, filters=[("kind", "=", kind)])

    t = table("SSL_read", "exit")
    assert t.schema.field("cap:buf[retval]").type == pa.binary()
    rows = sorted(zip(t.column("timestamp").to_pylist(), t.column("ret").to_pylist(),
                      t.column("cap:buf[retval]").to_pylist()))
    assert b"".join(b for _, ret, b in rows if ret > 0) == body
    assert all(b is None for _, ret, b in rows if ret <= 0)
    w = table("SSL_write", "entry")
    assert w.column("cap:buf[num]").to_pylist()[0].decode().startswith(_request(server))
    assert w.column("cap:buf[num].truncated").to_pylist() == [False]


def test_prefix_filter_keeps_only_the_matching_calls(server):
    kept = _trace(server, *CAPTURES, "--filter", 'SSL_write: prefix(buf, "GET ")').stdout
    assert [line for line in kept.splitlines() if line.startswith("SSL_write(")] != []
    none = _trace(server, *CAPTURES, "--filter", 'SSL_write: prefix(buf, "POST ")').stdout
    assert [line for line in none.splitlines() if line.startswith("SSL_write")] == []
    assert any(line.startswith("SSL_read -> ") for line in none.splitlines())


@pytest.mark.parametrize("capture, said", [
    ("SSL_write: buf[nm]", "--capture 'SSL_write: buf[nm]': column 16: the length: SSL_write "
                           "has no parameter 'nm' (parameters: ssl, buf, num)"),
    ("SSL_write: buf[ssl]", "--capture 'SSL_write: buf[ssl]': column 16: the length 'ssl' is "
                            "SSL *, not an integer"),
    ("SSL_write: ssl[num]", "--capture 'SSL_write: ssl[num]': column 12: ssl is SSL *: a "
                            "buffer is a void * or a pointer to bytes"),
    ("SSL_write: buf[*num]", "--capture 'SSL_write: buf[*num]': column 16: the length '*num': "
                             "num is int, not a pointer"),
])
def test_bad_lengths_are_one_line_and_exit_2(tools, tmp_path, capture, said):
    proc = _btfgen("trace", "--header", HEADER, "--capture", capture, "--build",
                   str(tmp_path / "t"), "libssl.so.3", "SSL_write", ok=False)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "is /" not in line]  # where found
    assert errors == [f"btfgen trace: {said}"]


@pytest.mark.parametrize("attach", ["multi", "single", "session"])
def test_ssl_read_ex_reads_at_exit_with_the_count_it_stored(server, built, attach):
    """`SSL_read_ex: buf[*readbytes]`: buf and readbytes kept from the entry (the uprobe_multi
    link's and the single uprobes' carry map, the uprobe.session link's saved slot), the bytes
    read at exit, as many as *readbytes then held."""
    if attach == "session":
        from btfgen.abi.arches import host_bpf_syscall

        reason = features.session_links(host_bpf_syscall(), kernel=False).why
        if reason:
            pytest.skip(reason)
    port = server.split(":")[2].split("/")[0]
    proc = _btfgen("trace", "--attach", attach, "--header", HEADER, "--capture",
                   "SSL_read_ex: buf[*readbytes]", "libssl.so.3", "SSL_read_ex", "--",
                   str(built / "tls_read_ex"), port, "hello.txt")
    got, calls = "", 0
    for line in proc.stdout.splitlines():
        r = re.match(r"SSL_read_ex -> (-?\d+) buf\[\*readbytes\]=(.*) \(\d+\.\d{3} us\)$",
                     line)
        if r and r.group(1) == "1":  # success: *readbytes holds the count read
            calls += 1
            got += json.loads(r.group(2))
    assert calls >= 1, proc.stdout
    assert got.startswith("HTTP/1.0 200 ok\r\n") and got.endswith("\r\n\r\n" + BODY)


def test_a_2000_byte_buffer_whole_and_a_longer_one_cut(built):
    out = _btfgen("trace", "--header", str(HERE / "sink.h"), "--value-size", "4093",
                  "--capture-budget", "8192", "--capture", "take: buf[n]",
                  str(built / "sink"), "take", "--", str(built / "sink")).stdout
    calls = [line for line in out.splitlines() if line.startswith("take(")]
    pattern = "".join(chr(ord("a") + i % 26) for i in range(5000))
    assert calls == [
        f'take(buf={calls[0].split("=")[1].split(",")[0]}, n=2000, '
        f'buf[n]="{pattern[:2000]}")',
        f'take(buf={calls[1].split("=")[1].split(",")[0]}, n=5000, '
        f'buf[n]="{pattern[:4093]}"...(5000 bytes))']
    # Without room for it in the default budget, the reason says which limit was short.
    out = _btfgen("trace", "--header", str(HERE / "sink.h"), "--value-size", "4093",
                  "--capture", "take: buf[n]", str(built / "sink"), "take", "--",
                  str(built / "sink")).stdout
    assert [line.split("buf[n]=")[1] for line in out.splitlines() if line.startswith("take(")] \
        == ["<no room left in the record within the capture budget of 1024 bytes>)"] * 2

