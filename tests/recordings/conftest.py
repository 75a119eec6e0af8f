import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
# synth.py, datasets.py and the old versions' writers beside the tests.
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))


@pytest.fixture(scope="module")
def numpy_s_own_way():
    """numpy's grouping its own way whatever a span holds: it hands a span of fewer than
    grouping.SMALL_SPAN records to the standard library's (test_grouping's small-span test).
    For test modules that check numpy's grouping itself (`usefixtures`)."""
    from btfgen.recordings import grouping

    was, grouping.SMALL_SPAN = grouping.SMALL_SPAN, 0
    yield
    grouping.SMALL_SPAN = was
