import sys
from pathlib import Path

_HERE = Path(__file__).parent
# ringprog.py beside the tests; synth.py (records and recordings made up) in tests/recordings.
for _d in (_HERE, _HERE.parent / "recordings"):
    if str(_d) not in sys.path:
        sys.path.insert(0, str(_d))
