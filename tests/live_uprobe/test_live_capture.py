"""A hand-written BPF program copies pt_regs and the top of the stack at every entry and return
of the target's functions; btfgen's layouts (from the target's pahole BTF) and Python decoders
must find in those copies exactly the values target.c passed and returned.

Attached both ways: one uprobe + uretprobe link per function (libbpf), and a single
uprobe_multi link per direction for all functions, told apart by attach cookie."""

from __future__ import annotations

import struct

import live_harness as harness
import pytest

from btfgen.abi.arches import host_bpf_syscall
from btfgen.probe import bpf_object
from live_expected import ARGS, FUNCS, RETURNS

from btfgen.btf.reader import open_btf
from btfgen.cheader import load_headers

place = pytest.importorskip("btfgen.place")
arches = pytest.importorskip("btfgen.abi.arches")
decode = pytest.importorskip("btfgen.decode")

PT_REGS = 21 * 8
STACK = 128
RET_BYTES = 64
HEAD = struct.Struct("<QQQ")  # cookie, is_exit, pid_tgid


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    harness.require_live()
    work = tmp_path_factory.mktemp("capture")
    exe, with_btf = harness.build_target(work)
    obj = harness.compile_bpf(harness.HERE / "capture.bpf.c", work / "capture.bpf.o")
    return exe, obj, with_btf


# The layouts come from the program's own BTF (pahole), or from its header (libclang): both must
# find the same live values.
@pytest.fixture(scope="module", params=["btf", "header"])
def built(request, target):
    exe, obj, with_btf = target
    if request.param == "btf":
        types = open_btf(str(with_btf))
    else:
        types = load_headers([str(harness.HERE / "target.h")], arch="x86_64")
    layout = place.place_functions(types, arches.load_arch("x86_64"),
                                   [types.find_funcs(n)[0] for n in FUNCS], ctx="pt_regs")
    return exe, obj, layout


def _split(rec: bytes):
    cookie, is_exit, _ = HEAD.unpack_from(rec)
    off = HEAD.size
    ctx = rec[off:off + PT_REGS]
    stack = rec[off + PT_REGS:off + PT_REGS + STACK]
    at_ret = rec[off + PT_REGS + STACK:off + PT_REGS + STACK + RET_BYTES]
    return cookie, is_exit, ctx, stack, at_ret


def _check(records, layout, cookie_base):
    fns = {cookie_base + i: decode.function(f, layout) for i, f in enumerate(layout.functions)}
    entries, seen = {}, {}
    for rec in records:
        cookie, is_exit, ctx, stack, at_ret = _split(rec)
        fn = fns[cookie]
        if not is_exit:
            entries[fn.name] = (ctx, stack)
            seen[fn.name, "args"] = fn.as_dict(fn.decode_entry(ctx, stack))
        else:
            rax = struct.unpack_from("<Q", ctx, 10 * 8)[0]

            def read_memory(addr, size, _rax=rax, _mem=at_ret):
                assert addr == _rax and size <= len(_mem), (hex(addr), size)
                return _mem[:size]

            seen[fn.name, "ret"] = fn.decode_exit(ctx, stack, read_memory,
                                                  saved_entry=entries[fn.name])
    want = {**{(n, "args"): v for n, v in ARGS.items()},
            **{(n, "ret"): v for n, v in RETURNS.items()}}
    assert seen == want


def test_one_link_per_function(built):
    exe, obj_path, layout = built
    with bpf_object.BpfObject(str(obj_path), bpf_syscall=host_bpf_syscall()) as obj:
        obj.load()
        for i, name in enumerate(FUNCS):
            obj.attach_uprobe("on_entry", str(exe), name, cookie=100 + i)
            obj.attach_uprobe("on_exit", str(exe), name, cookie=100 + i, retprobe=True)
        records = harness.run_traced(obj, exe)
    assert len(records) == 2 * len(FUNCS)
    _check(records, layout, 100)


def test_uprobe_multi(built):
    exe, obj_path, layout = built
    cookies = [7 + i for i in range(len(FUNCS))]
    with bpf_object.BpfObject(str(obj_path), bpf_syscall=host_bpf_syscall()) as obj:
        obj.expect_uprobe_multi("on_entry")
        obj.expect_uprobe_multi("on_exit")
        obj.load()
        at = harness.offsets(exe, FUNCS)
        obj.attach_uprobe_multi("on_entry", str(exe), FUNCS, cookies, offsets=at)
        obj.attach_uprobe_multi("on_exit", str(exe), FUNCS, cookies, offsets=at, retprobe=True)
        records = harness.run_traced(obj, exe)
    assert len(records) == 2 * len(FUNCS)
    _check(records, layout, 7)
