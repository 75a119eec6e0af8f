"""The examples in docs/python-api.md run, and print what the page says."""

from __future__ import annotations

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def test_python_api_examples():
    result = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS,
                              verbose=False, report=True)
    assert result.attempted >= 10, "the front door's example is gone from the page"
    assert result.failed == 0
