"""Generated BPF for every function of the running kernel compiles with clang-19 -target bpf
-O2 -g -Wall -Werror against bpftool's vmlinux.h, with zero warnings (the header's size
assertions check every type it takes from vmlinux.h); the generic table too."""

from __future__ import annotations

from dataclasses import replace

import bpfrun
import kernel
import pytest

from btfgen.codegen.outputs import generate

pytestmark = pytest.mark.skipif(kernel.missing() is not None, reason=str(kernel.missing()))


def test_whole_kernel_header_compiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("kernel")
    arch = kernel.placed_all()
    out = generate(arch, kernel.btf(), ("bpf",), specs_table=False)
    (d / "btfgen.bpf.h").write_text(out["btfgen.bpf.h"])
    kernel.vmlinux_h(d)
    src = d / "all.bpf.c"
    src.write_text('#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\n'
                   '#define BTFGEN_SAVE_ARGS\n#include "btfgen.bpf.h"\n'
                   'char LICENSE[] SEC("license") = "GPL";\n')
    proc = kernel.clang_bpf(src, d / "all.bpf.o")
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert proc.stderr == ""
    assert out["btfgen.bpf.h"].count("static __always_inline int btfgen_entry_") == \
        2 * len(arch.functions)


def test_generic_table_compiles(tmp_path):
    full = kernel.placed_all()
    arch = replace(full, functions=full.functions[:2000])
    out = generate(arch, kernel.btf(), ("bpf",))
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    kernel.vmlinux_h(tmp_path)
    src = tmp_path / "t.bpf.c"
    src.write_text('#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\n#include "btfgen.bpf.h"\n'
                   '#include "btfgen_specs.h"\nchar LICENSE[] SEC("license") = "GPL";\n'
                   "struct btfgen_record rec;\n"
                   'SEC("kprobe") int k(struct pt_regs *ctx) {\n'
                   "\tconst struct btfgen_spec *s = btfgen_spec_at(bpf_get_attach_cookie(ctx));\n"
                   "\treturn s ? btfgen_generic_decode(ctx, BTFGEN_SP(ctx), s, 0, &rec) : 0;\n}\n")
    proc = kernel.clang_bpf(src, tmp_path / "t.bpf.o")
    assert proc.returncode == 0, proc.stderr[-5000:]
    if bpfrun.bpf_permitted() is None:  # the table indexed by cookie passes the verifier
        with bpfrun.BpfObject(tmp_path / "t.bpf.o") as obj:
            assert obj.prog_fd("k") > 0
    assert proc.stderr == ""
