import sys
from pathlib import Path

# tests/toolchains.py (shared) and this directory's helpers, importable by plain name.
for d in (Path(__file__).resolve().parent.parent, Path(__file__).resolve().parent):
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))


def pytest_configure(config):
    config.addinivalue_line("markers", "live: needs Debian kernel packages (network once, cached)")
