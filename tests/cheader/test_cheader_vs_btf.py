"""Types from headers (libclang, parsed for the target) == types from BTF (the same declarations
compiled by the arch's real compiler, BTF by pahole), on every arch."""

from __future__ import annotations

import pytest
import toolchains
from cheader_btf import btf_object
from cheader_compare import diff_funcs, diff_types
from cheader_corpus import HEADER, SOURCE

from btfgen.btf import types as T
from btfgen.btf.reader import open_btf
from btfgen.cheader import load_headers


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    path = tmp_path_factory.mktemp("hdr") / "corpus.h"
    path.write_text(HEADER)
    return str(path)


def _pair(arch, header):
    if not toolchains.TOOLCHAINS[arch].available() or not toolchains.have("pahole"):
        pytest.skip(f"{toolchains.TOOLCHAINS[arch].compiler} or pahole not installed")
    return load_headers([header], arch=arch), open_btf(str(btf_object(SOURCE, arch)))


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_functions_match(arch, header):
    ours, btf = _pair(arch, header)
    names = sorted(f.name for f in ours.funcs())
    assert names == sorted(f.name for f in btf.funcs())
    assert ("f_i128" in names) == (ours.pointer_size == 8)  # __int128: 64-bit targets only
    problems = []
    for func in ours.funcs():
        [theirs] = btf.find_funcs(func.name)
        # pahole 1.24 marks every function static (BTF_FUNC_STATIC); the header knows better.
        assert func.linkage == T.Linkage.GLOBAL
        problems += [d for d in diff_funcs(func, theirs) if "linkage" not in d]
    assert problems == []


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_named_types_match(arch, header):
    ours, btf = _pair(arch, header)
    checked = 0
    for t in ours:
        if not t.name or not isinstance(t, (T.Composite, T.Enum, T.Typedef)):
            continue
        if t.name.startswith("__"):  # the compiler's own (__builtin_va_list and friends)
            continue
        theirs = [b for b in btf.find_types(t.name) if type(b) is type(t)]
        assert theirs, f"{arch}: {t.name} not in BTF"
        assert diff_types(t, theirs[0], t.name) == []
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_byte_order_and_pointer_size_follow_the_target(arch, header):
    ours, btf = _pair(arch, header)
    assert ours.byte_order == btf.byte_order
    assert ours.pointer_size == btf.pointer_size
    assert ours.elf_machine is None


def test_comparison_sees_a_wrong_target(header):
    """The comparator is not blind: i386 headers against x86_64 BTF must disagree (long, pointers,
    long long alignment), and only there."""
    if not toolchains.TOOLCHAINS["x86_64"].available():
        pytest.skip("gcc not installed")
    ours = load_headers([header], arch="i386")
    btf = open_btf(str(btf_object(SOURCE, "x86_64")))
    problems = {f.name: diff_funcs(f, btf.find_funcs(f.name)[0]) for f in ours.funcs()}
    assert any("mixed" in d for d in problems["f_ret"])  # struct mixed: 16 vs 24 bytes
    assert any("int" in d for d in problems["f_bits"])  # long: 4 vs 8 bytes
    assert all("linkage" in d for d in problems["f_void"])  # void(void): nothing else to differ
