"""The generated entry-save / exit-restore helpers (BTFGEN_SAVE_ARGS), executed by the kernel:
two nested calls of a function returning a struct through a hidden pointer that the ABI does not
hand back; each exit must get its own call's arguments and read the struct through its own
saved pointer, last in first out."""

from __future__ import annotations

import struct
import subprocess

import pytest
import zoo
from bpfrun import BpfObject, bpf_permitted

from btfgen.codegen.outputs import generate

PROGRAM = r"""
#define BTFGEN_SAVE_ARGS
#include "btfgen.bpf.h"
char LICENSE[] SEC("license") = "GPL";
__u8 mem[2][64]; /* the callers' return buffers */

SEC("syscall") int enter(void *ctx)
{
	__u32 sel = *(__u8 *)((char *)ctx + 256) & 1;
	struct btfgen_args_sret_saved *a = btfgen_save_slot(BTFGEN_ID_sret_saved);

	if (!a)
		return 1;
	*(__u64 *)((char *)ctx + 112) = (__u64)(unsigned long)&mem[sel]; /* rdi: the sret pointer */
	return btfgen_entry_sret_saved(ctx, a);
}

SEC("syscall") int leave(void *ctx)
{
	__u32 sel = *(__u8 *)((char *)ctx + 256) & 1;
	const struct btfgen_args_sret_saved *a;
	struct btfgen_ret_sret_saved r;
	int err;

	__builtin_memcpy(&mem[sel], (char *)ctx + 264, 40); /* what the callee returned */
	a = btfgen_saved_slot(BTFGEN_ID_sret_saved);
	if (!a)
		return 2;
	err = btfgen_exit_sret_saved(ctx, a, &r);
	*(__s32 *)((char *)ctx + 320) = a->n;
	__builtin_memcpy((char *)ctx + 328, &r.value, 40);
	btfgen_release_slot(BTFGEN_ID_sret_saved);
	return err;
}
"""


def test_nested_calls_restore_their_own_arguments(tmp_path):
    reason = bpf_permitted()
    if reason:
        pytest.skip(reason)
    table, arch = zoo.build()
    for name, text in generate(arch, table, ("bpf",), self_contained=True).items():
        (tmp_path / name).write_text(text)
    (tmp_path / "s.bpf.c").write_text(PROGRAM)
    proc = subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c",
                           str(tmp_path / "s.bpf.c"), "-o", str(tmp_path / "s.bpf.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

    def image(sel: int, n: int, ret: bytes) -> bytes:
        img = bytearray(b"\xee" * 512)
        img[104:112] = struct.pack("<q", n)  # rsi: int n (garbage above is fine: we set all)
        img[112:120] = bytes(8)
        img[256] = sel
        img[264:304] = ret
        return bytes(img)

    ra, rb = bytes(range(40)), bytes(range(100, 140))
    with BpfObject(tmp_path / "s.bpf.o") as o:
        assert o.run("enter", image(0, 111, bytes(40)))[0] == 0
        assert o.run("enter", image(1, -222, bytes(40)))[0] == 0
        rc, out_b = o.run("leave", image(1, 0, rb))
        assert rc == 0
        rc, out_a = o.run("leave", image(0, 0, ra))
        assert rc == 0
        assert o.run("leave", image(0, 0, ra))[0] == 2  # nothing left saved
    assert struct.unpack_from("<i", out_b, 320)[0] == -222 and out_b[328:368] == rb
    assert struct.unpack_from("<i", out_a, 320)[0] == 111 and out_a[328:368] == ra
