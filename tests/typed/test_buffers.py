"""Buffers with a length (`PATH[LEN]`) in the capture language, without a kernel: what parses as
one and what stays an index, how the length resolves (a constant, an argument, a path, the
return value or an out-pointer at exit), the one-line errors naming the column, the generic
plan's BUF op and the pointer kept from entry to exit, and a record decoded by the generated
module (the bytes, a cut buffer, a length of zero or less said). Live: tests/trace/
test_buffers_live.py (openssl and curl) and test_capture_bpf.py (the BPF side's reads)."""

from __future__ import annotations

import struct

import pytest

import btfgen
from btfgen.decoder import generic
from btfgen.probe import spec_format
from btfgen.typed import capture as C

HEADER = """
struct hdr { long len; const char *data; unsigned char *raw; };
struct io { char *buf; long *got; };
long put(int fd, const void *buf, unsigned long count, const char *name);
int get(void *buf, int num);
int hput(struct hdr *h, char **argv);
int readio(struct io *io);
int read_ex(void *buf, int num, long *readbytes);
int halves(void *a, void *b, int n);
double odd(void *buf, double n);
"""


@pytest.fixture(scope="module")
def t(tmp_path_factory):
    h = tmp_path_factory.mktemp("b") / "b.h"
    h.write_text(HEADER)
    return btfgen.open(headers=[str(h)], arch="x86_64")


def caps(t, *options, **kw):
    funcs = t.select([o.split(":")[0] for o in options])[0]
    return C.for_functions(funcs, [C.parse(o) for o in options], **kw)


def test_what_is_a_buffer_and_what_an_index(t):
    (c,) = caps(t, "put: buf[count]")["put"]
    assert c.buffer and not c.at_exit and c.length.param == 2 and c.length.size == 8
    assert not c.length.signed and c.size == C.STRING_SIZE and c.text == "buf[count]"
    (k,) = caps(t, "put: buf[16]")["put"]
    assert k.buffer and k.length.const == 16 and k.size == 16
    (big,) = caps(t, "put: buf[4096]", limit=100)["put"]
    assert big.size == 100 and big.length.const == 4096  # cut at the limit, said when decoded
    # A constant after a path that is not a buffer's pointer stays an index.
    (i,) = caps(t, "hput: argv[1]")["hput"]
    assert not i.buffer and i.string and i.text == "argv[1]"
    (n,) = caps(t, "put: name[3]")["put"]  # a char * is a buffer too
    assert n.buffer and n.length.const == 3


def test_lengths_at_exit(t):
    (r,) = caps(t, "get: buf[retval]")["get"]
    assert r.at_exit and r.param == 0 and r.length.param is None and r.length.signed
    (o,) = caps(t, "readio: io->buf[*io->got]")["readio"]
    assert o.at_exit and o.length.via is not None and o.length.via.at_exit
    (p,) = caps(t, "hput: h->raw[h->len]")["hput"]
    assert not p.at_exit and p.length.via.text == "h->len" and p.hops[0].name == "h->raw"


@pytest.mark.parametrize("option, said", [
    ("put: buf[cnt]", "column 10: the length: put has no parameter 'cnt' (parameters: fd, buf, "
                      "count, name)"),
    ("put: buf[name]", "column 10: the length 'name' is const char *, not an integer"),
    ("odd: buf[n]", "column 10: the length 'n' is double, not an integer"),
    ("put: fd[count]", "column 6: fd is int: a buffer is a void * or a pointer to bytes"),
    ("put: buf[0]", "column 10: a length of 0 bytes captures nothing"),
    ("put: buf[]", "column 10: an empty length"),
    ("put: buf[count +]", "column 16: the length 'count +' is not an integer, an argument, "
                          "retval or a path"),
])
def test_bad_lengths_name_the_column(t, option, said):
    with pytest.raises(C.CaptureOptionError) as e:
        C.for_options(t.select([option.split(":")[0]])[0], [option])
    assert str(e.value) == f"--capture {option!r}: {said}"


def _plan(t, option, **kw):
    name = option.split(":")[0]
    f = t.placement(t.select([name])[0]).layout.functions[0]
    return f, generic.plan(f.proto, "little", 8, caps(t, option, **kw)[name])


def test_the_buf_op(t):
    f, p = _plan(t, "put: buf[count]")
    root, buf = p.entry_ops[-2:]
    assert root.source == generic.CAP_ROOT and root.src == p.entry[1].data_off
    assert buf.source == generic.CAP_BUF and buf.src == p.entry[2].data_off
    assert buf.size == C.STRING_SIZE and buf.dst == root.dst + generic.CAPTURE_HEAD_SIZE
    # width log2(8) = 3 above the memory bits; unsigned
    assert buf.space >> generic.BUF_WIDTH_SHIFT & 3 == 3 and not buf.space & generic.BUF_SIGNED
    assert p.sizes[0] == (buf.dst + buf.size + 7) & ~7  # the record is as large as it needs


def test_an_exit_buffer_keeps_its_pointer(t):
    f, p = _plan(t, "get: buf[retval]")
    assert p.carry == p.entry[0].data_off and p.carry_code == 1 + p.carry // 8
    assert p.exit[0].data_off == 8  # the kept pointer is at 0
    root, buf = p.exit_ops[-2:]
    assert root.src == 0 and buf.src == 8 and buf.space & generic.BUF_SIGNED
    assert p.captures[0].root_mask == 1 << generic.CARRY_MISSING_BIT
    assert spec_format.Cookie.of(0, {"btf_id": 5, "carry": p.carry_code, "entry_plan": 1,
                                     "exit_plan": 1}).image == (False, False)


def test_an_exit_needing_two_words_keeps_a_span(t):
    """`read_ex: buf[*readbytes]`: buf and readbytes both kept, as the entry record's words from
    buf's to readbytes' after a word saying they were kept (the exit's data then starts so)."""
    f, p = _plan(t, "read_ex: buf[*readbytes]")
    buf, rb = p.entry[0].data_off, p.entry[2].data_off
    assert p.carry == buf and p.carry_span == (rb - buf) // 8 + 1
    roots = [o for o in p.exit_ops if o.source == generic.CAP_ROOT]
    assert sorted(o.src for o in roots) == [8, 8 + rb - buf]  # after the kept word
    via, cap = p.captures[0].length[3], p.captures[0].head
    assert via >= 8 + 8 * p.carry_span and cap > via  # *readbytes read first, then the bytes
    assert p.sizes[1] >= 8 + 8 * p.carry_span and not p.skipped
    # Two buffers at exit: the same way.
    f, p = _plan(t, "halves: a[retval], b[retval]")
    assert p.carry_span == 2 and all(c is not None for c in p.captures)


def test_a_span_too_wide_is_said(tmp_path):
    (tmp_path / "w.h").write_text("struct s { long w[8]; };\n"
                                  "int far(void *buf, struct s x, long *got);\n")
    t = btfgen.open(headers=[str(tmp_path / "w.h")], arch="x86_64")
    (f,) = t.select(["far"])[0]
    got = C.for_functions([f], [C.parse("far: buf[*got]")])["far"]
    p = generic.plan(t.placement([f]).layout.functions[0].proto, "little", 8, got)
    assert p.captures == (None,) and p.carry < 0 and not p.carry_span
    assert p.skipped == ("capture buf[*got]: buf is not kept from entry to exit: what the exit "
                         "needs of its entry is more than 7 words of the record apart",)


def test_a_returned_struct_s_pointer_and_an_exit_buffer_both_kept(tmp_path):
    """arm64 returns a struct through x8, which only the entry sees: its pointer and the
    buffer's argument are a span (the value and the capture both decoded, no reason)."""
    (tmp_path / "w.h").write_text("struct big { long a, b, c, d; };\n"
                                  "struct big fill(void *buf, int num, long *got);\n")
    t = btfgen.open(headers=[str(tmp_path / "w.h")], arch="arm64")
    (f,) = t.select(["fill"])[0]
    got = C.for_functions([f], [C.parse("fill: buf[*got]")])["fill"]
    p = generic.plan(t.placement([f]).layout.functions[0].proto, "little", 8, got)
    assert p.carry_span >= 2 and not p.skipped and p.captures[0] is not None
    (ret,) = p.exit
    assert ret.data_off > 0 and 8 <= ret.ptr_off < 8 + 8 * p.carry_span
    assert ret.op_mask & 1 << generic.CARRY_MISSING_BIT


def _record(kind: int, data: bytes) -> bytes:
    return struct.pack("<IIQ", 1, kind, 0) + data


def _head(status: int, n: int) -> bytes:
    return struct.pack("<BBBBHHQ", status, 0, 1, 0, n, 0, 0x1000)


def test_decoded(t):
    files = t.generate(["get", "put"], ("python",), captures=["get: buf[retval]",
                                                              "put: buf[count]"],
                       string_size=8)
    ns: dict = {}
    exec(files["btfgen_x86_64.py"], ns)
    get = ns["function"]("get")
    (c,) = get.captures
    assert c.kind == "buf" and c.length[3] == "retval"

    def exit_record(ret: int, status: int, n: int, data: bytes) -> bytes:
        out = bytearray(c.head + 16 + 8)
        out[0:8] = (0x1000).to_bytes(8, "little")
        out[c.length[0]:c.length[0] + 4] = ret.to_bytes(4, "little", signed=True)
        out[c.head:c.head + 16] = _head(status, n)
        out[c.head + 16:c.head + 16 + len(data)] = data
        return _record(1, bytes(out))

    got = get.decode_captures(exit_record(5, 1, 5, b"hello"))["buf[retval]"]
    assert bytes(got) == b"hello" and got.length == 5 and not got.truncated
    assert got.space == "user"
    cut = get.decode_captures(exit_record(300, 1, 8, b"abcdefgh"))["buf[retval]"]
    assert bytes(cut) == b"abcdefgh" and cut.length == 300 and cut.truncated
    none = get.decode_captures(exit_record(-11, 4, 0, b""))["buf[retval]"]
    assert none.reason == "nothing to read: retval=-11"
    gone = bytearray(exit_record(5, 1, 5, b"hello"))
    gone[8:16] = (1 << 63).to_bytes(8, "little")  # failed: the carried pointer was not kept
    assert get.decode_captures(bytes(gone))["buf[retval]"].reason == (
        "buf was NULL at entry, or its entry was not seen")


def test_shown():
    from btfgen.decoder.runtime import CapturedBytes
    from btfgen.probe import output

    text = CapturedBytes(b"GET /\r\n", 7, "user")
    binary = CapturedBytes(b"\x00\x01z", 10, "user")
    assert output.show_captured(text) == '"GET /\\r\\n"'
    assert output.show_captured(binary) == "hex:00017a...(10 bytes)"
    assert output.show_captured(text, "hex") == "hex:474554202f0d0a"
    assert output.show_captured(binary, "text") == '"\\u0000\\u0001z"...(10 bytes)'
    assert output.typed(binary) == {"hex": "00017a", "length": 10, "truncated": True}
    assert output.typed(text) == {"hex": "474554202f0d0a", "length": 7}


ORDER = """
struct inner { const char *label; };
struct node { long id; struct inner in; };
int f(const char *name, struct node *node);
"""


def test_what_the_user_names_comes_first(tmp_path):
    """Issue 36's case: a default string (the `char *` argument) and a named string filled the
    record before a named `long`, which was left out with room left. Named first, the value
    fits; the default string, last, fits too."""
    (tmp_path / "n.h").write_text(ORDER)
    t = btfgen.open(headers=[str(tmp_path / "n.h")], arch="x86_64")
    (f,) = t.select(["f"])[0]
    got = C.for_functions([f], [C.parse("f: node->in.label, node->id")], strings=True)["f"]
    assert [c.text for c in got] == ["node->in.label", "node->id", "name"]
    p = generic.plan(t.placement([f]).layout.functions[0].proto, "little", 8, got)
    assert all(cp is not None and cp.size == -1 for cp in p.captures)


WRITE = """
struct qstr { const char *name; };
struct dentry { struct qstr d_name; };
struct path { struct dentry *dentry; };
struct file { struct path f_path; };
long vfs_write(struct file *file, const char *buf, unsigned long count, long long *pos);
"""


def test_default_strings_shrink_to_the_room_the_named_leave(tmp_path):
    """A named string and a named buffer of 2,040 bytes each leave no head below the 4,096 bytes
    an operation reaches for the default string after them: it goes before them instead, shrunk
    to the room they can give up. At 256 bytes each (the guests' vfs_write,
    tests/live_kernel/test_typed_live), all three fit whole in the default budget."""
    (tmp_path / "w.h").write_text(WRITE)
    t = btfgen.open(headers=[str(tmp_path / "w.h")], arch="x86_64")
    (f,) = t.select(["vfs_write"])[0]
    option = [C.parse("vfs_write: file->f_path.dentry->d_name.name, buf[count]")]
    proto = t.placement([f]).layout.functions[0].proto
    small = C.for_functions([f], option, strings=True)["vfs_write"]
    assert all(c.size == -1 for c in generic.plan(proto, "little", 8, small).captures)
    got = C.for_functions([f], option, strings=True, limit=2040,
                          budget=C.MAX_BUDGET)["vfs_write"]
    assert [c.text for c in got] == ["file->f_path.dentry->d_name.name", "buf[count]", "buf"]
    p = generic.plan(proto, "little", 8, got)
    name, buf, default = p.captures
    assert name.size == -1 and buf.size == -1  # whole, as asked
    assert default.head < name.head and 16 <= default.size < 2040
    assert all(o.dst < generic.OP_LIMIT for o in p.entry_ops)
    assert max(o.dst + o.size for o in p.entry_ops) <= generic.DATA_SIZE
