"""s390x: kernel and user memory overlap in addresses, so a kernel probe cannot try a pointer the
BTF does not tag as kernel memory and then as user memory (both reads may succeed, one with the
wrong bytes: a file name read from kernel memory at a user address printed garbage in the s390x
guest). Captures and filters there must name the memory; default strings are left out, and said."""

from __future__ import annotations

import pytest

import btfgen
from btfgen.abi.arches import load_arch
from btfgen.typed import capture
from btfgen.typed import filter as typed_filter

HEADER = r"""
struct open_how { unsigned long long flags, mode, resolve; };
long do_sys_openat2(int dfd, const char *filename, struct open_how *how);
"""


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    path = tmp_path_factory.mktemp("h") / "open.h"
    path.write_text(HEADER)
    return path


def _funcs(header, arch):
    target = btfgen.open(headers=[str(header)], arch=arch)
    return target, target.types.find_funcs("do_sys_openat2")


def test_the_arch_says_so():
    assert load_arch("s390x", 8).address_spaces == "separate"
    assert {load_arch(a, 8).address_spaces for a in ("x86_64", "arm64", "ppc64le")} == {"shared"}


def test_default_strings_left_out_and_named(header):
    _, funcs = _funcs(header, "s390x")
    assert capture.for_functions(funcs, [], strings=True, separate_spaces="s390x") == {}
    assert capture.unguessable_strings(funcs) == ["do_sys_openat2(filename)"]
    # elsewhere: kernel memory, then user memory, as before
    shared = capture.for_functions(funcs, [], strings=True)
    assert shared["do_sys_openat2"][0].space == capture.EITHER


def test_a_capture_names_its_memory(header):
    _, funcs = _funcs(header, "s390x")
    with pytest.raises(capture.CaptureError, match="column 17: on s390x kernel and user "
                                                   "addresses overlap"):
        capture.for_functions(funcs, [capture.parse("do_sys_openat2: filename")],
                              separate_spaces="s390x")
    caps = capture.for_functions(
        funcs, [capture.parse("do_sys_openat2: filename:user, how->flags:kernel")],
        separate_spaces="s390x")["do_sys_openat2"]
    assert [(c.text, c.space) for c in caps] == [("filename", capture.USER),
                                                  ("how->flags", capture.KERNEL)]


def test_a_filter_names_its_memory(header):
    target, funcs = _funcs(header, "s390x")
    layout = target.place(funcs)
    bad = typed_filter.parse_options(['do_sys_openat2: prefix(filename, "/tmp/")'])
    with pytest.raises(typed_filter.FilterOptionError, match="column 24: on s390x kernel and "
                                                             "user addresses overlap"):
        typed_filter.bind(bad, layout, target.types)
    assert typed_filter.bind(bad, layout, target.types, kernel=False)  # a uprobe's: user memory
    good = typed_filter.parse_options(['do_sys_openat2: prefix(filename:user, "/tmp/") && '
                                       'how->flags:kernel == 0'])
    assert typed_filter.bind(good, layout, target.types)

