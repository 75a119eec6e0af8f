"""The exports of a real recording (`btfgen trace --record` of calls.c through uprobes) loaded
by speedscope (its npm package, served on loopback) in headless Chromium: the frames it shows
are read from its Sandwich view's table, which is in the page (the flame graphs are canvases).

Needs what .ci/install installs: Debian's `chromium`, and speedscope from npm in the test cache
(BTFGEN_SPEEDSCOPE: its dist/release directory). Under CI a missing one fails the test.

BTFGEN_EXPORT_SCREENSHOTS=DIR also writes the screenshots docs/decode.md shows (each of
speedscope's three views) into DIR.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import live_harness as harness
import pytest

SPEEDSCOPE_VERSION = "1.25.0"  # .ci/install's
CACHE = Path(os.environ.get("BTFGEN_TEST_CACHE", Path.home() / ".cache" / "btfgen-tests"))
SPEEDSCOPE = Path(os.environ.get("BTFGEN_SPEEDSCOPE", CACHE / f"speedscope-{SPEEDSCOPE_VERSION}"
                                 / "node_modules" / "speedscope" / "dist" / "release"))
ROOT = harness.HERE.parent.parent
BTFGEN = {"cwd": str(ROOT)}


def _require_browser() -> str:
    chromium = shutil.which("chromium")
    missing = []
    if chromium is None:
        missing.append("Debian's chromium package")
    if not (SPEEDSCOPE / "index.html").is_file():
        missing.append(f"speedscope {SPEEDSCOPE_VERSION} at {SPEEDSCOPE}")
    if missing:
        reason = f"{' and '.join(missing)} not installed (bash .ci/install installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return chromium


class _Rows(html.parser.HTMLParser):
    """The text of each table row's cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag == "td" and self.rows:
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


class _Site:
    """speedscope and the exports, served on loopback."""

    def __init__(self, root: Path) -> None:
        shutil.copytree(SPEEDSCOPE, root)
        self.root = root
        handler = functools.partial(_Quiet, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def url(self, name: str, view: str) -> str:
        profile = urllib.parse.quote(self.base + name, safe="")
        return f"{self.base}index.html#profileURL={profile}&view={view}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _chromium(chromium: str, url: str, *what: str) -> subprocess.CompletedProcess:
    # No sandbox: the test runs as root (uprobes), which Chromium's sandbox refuses.
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--window-size=1000,420", "--virtual-time-budget=15000", *what, url],
                          capture_output=True, text=True, timeout=180)


def sandwich(chromium: str, site: _Site, name: str) -> dict[str, tuple[str, str]]:
    """The frames speedscope shows for the export `name` (its first profile): name -> (total,
    self), from its Sandwich view's table."""
    dom = _chromium(chromium, site.url(name, "sandwich"), "--dump-dom").stdout
    rows = _Rows()
    rows.feed(dom)
    # The Sandwich table's rows: total, self, name (the profile picker's rows hold no "%").
    frames = {r[2]: (r[0], r[1]) for r in rows.rows if len(r) == 3 and "%" in r[0]}
    assert frames, f"speedscope loaded no frames of {name}: {dom[:2000]}"
    return frames


def _ns(text: str) -> int:
    """A folded weight as speedscope shows it: `249,218 (100%)`."""
    return int(text.split(" ")[0].replace(",", ""))


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    harness.require_live()
    tmp = tmp_path_factory.mktemp("export")
    exe = tmp / "calls"
    harness.run(["gcc", "-O2", "-g", "-pthread", str(harness.HERE / "calls.c"), "-o", str(exe)],
                "compiling calls.c")
    rec = tmp / "calls.btfrec"
    subprocess.run([sys.executable, "-m", "btfgen", "trace", "--record", str(rec), str(exe),
                    "outer", "middle", "leaf"], check=True, capture_output=True, timeout=300,
                   **BTFGEN)
    return rec


def _export(rec: Path, dest: Path, *options: str) -> Path:
    out = subprocess.run([sys.executable, "-m", "btfgen", "decode", "-q", *options, str(rec)],
                         check=True, capture_output=True, text=True, timeout=300, **BTFGEN)
    dest.write_text(out.stdout)
    return dest


def test_speedscope_loads_the_exports_in_chromium(recording, tmp_path):
    chromium = _require_browser()
    site = _Site(tmp_path / "site")
    try:
        _export(recording, site.root / "calls.json", "--format", "chrome", "--no-args")
        _export(recording, site.root / "calls-args.json", "--format", "chrome")
        _export(recording, site.root / "calls.folded", "--format", "folded")
        lines = [json.loads(x) for x in subprocess.run(
            [sys.executable, "-m", "btfgen", "decode", "--format", "jsonl", str(recording)],
            check=True, capture_output=True, text=True, **BTFGEN).stdout.splitlines()]
        threads = list(dict.fromkeys(x["tid"] for x in lines))
        assert len(threads) == 2

        # Without args, a frame a function: 3 frames, whatever the calls were made with.
        assert sorted(sandwich(chromium, site, "calls.json")) == ["leaf", "middle", "outer"]

        # With args, speedscope names a frame by its name and args: leaf's three arguments make
        # three frames (why docs/decode.md sends speedscope the export without args).
        with_args = sandwich(chromium, site, "calls-args.json")
        leaves = sorted(n for n in with_args if n.startswith("leaf "))
        assert [json.loads(n[len("leaf "):])["args"] for n in leaves] == \
            [{"x": 0}, {"x": 1}, {"x": 2}]

        # Folded: both threads' roots, and each function's time as the recording has it.
        folded = sandwich(chromium, site, "calls.folded")
        comm = lines[0]["comm"]
        assert sorted(folded) == sorted(["leaf", "middle", "outer"] +
                                        [f"{comm} [{tid}]" for tid in threads])
        took: dict[str, int] = {}
        opened: dict[int, list] = {}
        for x in lines:
            if x["kind"] == "entry":
                opened.setdefault(x["tid"], []).append(x["timestamp"])
            else:
                took[x["function"]] = took.get(x["function"], 0) + x["timestamp"] - \
                    opened[x["tid"]].pop()
        assert _ns(folded["outer"][0]) == took["outer"]
        assert _ns(folded["leaf"][1]) == took["leaf"]  # leaf's self time: all of it

        shots = os.environ.get("BTFGEN_EXPORT_SCREENSHOTS")
        if shots:
            for name, view, png in (("calls.json", "time-ordered", "speedscope-time-order.png"),
                                    ("calls.folded", "left-heavy", "speedscope-left-heavy.png"),
                                    ("calls.json", "sandwich", "speedscope-sandwich.png")):
                _chromium(chromium, site.url(name, view),
                          f"--screenshot={Path(shots).resolve() / png}")
    finally:
        site.close()
