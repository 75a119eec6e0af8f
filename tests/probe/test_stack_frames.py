"""--stack's frames from a stack part as trace.bpf.c lays it out (stack_wire), made up here: a
kernel stack named by a kallsyms or System.map file (a module's symbol by its module, an
address below every symbol said so), a user stack with no copy of the stack shown as the
kernel's frame-pointer walk and said likely cut, a part longer than its record refused; the
text and JSON shapes; a kernel function's call in a kernel thread said to have no user side;
an unwind stopped by a short copy of the stack said cut at a page not resident."""

from __future__ import annotations

import struct

import pytest

from btfgen.probe import eh_frame, stack_wire, symbolize, unwind

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81200000 T do_syscall_64
ffffffff81200400 t ksys_lseek
ffffffff81200300 d some_data
ffffffffc0001000 t bm_status_read\t[binfmt_misc]
"""


def _part(kernel=(), user=(), regs=(0, 0, 0, 0), slice_=b"", order="little", flags=0) -> bytes:
    e = "<" if order == "little" else ">"
    head = struct.pack(e + "HHHHQQQQ", len(kernel), len(user), len(slice_), flags, *regs)
    return head + struct.pack(e + f"{len(kernel) + len(user)}Q", *kernel, *user) + slice_


@pytest.mark.parametrize("order", ["little", "big"])
def test_kernel_frames_named_by_kallsyms(tmp_path, order):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    stacks = symbolize.Stacks("x86_64", order, str(path))
    raw = b"\0" * 24 + _part(kernel=(0xffffffff81200410, 0xffffffff81200005,
                                     0xffffffffc0001010, 0x1000), order=order)
    got = stacks.describe(raw, 24, 1, 1)
    assert set(got) == {"kernel"}
    assert symbolize.Stacks.text(got) == [
        "    ksys_lseek+0x10 (kernel)",
        "    do_syscall_64+0x5 (kernel)",
        "    bm_status_read+0x10 ([binfmt_misc])",
        "    0x1000 (below every kernel symbol)",
    ]
    as_json = symbolize.Stacks.as_json(got)
    assert as_json["kstack"][0] == {"ip": 0xffffffff81200410, "symbol": "ksys_lseek",
                                    "offset": 0x10, "object": "kernel"}
    assert as_json["kstack"][3]["why"] == "below every kernel symbol"


def test_system_map_has_no_module_column(tmp_path):
    path = tmp_path / "System.map"
    path.write_text("ffffffff81000000 T _stext\nffffffff81200000 T do_syscall_64\n")
    frame = symbolize.KernelSymbols(str(path)).frame(0xffffffff81200020)
    assert frame.text == "do_syscall_64+0x20 (kernel)"


def test_kallsyms_without_addresses_said(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text("0000000000000000 T do_syscall_64\n")
    frame = symbolize.KernelSymbols(str(path)).frame(0xffffffff81200020)
    assert frame.symbol is None and "gives no addresses (kptr_restrict?)" in frame.why


def test_user_stack_without_its_copy_is_the_frame_pointer_walk_said_cut():
    stacks = symbolize.Stacks("x86_64", "little")
    # a process that is not there: the addresses are not named, and say why
    raw = _part(user=(0x401000, 0x401234), regs=(0x401000, 0x7ffc0000, 0, 0))
    got = stacks.describe(raw, 0, 1 << 30, 1 << 30)
    assert [f.ip for f in got["user"]] == [0x401000, 0x401234]
    assert all(f.symbol is None and "maps could not be read" in f.why for f in got["user"])
    assert "kernel's frame-pointer walk" in got["user_cut"]
    assert symbolize.Stacks.text(got)[-1].startswith("    ... likely cut: no user stack")


def test_a_part_past_its_record_is_refused():
    raw = _part(user=(1, 2, 3))[:-8]
    with pytest.raises(stack_wire.BadStack, match="a stack part of"):
        stack_wire.read(raw, 0, "little")
    head = struct.pack("<HHHHQQQQ", stack_wire.FRAMES + 1, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(stack_wire.BadStack, match="33 kernel"):
        stack_wire.read(head + b"\0" * 400, 0, "little")


def test_a_kernel_thread_has_no_user_side_said(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    stacks = symbolize.Stacks("x86_64", "little", str(path))
    raw = _part(kernel=(0xffffffff81200410,), flags=stack_wire.NO_USER)
    got = stacks.describe(raw, 0, 2, 2)
    assert stack_wire.read(raw, 0, "little").flags == stack_wire.NO_USER
    assert symbolize.Stacks.text(got) == [
        "    ksys_lseek+0x10 (kernel)",
        "    (no user stack: a kernel thread, with no user side)",
    ]
    assert symbolize.Stacks.as_json(got) == {
        "kstack": [{"ip": 0xffffffff81200410, "symbol": "ksys_lseek", "offset": 0x10,
                    "object": "kernel"}],
        "ustack": [], "ustack_cut": None,
        "ustack_none": "a kernel thread, with no user side"}


class _Frames:
    """CFI where every frame is FRAME bytes: the CFA FRAME above sp, the return address at
    CFA - 8."""

    FRAME = 256

    def row(self, addr: int) -> eh_frame.Row:
        return eh_frame.Row(7, self.FRAME, {16: (eh_frame.OFFSET, -8)}, 16)


@pytest.mark.parametrize("size, said", [
    (24, "the stack copied (24 bytes) ends before the next frame, at a page that could not "
         "be read (not resident: the program cannot fault it in)"),
    (stack_wire.SLICE, f"the stack copied ({stack_wire.SLICE} bytes) ends before the next "
                       "frame"),
])
def test_a_walk_past_the_copy_says_why_it_ends(size, said):
    # every word a return address: the walk goes on, a frame each FRAME bytes, until the copy
    # ends
    slice_ = struct.pack(f"<{size // 8}Q", *[0x401234] * (size // 8))
    sample = stack_wire.StackSample((), (), 0x401000, 0x7000, 0, 0, slice_, "little")
    walked = unwind.walk(sample, "x86_64", lambda pc: (_Frames(), pc))
    assert walked.cut == said
    assert len(walked.pcs) == 1 + size // _Frames.FRAME
