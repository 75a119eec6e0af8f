"""The generated header's captures, live: `btfgen --capture ... --capture-strings --filter ...`
on a user program's BTF (pahole), a BPF program that decodes the arguments with
btfgen_entry_F, keeps a call only when btfgen_filter_F says so, and fills struct
btfgen_captures_F with btfgen_capture_F (and struct btfgen_exit_captures_F at return), loaded
as uprobes on this host; the strings, nested fields, bit-fields, NULLs and truncation must be
what the program passed. Two builds: BTFGEN_USER (user memory only) and the kernel one, which
with a BTF without __user tags tries kernel memory first, then user memory (and says so).
Needs an x86_64 host with gcc, clang-19, pahole, root and BPF; else skipped."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "live_uprobe"))

CAPTURES = ["open_file: *how, how->label, how->next->name, how->in.x, how->mid, how->lo, how->c",
            "follow: $retval->name, $retval->label"]
# A NULL read makes the whole predicate false: dfd 5 (filename NULL) is tested first.
FILTER = 'open_file: dfd == 5 || prefix(filename, "/etc/")'

PROGRAM = r"""
#include <linux/bpf.h>
%(user)s
#include "btfgen_filter.h"

struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 16); } events SEC(".maps");

struct rec_open { __u32 kind; __s32 missed; struct btfgen_args_open_file a;
		  struct btfgen_captures_open_file c; };
struct rec_follow { __u32 kind; __s32 missed; struct btfgen_ret_follow r;
		    struct btfgen_exit_captures_follow c; };
/* clang writes BTF only for types that globals or signatures use: the test reads the layouts
 * of these from the object's BTF. */
struct rec_open keep_open;
struct rec_follow keep_follow;

SEC("uprobe") int on_open(void *ctx)
{
	struct btfgen_args_open_file a;
	struct rec_open *r;

	if (btfgen_entry_open_file(ctx, &a) || !btfgen_filter_open_file(&a))
		return 0;
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r)
		return 0;
	r->kind = 0;
	r->a = a;
	r->missed = btfgen_capture_open_file(&r->a, &r->c);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("uretprobe") int on_follow(void *ctx)
{
	struct rec_follow *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);

	if (!r)
		return 0;
	r->kind = 1;
	r->missed = btfgen_exit_follow(ctx, 0, &r->r);
	r->missed += btfgen_capture_exit_follow(&r->r, &r->c);
	bpf_ringbuf_submit(r, 0);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""

OK, NULL = 1, 2
KERNEL, USER = 0, 1
STATUS = struct.Struct("<BBBBH")  # struct btfgen_capture_status


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    import live_harness as harness

    harness.require_live()
    work = tmp_path_factory.mktemp("capture_header")
    exe = work / "target"
    harness.run(["gcc", "-O2", "-g", str(HERE / "capture" / "header_target.c"), "-o", str(exe)],
                "compiling the target")
    with_btf = work / "target.btf.elf"
    with_btf.write_bytes(exe.read_bytes())
    harness.run([*harness.PAHOLE, str(with_btf)], "pahole -J")
    out = work / "gen"
    args = [sys.executable, "-m", "btfgen", str(with_btf), "--arch", "x86_64", "--lang", "bpf",
            "--self-contained", "--no-specs", "-q", "-o", str(out), "--func", "open_file",
            "--func", "follow", "--capture-strings", "--string-size", "16", "--filter", FILTER]
    for c in CAPTURES:
        args += ["--capture", c]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return work, exe, out


def _records(work: Path, exe: Path, gen: Path, user: bool):
    import live_harness as harness

    from btfgen.abi.arches import host_bpf_syscall
    from btfgen.btf.reader import open_btf
    from btfgen.probe import bpf_object

    name = "user" if user else "kernel"
    src = work / f"{name}.bpf.c"
    src.write_text(PROGRAM % {"user": "#define BTFGEN_USER" if user else ""})
    obj_path = harness.compile_bpf(src, work / f"{name}.bpf.o", include_dirs=[gen])
    with bpf_object.BpfObject(str(obj_path), bpf_syscall=host_bpf_syscall()) as obj:
        obj.load()
        obj.attach_uprobe("on_open", str(exe), "open_file")
        obj.attach_uprobe("on_follow", str(exe), "follow", retprobe=True)
        records = harness.run_traced(obj, exe)
    return records, open_btf(str(obj_path))


class _Rec:
    """One record read through the layouts clang gave the BPF object's structs."""

    def __init__(self, data: bytes, btf, holder: str):
        self.data, self.btf = data, btf
        [s] = btf.find_types(holder, "struct")
        self.members = {m.name: m for m in s.members}
        self.kind, self.missed = struct.unpack_from("<Ii", data)
        caps = self.members["c"]
        [cs] = btf.find_types(caps.type.name, "struct")
        self.base = caps.offset
        self.caps = {m.name: m for m in cs.members}

    def status(self, field: str) -> tuple[int, int, int, int, int]:
        return STATUS.unpack_from(self.data, self.base + self.caps[f"{field}_status"].offset)

    def at(self, field: str) -> int:
        return self.base + self.caps[field].offset

    def text(self, field: str) -> bytes:
        raw = self.data[self.at(field):self.at(field) + 18]
        return raw.split(b"\0", 1)[0]

    def number(self, field: str, fmt: str) -> int:
        return struct.unpack_from(fmt, self.data, self.at(field))[0]


def _decode(built, struct_name: str, data: bytes, offset: int):
    from btfgen.btf.reader import open_btf
    from btfgen.decoder import describe, runtime

    work = built[0]
    [t] = open_btf(str(work / "target.btf.elf")).find_types(struct_name, "struct")
    return runtime.convert(describe.type_desc(t), data, offset, "little")


@pytest.mark.parametrize("user", [True, False], ids=["BTFGEN_USER", "kernel-then-user"])
def test_captures_in_the_generated_header(built, user):
    work, exe, gen = built
    records, btf = _records(work, exe, gen, user)
    opens = [_Rec(r, btf, "rec_open") for r in records if r[:4] == b"\0\0\0\0"]
    follows = [_Rec(r, btf, "rec_follow") for r in records if r[:4] == b"\1\0\0\0"]
    # The filter kept dfd -100 (/etc/...), 4 (/etc/..., long) and 5 (NULL): not 3 (/tmp/...).
    dfd = [struct.unpack_from("<i", r.data, r.members["a"].offset)[0] for r in opens]
    assert dfd == [-100, 4, 5]
    head, tail, none = opens

    # Strings: the argument (captured by default) and a member behind two pointers.
    assert head.text("filename") == b"/etc/hostname"
    assert head.status("filename") == (OK, 0, USER, 0, len(b"/etc/hostname") + 1)
    assert head.text("how__next__name") == b"tail"
    assert head.status("how__next__name")[:3] == (OK, 1, USER)  # one pointer loaded
    assert head.text("how__label") == b"a label"
    # A nested field, bit-fields (one signed) and an enum, each in its own C type.
    assert head.number("how__in_x", "<h") == -42
    assert head.number("how__mid", "<i") == -200
    assert head.number("how__lo", "<I") == 6
    assert head.number("how__c", "<I") == 7  # BLUE
    # The whole pointee, in the struct's own layout: decoded with the target's BTF.
    whole = _decode(built, "how", head.data, head.at("how_pointee"))
    assert {k: whole[k] for k in ("lo", "mid", "c", "in", "name")} == {
        "lo": 6, "mid": -200, "c": 7, "in": {"x": -42, "tag": b"inner\0\0\0"},
        "name": b"headname\0\0\0\0"}
    assert whole["label"] and whole["next"]
    assert head.missed == 0

    # Truncated at --string-size 16, still NUL-terminated; NULL pointers said as such.
    assert tail.text("filename") == b"/etc/a/path/long"
    assert tail.status("filename")[0] == OK and tail.status("filename")[3] == 1  # truncated
    assert tail.status("how__label")[:2] == (NULL, 1)  # how->label is NULL
    assert tail.status("how__next__name")[:2] == (NULL, 1)  # how->next is NULL
    assert tail.text("how__next__name") == b""
    assert tail.missed == 2
    assert none.status("filename")[:2] == (NULL, 0) and none.status("how_pointee")[:2] == (NULL, 0)
    assert none.number("how__mid", "<i") == 0 and none.missed == len(CAPTURES[0].split(",")) + 1

    # At exit, through the returned pointer.
    assert [r.text("retval__name") for r in follows] == [b"tail", b""]
    assert follows[0].status("retval__name") == (OK, 0, USER, 0, 12)  # char name[12]: a value
    assert follows[0].status("retval__label")[:2] == (NULL, 1)
    assert follows[1].status("retval__name")[:2] == (NULL, 0)
