import sys
from pathlib import Path

# tests/ holds the shared toolchain table; this directory the corpus and comparator.
for p in (Path(__file__).parent, Path(__file__).parent.parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
