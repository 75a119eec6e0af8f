"""What every test directory shares: the conformance table, printed at the end of the run.

The conformance tests carry their rows in their reports (`record_property`), so the table is
whole whether the tests ran here or in pytest-xdist workers: reports reach the process that
prints, module globals do not.
"""

from __future__ import annotations

import pytest

_ROW = "conformance"  # the report property the rows travel under
_rows: dict[str, tuple[int, int, int, int, int]] = {}


@pytest.fixture
def conformance_row(record_property):
    """Record one row: (arch and ctx, functions, values, agreed, unavailable, disagreeing)."""
    return lambda key, *counts: record_property(_ROW, (key, *counts))


# The longest files first (minutes of TCG guest each; the rest take seconds): with one worker a
# CPU, a long test begun last leaves the other worker idle to the end (the longest-first rule
# of scheduling). A fixed list, not last run's timings: every xdist worker must collect the
# same order. Measured guest minutes a file, 2026-11-29: module fetcher 5-7 a guest (its
# amd64 guest runs test_fetcher's steps too), trace tool 15 over eight guests, summary 9, typed
# 9 over eight, mass attach 6; test_fetcher's own guests (BTFGEN_LIVE_FETCHER_ALL=1 only) 5-12.
LONGEST_FIRST = (
    "tests/live_kernel/test_kernel_module_fetcher.py",
    "tests/live_kernel/test_fetcher.py",
    "tests/live_kernel/test_mass_attach.py",
    "tests/live_kernel/test_summary_kernel.py",
    "tests/live_kernel/test_trace_tool.py",
    "tests/live_kernel/test_typed_live.py",
    "tests/live_kernel/test_trace_stack.py",
    "tests/live_kernel/test_trace_user_sizes.py",
    "tests/live_kernel/test_generated.py",
)


def pytest_collection_modifyitems(items) -> None:
    """LONGEST_FIRST's files, then the other guests' (each a boot or more: left in the middle
    they were stolen last, the run's tail of 2026-11-29), then the rest, each in its order."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def order(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank) + (not path.startswith("tests/live_kernel/")))

    items.sort(key=order)


def pytest_runtest_logreport(report) -> None:
    for name, value in report.user_properties:
        if name == _ROW:
            key, *counts = value
            _rows[key] = tuple(counts)


def pytest_terminal_summary(terminalreporter) -> None:
    if not _rows:
        return
    tr = terminalreporter
    tr.section("btfgen conformance: placement vs compilers")
    tr.write_line(f"{'arch, ctx':<24} {'functions':>9} {'values':>7} {'agreed':>7} "
                  f"{'unavail.':>8} {'disagree':>8}")
    for arch, (f, v, a, u, d) in sorted(_rows.items()):
        tr.write_line(f"{arch:<24} {f:>9} {v:>7} {a:>7} {u:>8} {d:>8}")
