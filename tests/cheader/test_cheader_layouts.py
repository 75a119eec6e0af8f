"""Placement cannot tell the front ends apart: layouts from headers == layouts from BTF, on every
arch that has an ABI description, for this directory's corpus and the conformance corpus."""

from __future__ import annotations

import os
import re

import pytest
import toolchains
from cheader_btf import btf_object
from cheader_corpus import HEADER, SOURCE

from btfgen.btf.reader import open_btf
from btfgen.cheader import load_headers

place = pytest.importorskip("btfgen.place", reason="placement (btfgen.place) not there yet")
arches = pytest.importorskip("btfgen.abi.arches", reason="ABI descriptions not there yet")


def _convention(arch):
    if not toolchains.TOOLCHAINS[arch].available():
        pytest.skip(f"{toolchains.TOOLCHAINS[arch].compiler} not installed")
    if arch not in arches.canonical_names():
        pytest.skip(f"no ABI description for {arch} yet")
    return arches.load_arch(arch)


_BASE_WORDS = {"signed", "unsigned", "short", "long", "int", "char", "__int128"}


def _spelling(c: str) -> str:
    """A C spelling with base-type words in one order: clang's DWARF says "unsigned long" where
    gcc's says "long unsigned int" (riscv32 and loongarch64 objects are clang's)."""
    out, group = [], []
    for tok in [*re.findall(r"[\w]+|\S", c), ""]:
        if tok in _BASE_WORDS:
            group.append(tok)
            continue
        if group:
            if {"short", "long"} & set(group) and not {"int", "char"} & set(group):
                group.append("int")
            out.append(" ".join(sorted(group)))
            group = []
        if tok:
            out.append(tok)
    return " ".join(out)


def _value(v):
    # Everything but the Type object itself, whose ids differ between the two tables.
    return None if v is None else (v.name, _spelling(v.type_name), v.size, v.pieces, v.by_ref,
                                   v.at_exit, v.unavailable, v.signed)


def _function(f):
    return (f.name, tuple(_value(a) for a in f.args), _value(f.ret), f.variadic)


def _compare(arch, header_text, source, names=None):
    conv = _convention(arch)
    ours = load_headers([header_text], arch=arch)
    btf = open_btf(str(btf_object(source, arch)))
    funcs = [f for f in ours.funcs() if names is None or f.name in names]
    a = place.place_functions(ours, conv, funcs)
    b = place.place_functions(btf, conv, [btf.find_funcs(f.name)[0] for f in funcs])
    assert (a.arch, a.byte_order, a.pointer_size, a.ctx) == \
        (b.arch, b.byte_order, b.pointer_size, b.ctx)
    mismatched = [fa.name for fa, fb in zip(a.functions, b.functions)
                  if _function(fa) != _function(fb)]
    assert mismatched == [], f"{arch}: layouts differ for {mismatched}"
    return len(funcs)


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_corpus_layouts(arch, tmp_path):
    header = tmp_path / "corpus.h"
    header.write_text(HEADER)
    assert _compare(arch, str(header), SOURCE) >= 12


@pytest.mark.parametrize("arch", toolchains.ARCHES)
def test_conformance_corpus_layouts(arch, tmp_path):
    conformance = pytest.importorskip("conformance.corpus")
    from conformance import cmodel, emit

    ptr = 4 if arch in ("i386", "riscv32", "arm") else 8
    # The regression cases and a slice of the random ones; BTFGEN_CHEADER_ALL=1 takes them all.
    protos = conformance.corpus(arch, ptr)
    if not os.environ.get("BTFGEN_CHEADER_ALL"):
        protos = protos[:80]
    deps: list = []
    for p in protos:
        deps += [t for t in cmodel.dependencies(p) if t not in deps]
    header = tmp_path / "conformance.h"
    header.write_text("\n".join([*(cmodel.definition(t) for t in deps),
                                 *(p.decl() + ";" for p in protos)]) + "\n")
    n = _compare(arch, str(header), emit.batch_source(protos), {p.name for p in protos})
    assert n == len(protos)


def test_spelling_normalization_keeps_differences():
    assert _spelling("unsigned long") == _spelling("long unsigned int")
    assert _spelling("const long long *") == _spelling("const long long int *")
    assert _spelling("long") != _spelling("long long")
    assert _spelling("struct s *") == "struct s *"
