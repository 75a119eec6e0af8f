import sys
from pathlib import Path

_HERE = Path(__file__).parent
# synth.py, datasets.py and the old versions' writers beside the tests.
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))
