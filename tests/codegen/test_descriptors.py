"""Descriptors (runtime's NamedTuples): each checked where it is read back, each telling what it
is when printed; a value the decoder cannot describe or read whole says so instead of showing
something else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from btfgen.btf import types as T
from btfgen.btf.reader import load_btf
from btfgen.decoder import describe, runtime
from btfgen.decoder.runtime import (
    DecodeError,
    Function,
    FunctionDesc,
    IntType,
    Piece,
    Plan,
    RecordPlans,
    Unavailable,
    ValueDesc,
)
from btfgen.layout import ValueLayout
from btfgen.probe import spec_format

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "btf"))
import rawbtf  # noqa: E402

LONG = IntType("int", 8, True)


def _by_ref_function() -> FunctionDesc:
    """f(long *p) whose pointer alone is in the record (data_off -1, pointer at 0)."""
    p = ValueDesc("p", LONG, 8, (Piece(0, 0, 8, 0),), True, None)
    return FunctionDesc("f", 7, "little", 8, (p,), None, None,
                        RecordPlans((Plan(-1, 0, 0),), (), (8, 0)))


def _record(kind: int, data: bytes) -> bytes:
    return runtime.RECORD_HEADERS["little"].pack(7, kind, 0) + data


def test_a_short_read_behind_a_record_pointer_is_an_error_not_a_value():
    fn = Function(_by_ref_function())
    rec = _record(0, (0x1000).to_bytes(8, "little"))
    assert fn.decode_record(rec, lambda addr, n: (-2).to_bytes(8, "little", signed=True)) == (-2,)
    # Two of eight bytes: decoding them as a long would show 0x0101, not what is in memory.
    with pytest.raises(DecodeError, match="read_memory returned 2 of 8 bytes"):
        fn.decode_record(rec, lambda addr, n: b"\x01\x01")


def test_a_record_shorter_than_its_values_is_an_error_not_a_value():
    fn = Function(_by_ref_function())
    with pytest.raises(DecodeError, match="record of 4 data bytes"):
        fn.decode_record(_record(0, bytes(4)))


def _self_nested():
    """struct a { struct a x[2]; }: hostile BTF no walk can measure (test_walk.py)."""
    w = rawbtf.BtfWriter()
    arr = w.array(2, 0, 1)
    a = w.composite("STRUCT", "a", 8, [("x", arr, 0, 0)])
    return load_btf("walk.btf", w.bytes())[a]


def test_a_value_of_a_type_that_cannot_be_described_is_unavailable_saying_why():
    a = _self_nested()
    with pytest.raises(T.TypeWalkError):
        describe.type_desc(a)
    v = ValueLayout("s", a, "struct a", 8, (), by_ref=False)
    d = describe.value_desc(v, "little")
    assert d.unavailable and "deeper than" in d.unavailable
    fn = Function(FunctionDesc("g", 3, "little", 8, (d,), None, None, RecordPlans((None,), ())))
    (got,) = fn.decode_entry(bytes(64))
    assert isinstance(got, Unavailable) and "cannot be decoded" in got.reason


def test_function_and_descriptors_say_what_they_are():
    fn = Function(_by_ref_function())
    assert repr(fn) == "<Function f btf_id=7 1 args, void>"
    assert repr(fn.desc) == "FunctionDesc('f', btf_id=7, 1 args, void)"
    assert repr(fn.args[0]) == "ValueDesc('p', IntType(tag='int', size=8, signed=True), size=8)"


def test_library_function_repr_names_it():
    import toolchains

    import btfgen.decode as bd

    obj = toolchains.compile_c("long __attribute__((noinline)) f(int a, long b) "
                               "{ return a + b; }", "x86_64")
    fn = bd.load(str(obj), arch="x86_64").function("f")
    assert repr(fn) == f"<Function f btf_id={fn.btf_id} 2 args, returns>"


def test_descriptors_are_tuples_and_come_back_from_lists():
    desc = _by_ref_function()
    assert desc == ("f", 7, "little", 8, (("p", ("int", 8, True), 8, ((0, 0, 8, 0),), True,
                                            None),), None, None, (((-1, 0, 0),), (), (8, 0)),
                    ())
    import json

    plain = json.loads(json.dumps(desc))
    back = FunctionDesc.check(plain)
    assert back == desc and back.args[0].type.signed is True and back.record.entry[0].ptr_off == 0
    # A descriptor from before captures (eight fields, an older recording's) still checks.
    assert FunctionDesc.check(plain[:8]) == desc
    # One from before record sizes: the whole record, as its BPF side sent.
    old = FunctionDesc.check(plain[:7] + [plain[7][:2]])
    assert old.record.sizes is None
    assert spec_format.event_size(old, 0) == 56 + spec_format.DATA_SIZE
    assert [spec_format.event_size(back, k) for k in (0, 1)] == [64, 56]


@pytest.mark.parametrize("sizes,message", [
    ([8], "sizes are not"), ([8, 4], "not multiples of 8"), ([8, -8], "exit size"),
])
def test_record_sizes_are_checked(sizes, message):
    import json

    plain = json.loads(json.dumps(_by_ref_function()))
    plain[7][2] = sizes
    with pytest.raises(DecodeError, match=message):
        FunctionDesc.check(plain)


def test_a_record_size_shorter_than_its_values_is_refused():
    """A descriptor whose BPF side would send fewer bytes than its decoder reads."""
    d = _by_ref_function()
    short = d._replace(record=d.record._replace(sizes=(0, 0)))
    with pytest.raises(DecodeError, match="its values need"):
        Function(short)


@pytest.mark.parametrize("damage,message", [
    (lambda d: d[:7], "not 9 fields"),
    (lambda d: d[:4] + ([["p", ["int", 8, 1], 8, [], False, None]],) + d[5:], "signed"),
    (lambda d: d[:4] + ([["p", ["float4", 4], 4, [], False, None]],) + d[5:], "unknown type"),
    (lambda d: d[:4] + ([["p", ["int", 16, True], 8, [], False, None]],) + d[5:],
     "16-byte type in 8 bytes"),
    (lambda d: d[:4] + ([["p", ["int", 8, True], 8, [[0, 0, 8, 4]], False, None]],) + d[5:],
     "bytes \\[4, 12\\) of a 8-byte value"),
    (lambda d: d[:6] + (["<Z", None],) + d[7:], "format '<Z'"),
    (lambda d: d[:6] + (["<qq", None],) + d[7:], "reads 2 values for 1 arguments"),
    (lambda d: d[:7] + ([[[-1, -1, 0]], []],), "neither the value nor its pointer"),
    (lambda d: d[:7] + ([[], []],), "not 1 entry plans"),
    (lambda d: d[:1] + ("7",) + d[2:], "BTF id"),
])
def test_the_check_names_what_is_malformed(damage, message):
    import json

    plain = tuple(json.loads(json.dumps(_by_ref_function())))
    with pytest.raises(DecodeError, match=message):
        FunctionDesc.check(damage(plain))


def test_a_nested_composite_member_must_fit():
    members = [["x", 0, 0, ["int", 8, True]], ["y", 32, 0, ["int", 8, True]]]
    with pytest.raises(DecodeError, match="'y': ends at bit 96 of 8 bytes"):
        runtime.check_type(["struct", 8, members])


def test_a_generated_module_imports_without_btfgen(tmp_path):
    """The runtime and spec_format text a generated module embeds import nothing of btfgen."""
    module = str(ROOT / "generated" / "examples" / "x86_64" / "btfgen_x86_64.py")
    script = ("import sys, importlib.util\n"
              "sys.modules['btfgen'] = None  # any import of btfgen fails\n"
              f"spec = importlib.util.spec_from_file_location('m', {module!r})\n"
              "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
              "f = m.function('scalars'); print(repr(f), len(m.spec('scalars')))\n")
    proc = subprocess.run([sys.executable, "-B", "-c", script], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("<Function scalars btf_id=")

