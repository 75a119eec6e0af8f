"""The generated BPF decoders, loaded through the running kernel's verifier and executed with
BPF_PROG_TEST_RUN over register/stack images: the bytes they put in each field must be exactly
the value bytes placed in the image, whatever garbage surrounds them; the generic table-driven
decoder's records must decode (in Python) to the same values."""

from __future__ import annotations

import subprocess

import imagegen
import pytest
import zoo
from bpfrun import BpfObject, bpf_permitted

from btfgen.codegen import bpf
from btfgen.codegen.names import function_keys
from btfgen.codegen.outputs import generate, plan_table
from btfgen.codegen.outputs import plans as outputs_plans
from btfgen.decode import function
from btfgen.probe import spec_format
from btfgen.decoder.describe import type_desc
from btfgen.decoder.runtime import RECORD_HEADER_SIZE, Unavailable, convert

RECORD_SIZE = RECORD_HEADER_SIZE + spec_format.DATA_SIZE


def _build(tmp_path, table, arch, images, defines=(), cookies=()):
    out = generate(arch, table, ("bpf",), self_contained=True)
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    cnames = bpf.function_names(arch.functions)
    src = ['#include "btfgen.bpf.h"', '#include "btfgen_specs.h"',
           'char LICENSE[] SEC("license") = "GPL";', "struct btfgen_record rec[2];", ""]
    if cookies:  # in .data, not known to the verifier: as bpf_get_attach_cookie's result
        src += ["#define BY_COOKIE",
                "struct { __u64 decodes; struct btfgen_record rec[2]; "
                f"__u64 cookies[{len(cookies)}]; }}"
                ' by_cookie SEC(".data") = { .cookies = { '
                + ", ".join(f"{c}ULL" for c in cookies) + " } };", ""]
    for i, (f, cname) in enumerate(zip(arch.functions, cnames)):
        src.append(imagegen.wrapper(f, cname, images[i], i))
    c = tmp_path / "run.bpf.c"
    c.write_text("\n".join(src))
    obj = tmp_path / "run.bpf.o"
    proc = subprocess.run(["clang-19", "-target", "bpf", "-O2", "-g", "-Wall", "-Werror",
                           *defines, "-c", str(c), "-o", str(obj)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return obj, cnames


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    reason = bpf_permitted()
    if reason:
        pytest.skip(reason)
    table, arch = zoo.build()
    images = [imagegen.make_image(f, "little", 8, seed=i) for i, f in enumerate(arch.functions)]
    obj, cnames = _build(tmp_path_factory.mktemp("bpf"), table, arch, images)
    with BpfObject(obj) as o:
        results = []
        for f, cname, img in zip(arch.functions, cnames, images):
            rc, ctx = o.run(f"entry_{cname}", img.ctx)
            exit_rc, exit_ctx = (0, None) if f.ret is None else o.run(f"exit_{cname}", img.exit_ctx)
            results.append((rc | exit_rc, ctx, exit_ctx, o.global_data()))
        yield table, arch, cnames, images, results


def _runs(obj, arch, cnames, images) -> list:
    with BpfObject(obj) as o:
        out = []
        for f, cname, img in zip(arch.functions, cnames, images):
            o.run(f"entry_{cname}", img.ctx)
            if f.ret is not None:
                o.run(f"exit_{cname}", img.exit_ctx)
            out.append(o.global_data())
        return out


def test_straight_line_decoders_write_the_interpreters_records(zoo_run, tmp_path):
    """Every zoo spec names straight-line decoders, and what they write (values, failed bits,
    the exit's carried pointer) is byte for byte what the ops interpreter writes, but for the
    register image's words no op of the function names."""
    table, arch, cnames, images, results = zoo_run
    plans = plan_table(arch, outputs_plans(arch))
    assert all(plans.ids(p)[0] for p in outputs_plans(arch))
    assert all(plans.ids(p)[1] for f, p in zip(arch.functions, outputs_plans(arch)) if f.ret)
    obj, _ = _build(tmp_path, table, arch, images, ("-DBTFGEN_INTERPRET_ONLY",))
    interpreted = _runs(obj, arch, cnames, images)
    served = 0
    for f, p, got, want in zip(arch.functions, outputs_plans(arch), [r[3] for r in results],
                               interpreted):
        unnamed = _image_only(plans, p)
        served += bool(unnamed)
        assert _ctx_addresses_apart(_blank(got, unnamed), _blank(want, unnamed)), f.name
    assert served >= 5


def _ctx_addresses_apart(a: bytes, b: bytes) -> bool:
    """Equal, but for 8-byte words that are both kernel addresses of the same alignment: a
    by-reference argument's pointer, which the wrapper points into its ctx, and two objects'
    runs may be handed their ctx at different addresses. Not the same offset in a page: the
    kernel's copy of the ctx comes from kmalloc, whose 96- and 192-byte caches (a 168-byte
    pt_regs) put it at any multiple of its size in a page (one CI run: ...a00 and ...200)."""
    if len(a) != len(b):
        return False
    for at in range(0, len(a) - len(a) % 8, 8):
        x, y = (int.from_bytes(w[at:at + 8], "little") for w in (a, b))
        if x != y and not (x >> 48 == y >> 48 == 0xFFFF and x & 7 == y & 7):
            return False
    return a[len(a) - len(a) % 8:] == b[len(b) - len(b) % 8:]


def test_the_cookie_decodes_what_the_spec_decodes(zoo_run, tmp_path):
    """A function the register image decodes is decoded by its attach cookie alone
    (btfgen_generic_decode_cookie: no spec) into the same record bytes, header included, as by
    its spec in the same run; the others (a carried return pointer, another decoder) are left
    to the spec (BTFGEN_NO_DECODER)."""
    table, arch, cnames, images, results = zoo_run
    plans = outputs_plans(arch)
    straight = plan_table(arch, plans)
    # As `btfgen trace` makes them: from the generated module's spec bytes, by its own cookie().
    module: dict = {}
    text = generate(arch, table, ("python",), self_contained=True)[f"btfgen_{arch.arch}.py"]
    exec(compile(text, "zoo_module.py", "exec"), module)
    cookies = []
    # The module's keys: `name__<btf id>` where names are shared (the zoo's dup).
    for i, (f, key) in enumerate(zip(arch.functions, function_keys(arch.functions, str))):
        value = module["cookie"](i, module["spec"](key), module["BYTE_ORDER"])
        cookies.append(spec_format.Cookie.from_value(value))
        entry, exit_ = straight.ids(plans[i])  # the spec bytes name the plan table's decoders
        assert cookies[-1] == spec_format.Cookie.of(i, {
            "btf_id": f.btf_id, "carry": plans[i].carry_code, "entry_plan": entry,
            "exit_plan": exit_}), f.name
    obj, _ = _build(tmp_path, table, arch, images, cookies=[c.value for c in cookies])
    decodes = 0
    with BpfObject(obj) as o:
        for f, c, cname, img in zip(arch.functions, cookies, cnames, images):
            for kind, prog, ctx in ((0, "entry", img.ctx), (1, "exit", img.exit_ctx)):
                if kind and f.ret is None:
                    continue
                o.run(f"{prog}_{cname}", ctx)
                spec, mine = o.global_data()[kind * RECORD_SIZE:], o.global_data(".data")
                count = int.from_bytes(mine[:8], "little")
                assert count == decodes + c.image[kind], (f.name, kind)
                decodes = count
                if c.image[kind]:  # the header and the image's words: all it writes
                    at = 8 + kind * RECORD_SIZE
                    image = (straight.entry, straight.exit)[kind][0]
                    assert image.image
                    for lo, hi in [(0, RECORD_HEADER_SIZE)] + [
                            (RECORD_HEADER_SIZE + w.dst, RECORD_HEADER_SIZE + w.dst + w.size)
                            for w in image.steps]:
                        assert mine[at + lo:at + hi] == spec[lo:hi], (f.name, kind, lo)
    assert decodes >= 5
    assert any(p.carry_code for p in plans)  # the zoo has a carried pointer: no cookie route
    assert not any(c.image != (False, False) for c, p in zip(cookies, plans) if p.carry_code)


def _image_only(table, p) -> list[int]:
    """The bss offsets of record bytes the register image writes that no op of the function
    names: the other registers' words, which the interpreter leaves as they were."""
    out = []
    for kind, ops, lists in ((0, p.entry_ops, table.entry), (1, p.exit_ops, table.exit)):
        if not table.on_image(p)[kind]:
            continue
        named = {b for o in ops for b in range(o.dst, o.dst + o.size)}
        # rec[1] holds an entry decode too: the exit's carried pointer is read from it
        out += [r * RECORD_SIZE + RECORD_HEADER_SIZE + b for s in lists[0].steps
                for b in range(s.dst, s.dst + s.size) if b not in named
                for r in ((0, 1) if kind == 0 else (1,))]
    return out


def _blank(data: bytes, offsets: list[int]) -> bytes:
    out = bytearray(data)
    for at in offsets:
        out[at] = 0
    return bytes(out)


def _slot(ctx: bytes, i: int, size: int) -> bytes:
    start = imagegen.OUT_OFF + imagegen.SLOT * i
    return ctx[start : start + size]


def test_entry_decoders_copy_exactly_the_value_bytes(zoo_run):
    table, arch, cnames, images, results = zoo_run
    checked = 0
    for f, img, (rc, ctx, _, _) in zip(arch.functions, images, results):
        assert rc == 0
        assert int.from_bytes(ctx[imagegen.ERR_OFF : imagegen.ERR_OFF + 4], "little") == 0, f.name
        for i, (a, want) in enumerate(zip(f.args, img.values)):
            if want is None:
                continue
            assert _slot(ctx, i, a.size) == want, f"{f.name}: {a.name}"
            checked += 1
    assert checked >= 20


def test_exit_decoders_read_the_return_value(zoo_run):
    table, arch, cnames, images, results = zoo_run
    checked = 0
    for f, img, (_rc, _, ctx, _) in zip(arch.functions, images, results):
        if f.ret is None:
            continue
        err = int.from_bytes(ctx[imagegen.ERR_OFF + 4 : imagegen.ERR_OFF + 8], "little",
                             signed=True)
        assert err == 0, f.name
        assert _slot(ctx, len(f.args), f.ret.size) == img.ret, f.name
        checked += 1
    assert checked == 5  # incl. a struct in rax:rdx, one via rax, one via the saved rdi


def test_generic_decoder_records_decode_to_the_same_values(zoo_run):
    table, arch, cnames, images, results = zoo_run
    for f, img, (_rc, _, _, bss) in zip(arch.functions, images, results):
        fn = function(f, arch)
        entry = fn.decode_record(bss[:RECORD_SIZE])
        for a, want, got in zip(f.args, img.values, entry):
            if want is None:
                assert isinstance(got, Unavailable)
                continue
            assert got == convert(type_desc(a.type), want, 0, "little"), f"{f.name}: {a.name}"
        if f.ret is None:
            continue
        got = fn.decode_record(bss[RECORD_SIZE : 2 * RECORD_SIZE])
        assert got == convert(type_desc(f.ret.type), img.ret, 0, "little"), f.name


def test_python_decoders_agree_with_the_image(zoo_run):
    """The library decoder over the same images (memory read from the image)."""
    table, arch, cnames, images, results = zoo_run
    for f, img in zip(arch.functions, images):
        fn = function(f, arch)
        ctx = bytes(img.ctx)
        stack = ctx[imagegen.STACK_OFF :]

        def read_memory(addr, size):
            # Late binding on purpose: the exit decode below reads the exit image.
            return ctx[addr : addr + size]  # noqa: B023

        got = fn.entry(ctx, stack, read_memory)
        for a, want, value in zip(f.args, img.values, got):
            if want is None:
                assert value == Unavailable(a.unavailable)
            else:
                assert value == convert(type_desc(a.type), want, 0, "little"), a.name
        if f.ret is not None:
            ctx = bytes(img.exit_ctx)
            stack = ctx[imagegen.STACK_OFF :]
            value = fn.decode_exit(ctx, stack, read_memory, saved_entry=(ctx, stack))
            assert value == convert(type_desc(f.ret.type), img.ret, 0, "little")


def test_python_spec_bytes_are_the_compiled_c_table(tmp_path):
    """The generated module's spec(name) is byte for byte what clang lays out for the same row
    of btfgen_specs.h (read from the object's .rodata)."""
    import importlib.util

    from elftools.elf.elffile import ELFFile

    table, arch = zoo.build()
    out = generate(arch, table, ("bpf", "python"), self_contained=True)
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    src = tmp_path / "s.bpf.c"
    src.write_text('#include "btfgen.bpf.h"\n#include "btfgen_specs.h"\n'
                   "const volatile void *keep = btfgen_specs;\n")
    subprocess.run(["clang-19", "-target", "bpf", "-O2", "-c", str(src), "-o",
                    str(tmp_path / "s.o")], check=True)
    with open(tmp_path / "s.o", "rb") as fh:
        elf = ELFFile(fh)
        (sym,) = elf.get_section_by_name(".symtab").get_symbol_by_name("btfgen_specs")
        section = elf.get_section(sym["st_shndx"])
        c_table = section.data()[sym["st_value"] : sym["st_value"] + sym["st_size"]]
    spec = importlib.util.spec_from_file_location("zoo_mod", tmp_path / "btfgen_x86_64.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    py_table = b"".join(mod.spec(k) for k in mod.names())
    head = spec_format.size_of(spec_format.SPEC_HEAD)  # 20 bytes, then 32 ops of 8
    assert len(c_table) == (head + 8 * 32) * len(arch.functions)
    assert py_table == c_table
