"""`Target.plan`: what to generate, worked out once, and the two renderings of it: the files
`btfgen -o DIR` writes and a trace directory's generated text."""

from __future__ import annotations

import pytest

import btfgen
from btfgen.codegen import filter_trace
from btfgen.typed.filter import FilterOptionError

HEADER = r"""
struct open_how { unsigned long long flags, mode, resolve; };
long do_sys_openat2(int dfd, const char *filename, struct open_how *how);
int close_fd(unsigned int fd);
"""
FILTER = "do_sys_openat2: dfd < 0"


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    path = tmp_path_factory.mktemp("h") / "open.h"
    path.write_text(HEADER)
    return path


def _target(header, arch: str = "x86_64"):
    return btfgen.open(headers=[str(header)], arch=arch)


def test_one_plan_renders_both_outputs(header):
    plan = _target(header).plan(["do_sys_openat2", "close_fd"],
                                captures=["do_sys_openat2: how->flags"], filters=[FILTER],
                                self_contained=True)
    assert [f.name for f in plan.layout.functions] == ["do_sys_openat2", "close_fd"]
    assert [c.text for c in plan.captures["do_sys_openat2"]] == ["how->flags"]
    assert [b.index for b in plan.filters] == [0]
    assert plan.filtered_names() == ["do_sys_openat2"]
    files, traced = plan.files(("bpf", "python")), plan.trace_files()
    # The decoders are the same bytes in both; each has its own filter header.
    shared = {"btfgen.bpf.h", "btfgen_specs.h", "btfgen_x86_64.py"}
    assert set(files) == shared | {"btfgen_filter.h"}
    assert set(traced) == shared | {"trace_filter.h"}
    assert {n: files[n] for n in shared} == {n: traced[n] for n in shared}
    assert "case 0: /* do_sys_openat2 */" in traced["trace_filter.h"]


def test_generate_is_the_plan_rendered(header):
    target = _target(header)
    kwargs = dict(captures=["do_sys_openat2: how->flags"], filters=[FILTER], strings=True)
    assert target.generate(["do_sys_openat2"], **kwargs) == \
        target.plan(["do_sys_openat2"], **kwargs).files()


def test_without_filters_a_trace_keeps_no_old_predicates(header):
    plan = _target(header).plan(["close_fd"], self_contained=True)
    assert plan.filters == () and plan.filtered_names() == []
    assert plan.trace_files()["trace_filter.h"] == filter_trace.NO_FILTER
    assert "btfgen_filter.h" not in plan.files()


def test_a_placed_layout_is_used_as_it_is(header):
    target = _target(header)
    layout = target.place(target.select(["close_fd"]).functions)
    plan = target.plan(layout)
    assert plan.layout is layout and plan.placement_notes == ()
    assert plan.self_contained is False  # a 64-bit target has its vmlinux.h


def test_the_address_space_rule_is_the_kernel_probes(header):
    """s390x: a kernel probe cannot guess which memory an untagged pointer is; a uprobe reads
    user memory only, so the same request plans for uprobes (kernel=False)."""
    target = _target(header, "s390x")
    kernel = target.plan(["do_sys_openat2"], strings=True)
    assert kernel.captures == {}
    assert kernel.unguessable == ("do_sys_openat2(filename)",)
    user = target.plan(["do_sys_openat2"], strings=True, kernel=False)
    assert [c.text for c in user.captures["do_sys_openat2"]] == ["filename"]
    assert user.unguessable == ()
    flt = 'do_sys_openat2: prefix(filename, "/tmp/")'
    with pytest.raises(FilterOptionError, match="on s390x kernel and user addresses overlap"):
        target.plan(["do_sys_openat2"], filters=[flt])
    assert len(target.plan(["do_sys_openat2"], filters=[flt], kernel=False).filters) == 1
    assert kernel.self_contained is False
