"""The live tests fetch from the Debian archive this machine's apt already uses."""

from __future__ import annotations

import pytest

from . import debian


def _etc(tmp_path, monkeypatch, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setenv("BTFGEN_LIVE_APT_ETC", str(tmp_path))
    monkeypatch.delenv("BTFGEN_LIVE_MIRROR", raising=False)


def test_one_line_sources(tmp_path, monkeypatch):
    _etc(tmp_path, monkeypatch, {"sources.list": (
        "# deb http://commented.example/debian bookworm main\n"
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main\n")})
    assert debian.mirror() == "http://mirror.example/debian"


def test_deb822_sources_after_other_repositories(tmp_path, monkeypatch):
    _etc(tmp_path, monkeypatch, {
        "sources.list": "deb https://vendor.example/apt stable main\n",
        "sources.list.d/debian.sources": (
            "Types: deb\n# http://snapshot.example/archive/debian/20250520T000000Z\n"
            "URIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n")})
    assert debian.mirror() == "http://mirror.example/debian"


def test_override_and_none(tmp_path, monkeypatch):
    _etc(tmp_path, monkeypatch, {"sources.list": "deb http://archive.example/ubuntu noble main\n"})
    with pytest.raises(debian.PackageError, match="BTFGEN_LIVE_MIRROR"):
        debian.mirror()
    monkeypatch.setenv("BTFGEN_LIVE_MIRROR", "http://chosen.example/debian")
    assert debian.mirror() == "http://chosen.example/debian"
