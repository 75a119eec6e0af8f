"""Debian packages of any suite and architecture through a private apt configuration.

The machine's own apt sources, state and dpkg database are never touched: each (suite, arch) gets
its own sources.list, index directory, archive cache and an empty dpkg status file, and every apt
command names them with `-o`. Packages are fetched by `apt-get download`, which checks them against
the signed index, and unpacked with `dpkg-deb`. Indexes are refreshed once a day (unstable moves);
packages are cached by file name, which carries the version.

The mirror is the one this machine's apt already uses (BTFGEN_LIVE_MIRROR overrides it). It may
be a snapshot whose Release files are past their Valid-Until date: the kernels are pinned to exact
versions (targets.py) and apt still checks the Release signature and every package's hash, so the
date is not checked.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import cache

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
INDEX_MAX_AGE = float(os.environ.get("BTFGEN_LIVE_INDEX_MAX_AGE", 24 * 3600))


class PackageError(RuntimeError):
    """A package or index cannot be had (no network, no such package, no mirror): tests skip on
    it, or fail with CI=true."""


def _source_uris() -> list[str]:
    """The URIs of the machine's Debian sources (one-line and deb822 forms), in apt's order."""
    etc = Path(os.environ.get("BTFGEN_LIVE_APT_ETC", "/etc/apt"))
    files = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list")),
             *sorted((etc / "sources.list.d").glob("*.sources"))]
    uris = []
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if f.suffix == ".sources":
                if line.lower().startswith("uris:"):
                    uris += line.split(":", 1)[1].split()
            elif line.startswith("deb "):
                # deb [options] URI suite component...
                words = re.sub(r"\[[^]]*\]", " ", line[4:]).split()
                if words:
                    uris.append(words[0])
    return uris


def mirror() -> str:
    """The Debian archive to fetch from: BTFGEN_LIVE_MIRROR, else the first source of this
    machine whose path is the main archive (…/debian, not …/debian-security)."""
    override = os.environ.get("BTFGEN_LIVE_MIRROR")
    if override:
        return override
    for uri in _source_uris():
        if re.match(r"^https?://", uri) and uri.rstrip("/").endswith("/debian"):
            return uri.rstrip("/")
    raise PackageError("this machine's apt sources name no Debian archive (…/debian); "
                       "set BTFGEN_LIVE_MIRROR")


@contextmanager
def _locked(lock: Path):
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if proc.returncode:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PackageError(f"{what}: {' / '.join(tail) or f'exit {proc.returncode}'}")
    return proc.stdout


@dataclass(frozen=True)
class Apt:
    suite: str  # "unstable", "bookworm", ...
    arch: str  # Debian architecture: amd64, arm64, armhf, i386, ppc64el, s390x, riscv64

    @property
    def root(self) -> Path:
        return cache.ROOT / "apt" / f"{self.suite}-{self.arch}"

    def _options(self) -> list[str]:
        r = self.root
        return [
            f"-oDir::Etc::sourcelist={r / 'sources.list'}",
            f"-oDir::Etc::sourceparts={r / 'empty'}",
            f"-oDir::Etc::preferences={r / 'empty' / 'none'}",
            f"-oDir::Etc::preferencesparts={r / 'empty'}",
            f"-oDir::State::Lists={r / 'lists'}",
            f"-oDir::State::status={r / 'status'}",
            f"-oDir::Cache={r / 'cache'}",
            f"-oAPT::Architecture={self.arch}",
            f"-oAPT::Architectures::={self.arch}",
            "-oAcquire::Languages=none",
            # A snapshot mirror's Release files may be past Valid-Until (see the module's doc).
            "-oAcquire::Check-Valid-Until=false",
            # Downloads land in our cache, which the unprivileged _apt user may not reach.
            "-oAPT::Sandbox::User=root",
            "-oDebug::NoLocking=1",
        ]

    def _prepare(self) -> None:
        r = self.root
        for d in ("empty", "lists/partial", "cache/archives/partial", "debs"):
            (r / d).mkdir(parents=True, exist_ok=True)
        (r / "status").touch()
        (r / "sources.list").write_text(
            f"deb [signed-by={KEYRING}] {mirror()} {self.suite} main\n"
        )

    def update(self) -> None:
        """Fetch the index unless a fresh one is cached."""
        stamp = self.root / "updated"
        with _locked(self.root / "lock"):
            if stamp.exists() and time.time() - stamp.stat().st_mtime < INDEX_MAX_AGE:
                return
            self._prepare()
            _run(["apt-get", *self._options(), "-qq", "update"], f"apt {self.suite}/{self.arch}")
            if not any((self.root / "lists").glob("*_Packages*")):
                raise PackageError(f"apt {self.suite}/{self.arch}: no package index fetched")
            stamp.touch()

    def show(self, package: str, version: str | None = None) -> dict[str, str] | None:
        """The control fields of `version` (default: the candidate), or None when the suite has
        no such package or version."""
        self.update()
        proc = subprocess.run(
            ["apt-cache", *self._options(), "show", "--no-all-versions",
             f"{package}={version}" if version else package],
            capture_output=True,
            text=True,
        )
        if proc.returncode or not proc.stdout.strip():
            return None
        fields: dict[str, str] = {}
        key = ""
        for line in proc.stdout.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        # A purely virtual name yields a stanza without a Version.
        return fields if "Version" in fields else None

    def download(self, package: str, version: str | None = None) -> Path:
        """The .deb of `version` (default: the candidate), fetched once."""
        fields = self.show(package, version)
        if fields is None:
            what = f"{package} {version}" if version else package
            raise PackageError(f"apt {self.suite}/{self.arch}: no package {what}")
        dest = self.root / "debs" / Path(fields["Filename"]).name
        if dest.exists():
            return dest
        with _locked(self.root / "lock"):
            if not dest.exists():
                _run(
                    ["apt-get", *self._options(), "-qq", "download",
                     f"{package}={fields['Version']}"],
                    f"apt {self.suite}/{self.arch}: download {package}",
                    cwd=dest.parent,
                )
                # apt-get download names the file itself (epochs as %3a); find it by version.
                got = _find_download(dest.parent, package, fields["Version"], self.arch)
                got.rename(dest)
        return dest

    def depends(self, package: str) -> list[str]:
        fields = self.show(package) or {}
        names = []
        for alt in fields.get("Depends", "").split(","):
            m = re.match(r"\s*([^\s(|]+)", alt)
            if m:
                names.append(m.group(1))
        return names


def _find_download(d: Path, package: str, version: str, arch: str) -> Path:
    quoted = version.replace(":", "%3a")
    for name in (f"{package}_{quoted}_{arch}.deb", f"{package}_{quoted}_all.deb"):
        if (d / name).exists():
            return d / name
    raise PackageError(f"apt-get download {package}: no {package}_{quoted}_*.deb in {d}")


def members(deb: Path) -> list[str]:
    # Listing decompresses the whole archive (30 s for a -dbg package); a package's file name
    # carries its version and apt checked its hash, so its listing is kept beside the download.
    st = deb.stat()
    kept = cache.ROOT / "listings" / f"{deb.name}.{st.st_size}.txt"
    if kept.exists():
        listing = kept.read_text(encoding="utf-8")
    else:
        listing = _run(["dpkg-deb", "-c", str(deb)], f"dpkg-deb -c {deb.name}")
        cache.write_atomic(kept, listing.encode("utf-8"))
    names = []
    for line in listing.splitlines():
        # "-rw-r--r-- root/root 123 2026-10-28 15:01 ./boot/vmlinuz-..." (links add " -> x")
        parts = line.split(None, 5)
        if len(parts) == 6 and not parts[0].startswith("d"):
            names.append(parts[5].split(" -> ")[0])
    return names


def extract(deb: Path, pattern: str) -> list[Path]:
    """Unpack the members whose path matches `pattern` (a regex) once; return their paths."""
    dest = cache.ROOT / "unpacked" / deb.stem
    wanted = [m for m in members(deb) if re.search(pattern, m)]
    if not wanted:
        raise PackageError(f"{deb.name}: no member matches {pattern}")
    done = dest / ".unpacked"  # the members unpacked whole, one per line
    if done.exists() and set(wanted) <= set(done.read_text().splitlines()):
        return [dest / m for m in wanted]
    # Another test worker may be unpacking the same package: a member that exists may still be
    # half-written until it is listed as done.
    with _locked(cache.ROOT / "unpacked" / f"{deb.stem}.lock"):
        have = set(done.read_text().splitlines()) if done.exists() else set()
        missing = [m for m in wanted if m not in have]
        if missing:
            dest.mkdir(parents=True, exist_ok=True)
            tar = subprocess.Popen(
                ["tar", "-x", "-C", str(dest), *missing],
                stdin=subprocess.PIPE,
            )
            feed = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=tar.stdin)
            tar.stdin.close()
            if tar.wait() or feed.returncode:
                raise PackageError(f"{deb.name}: unpacking {', '.join(missing)} failed")
            cache.write_atomic(done, "".join(f"{m}\n" for m in sorted(have | set(missing)))
                               .encode())
    return [dest / m for m in wanted]
