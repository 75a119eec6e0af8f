"""The BTF format of 2026: the 32-byte header and its layout section, vlen in 24 bits, the kind
in 7, and kinds btfgen does not know stepped over by the layout (one warning; what refers to
them unavailable, never a guess). Every blob is built here with rawbtf, both byte orders where
the byte order matters."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import rawbtf

import btfgen
from btfgen.abi.arches import load_arch
from btfgen.btf import types as T
from btfgen.btf.dump import dump_raw
from btfgen.btf.reader import load_btf
from btfgen.decoder import describe
from btfgen.errors import BtfError, BtfgenWarning

REPO = Path(__file__).resolve().parents[2]
NEW_KIND = 40  # past 31: the old 5-bit mask read it as 8 (TYPEDEF)
ORDERS = ("little", "big")


def load(data: bytes, base=None):
    """The table, and the warnings opening it gave."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        btf = load_btf("x.btf", data, base)
    return btf, [str(w.message) for w in said if issubclass(w.category, BtfgenWarning)]


def error_of(data: bytes) -> str:
    with pytest.raises(BtfError) as info:
        load(data)
    message = str(info.value)
    assert "\n" not in message and message.startswith("x.btf: ")
    return message


def cli_dump(path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "btfgen", "dump", str(path)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def with_new_kind(order: str = "little") -> tuple[rawbtf.BtfWriter, dict[str, int]]:
    """Known types around two records of NEW_KIND (4 fixed bytes, 8 per item) and a function
    whose parameters are one of them, a pointer to one, a struct holding one, and an int."""
    w = rawbtf.BtfWriter(order)
    ids = {"int": w.int_("int", 4, 1)}
    ids["long"] = w.int_("long", 8, 1)
    # vlen 3: 12 + 4 + 3 * 8 = 40 bytes, every word of it unlike a record header.
    ids["new"] = w.add(NEW_KIND, "newthing", 3, ids["int"],
                       w.u32(0xDEADBEEF, *range(0x7F000001, 0x7F000007)))
    ids["new2"] = w.add(NEW_KIND, "", 0, 0, w.u32(0xFFFFFFFF), kflag=True)
    ids["ptr"] = w.ref("PTR", ids["new"])
    ids["holder"] = w.composite("STRUCT", "holder", 8, [("n", ids["new"], 0, 0)])
    ids["td"] = w.ref("TYPEDEF", ids["new"], "new_t")
    proto = w.func_proto(ids["int"], [("a", ids["td"]), ("p", ids["ptr"]),
                                      ("h", ids["holder"]), ("x", ids["long"])])
    ids["f"] = w.func("f", proto)
    ids["ret_proto"] = w.func_proto(ids["new"], [("x", ids["long"])])
    ids["g"] = w.func("g", ids["ret_proto"])
    ids["last"] = w.int_("unsigned int", 4, 0)
    return w, ids


def new_layout() -> list[tuple[int, int]]:
    return rawbtf.layout_with({NEW_KIND: (4, 8)})


# -- the header and the layout section ----------------------------------------------------------

@pytest.mark.parametrize("order", ORDERS)
def test_a_layout_section_changes_nothing_for_known_kinds(order):
    old = rawbtf.every_kind(order, odd=False)
    # The same records, written again with the 32-byte header and a layout section.
    new = _rewrite(old, order, rawbtf.KNOWN_LAYOUT)
    assert len(new) == len(old) + 8 + 4 * len(rawbtf.KNOWN_LAYOUT)
    a, said_a = load(old)
    b, said_b = load(new)
    assert not said_a and not said_b
    assert b.layout == tuple(rawbtf.KNOWN_LAYOUT) and a.layout is None
    assert dump_raw(a) == dump_raw(b)
    assert [repr(t) for t in a] == [repr(t) for t in b]


def _rewrite(blob: bytes, order: str, layout, **fields) -> bytes:
    """`blob` (24-byte header) again with a 32-byte header and `layout` after its types."""
    p = "<" if order == "little" else ">"
    _, _, _, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(
        f"{p}HBBIIIII", blob)
    types = blob[hdr_len + type_off:hdr_len + type_off + type_len]
    strings = blob[hdr_len + str_off:hdr_len + str_off + str_len]
    w = rawbtf.BtfWriter(order)
    w.records = [types]
    w.strings = bytearray(strings)
    return w.bytes(layout, **fields)


def test_a_header_of_24_or_28_bytes_has_no_layout_section():
    w, _ = with_new_kind()
    for hdr_len in (24, 28):
        # The layout fields a 32-byte header would hold are not there: no layout, so the
        # unknown kind is the error it always was.
        message = error_of(w.bytes(new_layout(), hdr_len=hdr_len))
        assert "unknown kind 40 (no layout section says how long its records are)" in message
    # A 32-byte header whose layout section is empty: the same.
    assert "no layout section" in error_of(w.bytes(new_layout(), layout_len=0))
    # A longer header than 32 bytes (a later format): its layout fields still count.
    btf, said = load(w.bytes(new_layout(), hdr_len=40))
    assert len(said) == 1


@pytest.mark.parametrize("order", ORDERS)
def test_a_struct_of_more_than_65535_members(order):
    w = rawbtf.BtfWriter(order)
    i8 = w.int_("char", 1, 1)
    n = 70_001  # 0x11171: read as 0x1171 = 4465 members by a 16-bit vlen mask
    big = w.composite("STRUCT", "huge", n, [("m", i8, 8 * k, 0) for k in range(n)])
    after = w.int_("after", 4, 1)
    for blob in (w.bytes(), w.bytes(rawbtf.KNOWN_LAYOUT)):
        btf, said = load(blob)
        assert not said
        s = btf[big]
        assert isinstance(s, T.Struct) and len(s.members) == n
        assert s.members[-1].bit_offset == 8 * (n - 1)
        assert btf[after].name == "after" and len(btf) == after + 1
        text = dump_raw(btf)
        assert f"[{big}] STRUCT 'huge' size={n} vlen={n}\n" in text
        assert text.count("\n\t'm' type_id=") == n


@pytest.mark.parametrize("order", ORDERS)
def test_a_kind_above_31_is_stepped_over_by_its_layout(order):
    w, ids = with_new_kind(order)
    btf, said = load(w.bytes(new_layout()))
    assert said == [f"x.btf: BTF kind {NEW_KIND} (2 types) unknown to btfgen: stepped over by "
                    f"the layout section; what refers to them is unavailable"]
    assert btf.unknown_kinds == {NEW_KIND: 2}
    assert len(btf) == ids["last"] + 1 and btf[ids["last"]].name == "unsigned int"
    t = btf[ids["new"]]
    assert isinstance(t, T.Unknown) and t.code == NEW_KIND and t.name == "newthing"
    assert isinstance(btf[ids["td"]], T.Typedef)  # the mask no longer folds 40 into 8
    r = btf.record(ids["new"])
    assert (r.kind, r.vlen, r.tail) == (NEW_KIND, 3, None)
    assert btf.find_types("newthing") == [t]


def test_the_dump_prints_one_line_for_an_unknown_kind(tmp_path):
    w, ids = with_new_kind()
    btf, _ = load(w.bytes(new_layout()))
    lines = dump_raw(btf).splitlines()
    assert f"[{ids['new']}] KIND_40 'newthing' size_or_type=1 vlen=3 (a kind btfgen does " \
           f"not know)" in lines
    assert f"[{ids['new2']}] KIND_40 '(anon)' size_or_type=0 vlen=0 kind_flag=1 (a kind btfgen " \
           f"does not know)" in lines
    # Every known type as without the unknown ones: each id's block is whole.
    assert f"[{ids['ptr']}] PTR '(anon)' type_id={ids['new']}" in lines
    assert f"[{ids['last']}] INT 'unsigned int' size=4 bits_offset=0 nr_bits=32 " \
           f"encoding=(none)" in lines
    path = tmp_path / "new.btf"
    path.write_bytes(w.bytes(new_layout()))
    proc = cli_dump(path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == lines
    assert proc.stderr == (f"btfgen: warning: {path}: BTF kind 40 (2 types) unknown to "
                           f"btfgen: stepped over by the layout section; what refers to them "
                           f"is unavailable\n")


def test_one_warning_names_every_unknown_kind():
    w = rawbtf.BtfWriter()
    w.int_("int", 4, 1)
    w.add(25, "a", 0, 0)
    w.add(NEW_KIND, "b", 2, 0, w.u32(1, 2, 3, 4, 5))
    w.add(25, "c", 0, 0)
    w.add(0, "", 0, 0)  # kind 0 (UNKN) is no record of the format either: the layout says 12
    _, said = load(w.bytes(rawbtf.layout_with({25: (0, 0), NEW_KIND: (4, 8)})))
    assert len(said) == 1
    assert "BTF kind 0 (1 type), kind 25 (2 types), kind 40 (1 type) unknown" in said[0]


def test_an_unknown_kind_without_a_layout_is_still_an_error():
    w, _ = with_new_kind()
    message = error_of(w.bytes())
    assert "type 3: unknown kind 40 (no layout section" in message and ".BTF+0x3c" in message
    # A layout section that stops before the kind: the same error, saying so.
    message = error_of(w.bytes(rawbtf.KNOWN_LAYOUT))
    assert "type 3: unknown kind 40 (the layout section has no entry for it)" in message


def test_split_btf_steps_over_with_its_bases_layout():
    base = rawbtf.BtfWriter()
    base.int_("int", 4, 1)
    base_btf, said = load(base.bytes(new_layout()))
    assert not said
    split = rawbtf.BtfWriter(base_str_len=len(base.strings), first_id=2)
    new = split.add(NEW_KIND, "split_new", 1, 1, split.u32(7, 8, 9))
    last = split.ref("PTR", new)
    btf, said = load(split.bytes(), base_btf)  # no layout section of its own
    assert len(said) == 1 and btf.unknown_kinds == {NEW_KIND: 1}
    assert isinstance(btf[new], T.Unknown) and btf[last].type_id == new
    # Without a layout in either, the same split blob is an error.
    plain = load(base.bytes())[0]
    with pytest.raises(BtfError, match="unknown kind 40"):
        load_btf("x.btf", split.bytes(), plain)


# -- damaged layout sections: one line each -----------------------------------------------------

def _types_len(w: rawbtf.BtfWriter) -> int:
    return sum(map(len, w.records))


DAMAGED = {
    "misaligned": (lambda w: {"layout_off": _types_len(w) + 2},
                   "layout section offset {off} is not 4-byte aligned"),
    "odd length": (lambda w: {"layout_len": 4 * len(new_layout()) - 2},
                   "layout section length {len} is not a whole number of 4-byte entries"),
    "overlapping the types": (lambda w: {"layout_off": _types_len(w) - 4},
                              "starts before the end of the type section"),
    "running into the strings": (lambda w: {"layout_len": 4 * len(new_layout()) + 4},
                                 "runs into the string section"),
    "past the end": (lambda w: {"layout_off": 0x10000},
                     "runs past the end"),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_layout_section_is_one_line(case, tmp_path):
    w, _ = with_new_kind()
    make, expected = DAMAGED[case]
    fields = make(w)
    blob = w.bytes(new_layout(), **fields)
    message = error_of(blob)
    assert expected.format(off=fields.get("layout_off"), len=fields.get("layout_len")) in message
    assert ".BTF+0x18: " in message or ".BTF+0x1c: " in message  # the header field at fault
    path = tmp_path / "bad.btf"
    path.write_bytes(blob)
    proc = cli_dump(path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"btfgen: error: {path}: ")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("entry, field, where", [
    ((6, 8), "info_sz 6", 0), ((4, 10), "elem_sz 10", 1), ((1, 0), "info_sz 1", 0)])
def test_a_layout_entry_of_odd_size_is_one_line(entry, field, where):
    w, _ = with_new_kind()
    message = error_of(w.bytes(rawbtf.layout_with({NEW_KIND: entry})))
    at = 32 + _types_len(w) + 4 * NEW_KIND + where
    assert f".BTF+{at:#x}: layout entry for kind 40: {field} is not a multiple of 4" in message


def test_a_layout_that_disagrees_with_a_known_kind_is_refused():
    """STRUCT said to have 16-byte members: stepping by one size and reading by another would
    misread every record after it."""
    w, _ = with_new_kind()
    layout = new_layout()
    layout[4] = (0, 16)
    message = error_of(w.bytes(layout))
    assert (f".BTF+{32 + _types_len(w) + 16:#x}: layout entry for kind 4 (STRUCT): info_sz 0, "
            f"elem_sz 16, where the format has 0, 12") in message


# -- what refers to an unknown kind is unavailable ----------------------------------------------

def test_an_argument_of_an_unknown_kind_is_unavailable_with_the_reason():
    w, ids = with_new_kind()
    btf, _ = load(w.bytes(new_layout()))
    target = btfgen.Target(btf, load_arch("x86_64"))
    layout = target.place([btf[ids["f"]], btf[ids["g"]]])
    f, g = layout.functions
    a, p, h, x = f.args
    reason = f"BTF kind {NEW_KIND} unknown to btfgen (type {ids['new']})"
    assert a.unavailable == reason and not a.pieces  # through its typedef
    assert h.unavailable == reason and not h.pieces  # a struct holding one: no size to trust
    assert p.unavailable is None and p.pieces  # a pointer to one is a pointer
    assert x.unavailable is None and x.pieces
    assert g.ret.unavailable == reason
    # The decoders' descriptors say so too, and keep the others.
    descs = [describe.value_desc(v, "little") for v in f.args]
    assert [d.unavailable for d in descs] == [reason, None, reason, None]
    # Decoded from a call's registers (pt_regs: di at 14 words, si at 13): never a guess.
    ctx = bytearray(8 * 21)
    ctx[14 * 8:15 * 8] = (0x1234).to_bytes(8, "little")
    ctx[13 * 8:14 * 8] = (7).to_bytes(8, "little")
    values = target.function("f").entry(bytes(ctx), b"")
    assert [getattr(v, "reason", v) for v in values] == [reason, 0x1234, reason, 7]
    # Every output generates; the C declarations spell no type of the unknown kind.
    files = target.generate([btf[ids["f"]], btf[ids["g"]]], ("bpf", "python"))
    assert "newthing" not in files["btfgen.bpf.h"]
    compile(files["btfgen_x86_64.py"], "btfgen_x86_64.py", "exec")
    assert reason in files["btfgen_x86_64.py"]



def test_the_bpf_header_of_such_a_function_compiles(tmp_path):
    if not shutil.which("clang-19"):
        pytest.skip("clang-19 is not installed")
    w, ids = with_new_kind()
    btf, _ = load(w.bytes(new_layout()))
    target = btfgen.Target(btf, load_arch("x86_64"))
    files = target.generate([btf[ids["f"]], btf[ids["g"]]], ("bpf",), self_contained=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    src = tmp_path / "t.bpf.c"
    src.write_text('#include "btfgen.bpf.h"\n#include "btfgen_specs.h"\n'
                   'char LICENSE[] SEC("license") = "GPL";\n'
                   'SEC("kprobe") int run(void *ctx) { struct btfgen_args_f a; '
                   'return btfgen_entry_f(ctx, &a); }\n')
    proc = subprocess.run(["clang-19", "-target", "bpfel", "-O2", "-g", "-Wall", "-Werror",
                           "-D__TARGET_ARCH_x86", "-c", str(src), "-o", str(tmp_path / "t.o")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("option, kind", [
    ("f:*p", "capture"), ("f:p->x", "capture"), ("f:p[0]", "capture"),
    ("f: p->x == 1", "filter"), ("f: h.n == 1", "filter")])
def test_a_capture_or_filter_through_an_unknown_kind_is_refused_with_the_reason(option, kind):
    """Not a TypeWalkError's traceback: the one-line error every bad option gets."""
    from btfgen.errors import BtfgenError

    w, ids = with_new_kind()
    btf, _ = load(w.bytes(new_layout()))
    target = btfgen.Target(btf, load_arch("x86_64"))
    given = {"captures": [option]} if kind == "capture" else {"filters": [option]}
    with pytest.raises(BtfgenError, match=f"BTF kind {NEW_KIND} unknown to btfgen"):
        target.generate([btf[ids["f"]]], ("bpf", "python"), **given)


VMLINUX = Path("/sys/kernel/btf/vmlinux")


@pytest.mark.skipif(not VMLINUX.exists(), reason="no kernel BTF here")
def test_the_running_kernels_btf_reads_the_same_with_a_layout_section():
    """A whole vmlinux, as it is and rewritten in the 2026 format with the layout section an
    encoder writes: the same dump, line for line (the dump is checked against bpftool
    elsewhere), and no warning."""
    data = VMLINUX.read_bytes()
    order = "little" if struct.unpack_from("<H", data)[0] == 0xEB9F else "big"
    old, said_old = load(data)
    new, said_new = load(_rewrite(data, order, rawbtf.KNOWN_LAYOUT))
    assert not said_old and not said_new and new.layout is not None
    assert dump_raw(old) == dump_raw(new)
