import sys
from pathlib import Path

_HERE = Path(__file__).parent
# The libbpf loader lives with the example tool; the harness beside the tests.
for p in (_HERE, _HERE.parent.parent / "examples"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
