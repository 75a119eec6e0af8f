"""An errno is named only where it is known (issue 48, item 2). A kernel function's negative
return is an errno by the kernel's convention, named (-1 EPERM, -2 ENOENT); a user function's is
not: the C library returns -1 and puts the error in errno, so naming -1 EPERM would be a wrong
value said as a right one. Live, through the tracer, the same: tests/trace/test_errno_live.py."""

from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recordings"))
import synth  # noqa: E402

from btfgen.decoder.runtime import Function  # noqa: E402
from btfgen.probe import output  # noqa: E402
from btfgen.recordings import replay  # noqa: E402

MOD = synth.module("x86_64")
DESCS = synth.descriptors(MOD)
# `int with_enum(...)`: a 4-byte signed return, at the exit record's data offset 0.
WITH_ENUM = next(d for d in DESCS if d.name == "with_enum")


def _call(ret: int, tid: int = 100) -> list[bytes]:
    """An entry of with_enum (its argument bytes random) and its exit returning `ret`."""
    rng = random.Random(ret)
    entry = synth.event(WITH_ENUM, 0, rng, 1000, tid)
    exit_ = bytearray(synth.event(WITH_ENUM, 1, rng, 5000, tid))
    plan = WITH_ENUM.record.exit[0]
    at = output.DATA + plan[0]
    exit_[at:at + 4] = ret.to_bytes(4, "little", signed=True)
    return [entry, bytes(exit_)]


def _printed(evs, **kw) -> list[str]:
    out = io.StringIO()
    p = output.Printer([Function(d) for d in DESCS], MOD.BYTE_ORDER, out, flush=False, **kw)
    for e in evs:
        p.event(e)
    return out.getvalue().splitlines()


def _decoded(tmp_path, evs, kind: str, **kw) -> list[str]:
    path = tmp_path / f"{kind}.btfrec"
    synth.write(path, MOD, evs, head={**synth.header(MOD), "kind": kind})
    out = io.StringIO()
    replay.print_recording(str(path), out, **kw)
    return out.getvalue().splitlines()


NEGATIVE = frozenset({"negative"})  # --errors=negative: -2 and -13 are errors too


@pytest.mark.parametrize("ret", [-1, -2, -13])
def test_a_user_functions_return_is_never_named_as_an_errno(tmp_path, ret):
    evs = _call(ret)
    kw = {"errors": True, "errors_are": NEGATIVE}
    for lines in (_printed(evs, **kw), _printed(evs, kernel=False, **kw),
                  _decoded(tmp_path, evs, "user", **kw)):
        assert len(lines) == 1 and lines[0].startswith("with_enum(")
        assert lines[0].endswith(f" -> {ret} (4.000 us)"), lines[0]
    if ret == -1:  # the default, -1 and NULL, prints it
        assert _printed(evs, errors=True) == _printed(evs, **kw)
    else:  # not an error by default: the C library's are -1 and NULL
        assert _printed(evs, errors=True) == []
    for lines in (_printed(evs, as_json=True, **kw),
                  _decoded(tmp_path, evs, "user", as_json=True, **kw)):
        (event,) = [json.loads(line) for line in lines]
        assert event["return"] == ret and not any("errno" in k for k in event)


@pytest.mark.parametrize("ret, name", [(-1, "EPERM"), (-2, "ENOENT"), (-13, "EACCES")])
def test_a_kernel_functions_negative_return_is_its_errno(tmp_path, ret, name):
    evs = _call(ret)
    for lines in (_printed(evs, errors=True, kernel=True),
                  _decoded(tmp_path, evs, "kernel", errors=True)):
        assert len(lines) == 1 and lines[0].endswith(f" -> {ret} {name} (4.000 us)"), lines


def test_a_recording_that_does_not_say_its_kind_names_nothing(tmp_path):
    evs = _call(-1)
    head = synth.header(MOD)
    del head["kind"]
    path = tmp_path / "old.btfrec"
    synth.write(path, MOD, evs, head=head)
    out = io.StringIO()
    replay.print_recording(str(path), out, errors=True)
    assert out.getvalue().rstrip("\n").endswith(" -> -1 (4.000 us)")


def _flagged(evs: list[bytes], err: int) -> list[bytes]:
    """The call's exit with `err` in its flags, as trace.bpf.c's syscall_flags sends it."""
    entry, exit_ = evs
    raw = bytearray(exit_)
    at = output.FLAGS_AT
    flags = int.from_bytes(raw[at:at + 4], "little") | err << output.EVENT_ERRNO_SHIFT
    raw[at:at + 4] = flags.to_bytes(4, "little")
    return [entry, bytes(raw)]


def test_the_last_failed_system_calls_error_names_a_user_functions_minus_one(tmp_path):
    evs = _flagged(_call(-1), 2)
    for lines in (_printed(evs), _decoded(tmp_path, evs, "user")):
        assert lines[-1] == "with_enum -> -1 ENOENT (4.000 us)", lines
    for lines in (_printed(evs, errors=True), _decoded(tmp_path, evs, "user", errors=True)):
        assert len(lines) == 1 and lines[0].endswith(" -> -1 ENOENT (4.000 us)"), lines
    (exit_,) = [json.loads(x) for x in _printed(evs, as_json=True)][1:]
    assert exit_["errno"] == {"value": 2, "name": "ENOENT"} and exit_["return"] == -1


@pytest.mark.parametrize("ret", [-2, 0, 5])
def test_only_a_minus_one_is_named_by_it(tmp_path, ret):
    evs = _flagged(_call(ret), 2)
    assert _printed(evs)[-1] == f"with_enum -> {ret} (4.000 us)"
    assert "errno" not in [json.loads(x) for x in _printed(evs, as_json=True)][1]


def test_a_kernel_function_is_never_named_by_it(tmp_path):
    evs = _flagged(_call(-1), 2)  # flags a kernel trace never sends: its convention stays
    assert _printed(evs, kernel=True)[-1] == "with_enum -> -1 (4.000 us)"
    assert _printed(evs, kernel=True, errors=True)[0].endswith(" -> -1 EPERM (4.000 us)")
