import sys
from pathlib import Path

# tests/toolchains.py (shared), importable by plain name.
_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
