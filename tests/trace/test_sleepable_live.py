"""User memory not yet paged in, read on the first call (issue 48, item 4): a function is called
with strings in file-backed pages mapped and never touched before the call (the issue's string
literal in a page not yet resident), one at the start of a page, one running from one such page
into the next (two mappings of two files: the kernel maps no page of one around a fault in the
other). Where the kernel takes sleepable uprobe programs, in each attach mode that takes them,
both are read on that first call; with --no-sleepable (the programs of before) both are faults,
said as such: what the sleepable programs are for."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import live_needs
import pytest

from btfgen.abi.arches import host_bpf_syscall
from btfgen.probe import features

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, LC_ALL="C", PYTHONPATH=str(ROOT))
TOOL = [sys.executable, "-m", "btfgen", "trace"]

TARGET = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

long __attribute__((noipa)) cold(const char *s) { return (long)strlen(s); }

/* One page of `path` mapped at `at` (anywhere: 0), not touched. */
static char *map(const char *path, void *at)
{
	int fd = open(path, O_RDONLY);
	char *p;

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	p = mmap(at, 4096, PROT_READ, MAP_PRIVATE | (at ? MAP_FIXED : 0), fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	close(fd);
	return p;
}

int main(int argc, char **argv)
{
	char *base;

	if (argc != 4)
		return 2;
	printf("first %ld\n", cold(map(argv[1], 0)));
	/* two pages reserved, then each its own file's: "cros" ends the first, "sing" starts the
	 * second */
	base = mmap(0, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	map(argv[2], base);
	map(argv[3], base + 4096);
	printf("crossing %ld\n", cold(base + 4092));
	return 0;
}
"""
MODES = {"session": "one uprobe.session link", "multi": "uprobe_multi links",
         "single": "one uprobe and uretprobe per function"}


_WHY_NOT = live_needs.why_not(linux=None)
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[Path, list[str]]:
    """(the trace directory of the target's cold(), the target's arguments: its three files)"""
    d = tmp_path_factory.mktemp("sleepable")
    (d / "target.c").write_text(TARGET)
    subprocess.run(["gcc", "-O2", "-g", str(d / "target.c"), "-o", str(d / "target")],
                   check=True, capture_output=True)
    (d / "first").write_bytes(b"kestrel".ljust(4096, b"\0"))
    (d / "ends").write_bytes(b"x" * 4092 + b"cros")
    (d / "starts").write_bytes(b"sing".ljust(4096, b"\0"))
    proc = subprocess.run([*TOOL, "--build", str(d / "dir"), str(d / "target"), "cold"],
                          capture_output=True, text=True, timeout=300, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return d / "dir", [str(d / "first"), str(d / "ends"), str(d / "starts")]


def _calls(traced, *options: str) -> tuple[list[str], str]:
    directory, files = traced
    proc = subprocess.run([*TOOL, "--run", str(directory), *options, "--", *files],
                          capture_output=True, text=True, timeout=300, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "first 7\ncrossing 8\n" in proc.stdout, proc.stdout  # the program's own view
    return [re.sub(r" \(\d+\.\d{3} us\)$", "", x) for x in proc.stdout.splitlines()
            if x.startswith("cold")], proc.stderr


def _mode_missing(kind: str) -> str | None:
    number = host_bpf_syscall()
    if kind == "session":
        missing = features.session_links(number, kernel=False).why
    elif kind == "multi":
        missing = features.uprobe_multi_links(number).why
    else:
        missing = None
    return missing or features.sleepable_uprobes(number, kind).why


@pytest.mark.parametrize("kind", list(MODES))
def test_strings_in_pages_never_touched_are_read_on_the_first_call(traced, kind):
    if why := _mode_missing(kind):
        pytest.skip(f"{kind}: {why}")
    calls, err = _calls(traced, "--attach", kind)
    assert f"attaching {MODES[kind]}, sleepable (as asked)" in err, err
    assert calls == ['cold(s="kestrel")', "cold -> 7", 'cold(s="crossing")', "cold -> 8"], calls


def test_without_sleepable_programs_they_are_faults_as_before(traced):
    calls, err = _calls(traced, "--no-sleepable")
    assert ", sleepable" not in err, err
    assert calls == ["cold(s=<reading through s faulted (user memory)>)", "cold -> 7",
                     "cold(s=<reading through s faulted (user memory)>)", "cold -> 8"], calls


def test_a_filter_reads_the_string_too(traced, tmp_path):
    if why := features.sleepable_uprobes(host_bpf_syscall(), "single").why:
        pytest.skip(why)
    directory, files = traced
    filtered = tmp_path / "dir"
    proc = subprocess.run([*TOOL, "--build", str(filtered), "--filter", 'cold: s == "crossing"',
                           str(directory.parent / "target"), "cold"], capture_output=True,
                          text=True, timeout=300, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    calls, _ = _calls((filtered, files), "--attach", "single")
    assert calls == ['cold(s="crossing")', "cold -> 8"], calls
    # without: the string faults, and the filter lets nothing through
    assert _calls((filtered, files), "--attach", "single", "--no-sleepable")[0] == []
