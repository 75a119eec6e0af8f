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
