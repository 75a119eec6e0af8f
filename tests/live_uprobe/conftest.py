import sys
from pathlib import Path

_HERE = Path(__file__).parent
# The harness and expected values beside the tests.
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))
