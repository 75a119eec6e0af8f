"""btfgen's generated BPF decoders, live: the typed per-function decoders (btfgen_entry_NAME /
btfgen_exit_NAME, arguments saved at entry for the exit) and the generic table-driven decoder
(one program for every function, its spec picked by attach cookie, records decoded by the
generated Python module), compiled by clang, loaded by libbpf, attached as uprobes to the
target, compared with what target.c passed and returned."""

from __future__ import annotations

import importlib.util
import struct

import live_harness as harness
import pytest

from btfgen.abi.arches import host_bpf_syscall
from btfgen.probe import bpf_object
from live_expected import ARGS, FUNCS, RETURNS

from btfgen.btf import types as T
from btfgen.btf.reader import open_btf

place = pytest.importorskip("btfgen.place")
arches = pytest.importorskip("btfgen.abi.arches")
outputs = pytest.importorskip("btfgen.codegen.outputs")
describe = pytest.importorskip("btfgen.decoder.describe")
runtime = pytest.importorskip("btfgen.decoder.runtime")

HEAD = struct.Struct("<II")  # function index, kind (0 entry, 1 exit)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    harness.require_live()
    work = tmp_path_factory.mktemp("generated")
    exe, with_btf = harness.build_target(work)
    btf = open_btf(str(with_btf))
    layout = place.place_functions(btf, arches.load_arch("x86_64"),
                                   [btf.find_funcs(n)[0] for n in FUNCS], ctx="pt_regs")
    files = outputs.generate(layout, btf, ("bpf", "python"), self_contained=True)
    for name, text in files.items():
        (work / name).write_text(text)
    names = outputs.file_names(layout.arch)
    return work, exe, btf, layout, names


# -- typed decoders ----------------------------------------------------------------------------

def _typed_program(layout) -> str:
    parts = ['#include <linux/bpf.h>', '#define BTFGEN_USER', '#define BTFGEN_SAVE_ARGS',
             '#include "btfgen.bpf.h"',
             "struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 16); }"
             " events SEC(\".maps\");"]
    for i, f in enumerate(layout.functions):
        n = f.name
        parts.append(f"""
struct rec_entry_{n} {{ __u32 func; __u32 kind; struct btfgen_args_{n} a; }};
struct rec_exit_{n} {{ __u32 func; __u32 kind; struct btfgen_ret_{n} r; }};
/* clang writes BTF only for types that globals or signatures use; these put the record
 * layouts in the object's BTF for the test to read. */
struct rec_entry_{n} keep_entry_{n};
struct rec_exit_{n} keep_exit_{n};
SEC("uprobe") int entry_{n}(void *ctx)
{{
	struct btfgen_args_{n} *saved = btfgen_save_slot(BTFGEN_ID_{n});
	struct rec_entry_{n} *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r)
		return 0;
	r->func = {i};
	r->kind = 0;
	btfgen_entry_{n}(ctx, &r->a);
	if (saved)
		__builtin_memcpy(saved, &r->a, sizeof(r->a));
	bpf_ringbuf_submit(r, 0);
	return 0;
}}
SEC("uretprobe") int exit_{n}(void *ctx)
{{
	const struct btfgen_args_{n} *saved = btfgen_saved_slot(BTFGEN_ID_{n});
	struct rec_exit_{n} *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (r) {{
		r->func = {i};
		r->kind = 1;
		btfgen_exit_{n}(ctx, saved, &r->r);
		bpf_ringbuf_submit(r, 0);
	}}
	btfgen_release_slot(BTFGEN_ID_{n});
	return 0;
}}""")
    parts.append('char LICENSE[] SEC("license") = "GPL";\n')
    return "\n".join(parts)


def _member(btf, struct_name: str, member: str) -> T.Member:
    [s] = btf.find_types(struct_name, "struct")
    [m] = [m for m in s.members if m.name == member]
    return m


def _decode_typed(rec: bytes, bpf_btf, target_btf, layout):
    """A record's values: where each field is, from clang's BTF of the BPF object; what it
    means, from the target's BTF (the generated struct may spell a field as plain bytes)."""
    index, kind = HEAD.unpack_from(rec)
    f = layout.functions[index]
    if kind == 0:
        holder = _member(bpf_btf, f"rec_entry_{f.name}", "a")
        out = {}
        for arg in f.args:
            m = _member(bpf_btf, f"btfgen_args_{f.name}", arg.name)
            offset = holder.offset + m.offset
            out[arg.name] = runtime.convert(describe.type_desc(arg.type), rec, offset, "little")
        return f.name, "args", out
    holder = _member(bpf_btf, f"rec_exit_{f.name}", "r")
    value = _member(bpf_btf, f"btfgen_ret_{f.name}", "value")
    return f.name, "ret", runtime.convert(describe.type_desc(f.ret.type), rec,
                                          holder.offset + value.offset, "little")


def check_typed_decoders(work, exe, target_btf, layout) -> None:
    """Compile `layout`'s typed decoders into uprobes on `exe`, run it, and check every value
    it passed and returned decodes to what it was."""
    src = work / "typed.bpf.c"
    src.write_text(_typed_program(layout))
    obj_path = harness.compile_bpf(src, work / "typed.bpf.o", include_dirs=[work])
    bpf_btf = open_btf(str(obj_path))
    with bpf_object.BpfObject(str(obj_path), bpf_syscall=host_bpf_syscall()) as obj:
        obj.load()
        for f in layout.functions:
            obj.attach_uprobe(f"entry_{f.name}", str(exe), f.name)
            obj.attach_uprobe(f"exit_{f.name}", str(exe), f.name, retprobe=True)
        records = harness.run_traced(obj, exe)
    seen = {}
    for rec in records:
        name, what, value = _decode_typed(rec, bpf_btf, target_btf, layout)
        seen[name, what] = value
    assert seen == {**{(n, "args"): v for n, v in ARGS.items()},
                    **{(n, "ret"): v for n, v in RETURNS.items()}}


def test_typed_decoders(generated):
    work, exe, target_btf, layout, _ = generated
    check_typed_decoders(work, exe, target_btf, layout)


# -- the generic decoder -------------------------------------------------------------------------

GENERIC = r"""
#include <linux/bpf.h>
#define BTFGEN_USER
#define BTFGEN_SAVE_ARGS /* btfgen_generic_exit keeps a struct-return pointer from the entry */
#include "btfgen.bpf.h"

/* The specs, one per function, written by user space (the Python module's spec(name)) at the
 * index the function's attach cookie names. */
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 64); __type(key, __u32);
	 __type(value, struct btfgen_spec); } specs SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 18); } events SEC(".maps");

static __always_inline int run(void *ctx, __u32 kind)
{
	__u32 at = bpf_get_attach_cookie(ctx);
	const struct btfgen_spec *spec = bpf_map_lookup_elem(&specs, &at);
	struct btfgen_record *r;

	if (!spec)
		return 0;
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r)
		return 0;
	if (kind)
		btfgen_generic_exit(ctx, BTFGEN_SP(ctx), spec, r);
	else
		btfgen_generic_entry(ctx, BTFGEN_SP(ctx), spec, r);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("uprobe") int generic_entry(void *ctx) { return run(ctx, 0); }
SEC("uretprobe") int generic_exit(void *ctx) { return run(ctx, 1); }
char LICENSE[] SEC("license") = "GPL";
"""


def _load_module(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generic_decoder_with_uprobe_multi(generated):
    work, exe, _, layout, names = generated
    src = work / "generic.bpf.c"
    src.write_text(GENERIC)
    obj_path = harness.compile_bpf(src, work / "generic.bpf.o", include_dirs=[work])
    decoders = _load_module(work / names["python"])
    funcs = [f.name for f in layout.functions]
    cookies = [3 + i for i in range(len(funcs))]  # any index into the specs map
    with bpf_object.BpfObject(str(obj_path), bpf_syscall=host_bpf_syscall()) as obj:
        obj.expect_uprobe_multi("generic_entry")
        obj.expect_uprobe_multi("generic_exit")
        obj.load()
        for name, cookie in zip(funcs, cookies):
            obj.update("specs", struct.pack("<I", cookie), decoders.spec(name))
        at = harness.offsets(exe, funcs)
        obj.attach_uprobe_multi("generic_entry", str(exe), funcs, cookies, offsets=at)
        obj.attach_uprobe_multi("generic_exit", str(exe), funcs, cookies, offsets=at,
                                retprobe=True)
        records = harness.run_traced(obj, exe)
    by_id = {f.btf_id: f.name for f in layout.functions}
    seen = {}
    for rec in records:
        btf_id, kind = struct.unpack_from("<II", rec)
        fn = decoders.function(by_id[btf_id])
        value = fn.decode_record(rec)
        seen[fn.name, "ret" if kind else "args"] = value if kind else fn.as_dict(value)
    want = {**{(n, "args"): v for n, v in ARGS.items()},
            **{(n, "ret"): v for n, v in RETURNS.items()}}
    # Through a hidden pointer the generic record holds only the address: by-reference values
    # are the caller's to read (read_memory), so compare those apart.
    unread = {k: v for k, v in seen.items() if isinstance(v, runtime.Unread)}
    assert set(unread) <= {("make_big", "ret")}
    assert {k: v for k, v in seen.items() if k not in unread} == \
        {k: v for k, v in want.items() if k not in unread}
