"""--stack on user functions, live with uprobes (issue 48, item 1): a call's whole user stack
under its entry line, unwound offline from the objects' .eh_frame through code built without
frame pointers (gcc -O2, Debian's libc), each frame `func+0xoff (object)` with the offset that
objdump shows is just after the call; in --json; a thread's stack; a stack deeper than the
copied slice said to be likely cut; recorded and decoded after the process exited, and after
its object moved or was rebuilt; bad input in one line, exit 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import live_needs
import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, LC_ALL="C", PYTHONPATH=str(ROOT))
TOOL = [sys.executable, "-m", "btfgen", "trace"]

TARGET = r"""
#include <pthread.h>
#include <string.h>
#include <unistd.h>
volatile long sink;
long __attribute__((noipa)) leaf(long i) { return i * 3; }
long __attribute__((noipa)) middle(long i) { sink = leaf(i + 1); return sink + 1; }
long __attribute__((noipa)) outer(long i) { long r = middle(i * 2); sink = r; return r + 2; }
/* frames of 1 KiB each: ten of them are past the 4 KiB copied */
long __attribute__((noipa)) deep(long n)
{
	char pad[1024];
	memset(pad, (int)n, sizeof(pad));
	if (n == 0)
		return leaf(pad[7]);
	return deep(n - 1) + pad[n];
}
static void *worker(void *arg) { sink = middle((long)arg); return 0; }
long __attribute__((noipa)) failing(long i) { return -i; }
int main(int argc, char **argv)
{
	pthread_t t;

	sink = outer(1);
	sink = failing(1) + failing(0);
	pthread_create(&t, 0, worker, (void *)5L);
	pthread_join(t, 0);
	sink = deep(10);
	/* the reader reads this process's maps at its first stack, before it is gone: 0.3 s was
	 * once too short on a loaded machine (unnamed frames); docs/trace.md, "maps" */
	sleep(2);
	return 0;
}
"""


_WHY_NOT = live_needs.why_not(tools=("gcc", "objdump"), machine="x86_64")
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=f"live: {_WHY_NOT}")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return live_needs.built(tmp_path_factory, "stack", TARGET)


def _run(args, status: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=ENV, cwd=ROOT)
    assert proc.returncode == status, proc.stderr
    return proc


def _calls_before(exe: Path) -> dict[tuple[str, int], str]:
    """(function, offset of the instruction after a call) -> the function called, by objdump."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(exe)], check=True,
                         capture_output=True, text=True).stdout
    found, func, start, prev = {}, None, 0, None
    for line in out.splitlines():
        m = re.match(r"([0-9a-f]+) <([^>]+)>:", line)
        if m:
            func, start, prev = m.group(2), int(m.group(1), 16), None
            continue
        m = re.match(r"\s+([0-9a-f]+):\s+(.*)", line)
        if not m or func is None:
            continue
        at = int(m.group(1), 16)
        if prev is not None:
            found[(func, at - start)] = prev
        call = re.match(r"call\s+[0-9a-f]+ <([^>@+]+)", m.group(2))
        prev = call.group(1) if call else ""
    return found


def _blocks(out: str) -> dict[str, list[list[str]]]:
    """Each entry line's frames (the indented lines under it), by the entry line."""
    blocks: dict[str, list[list[str]]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("    "):
            current.append(line.strip())
        elif "(" in line and " -> " not in line:
            current = []
            blocks.setdefault(line, []).append(current)
    return blocks


FRAME = re.compile(r"(\S+)\+0x([0-9a-f]+) \((\S+)\)")


def test_whole_user_stacks_unwound_from_eh_frame(target):
    out = _run([*TOOL, "--stack", str(target), "leaf", "middle"]).stdout
    blocks = _blocks(out)
    calls = _calls_before(target)
    [main_leaf] = blocks["leaf(i=3)"]
    frames = [FRAME.fullmatch(f).groups() for f in main_leaf]
    assert [f[0] for f in frames[:4]] == ["leaf", "middle", "outer", "main"]
    assert frames[0][1] == "0" and {f[2] for f in frames[:4]} == {"target"}
    # each caller's offset is just after its call of the frame below it
    for (callee, _, _), (caller, off, _) in zip(frames[:3], frames[1:4]):
        assert calls[(caller, int(off, 16))] == callee, (caller, off)
    # through libc (no frame pointers) to the program's entry: the whole stack
    assert frames[-1][0] == "_start" and frames[-1][2] == "target"
    assert any(f[2] == "libc.so.6" for f in frames)
    assert not any("likely cut" in f for f in main_leaf)
    # the thread's middle(5): up to libc's thread start, never cut
    [thread] = blocks["middle(i=5)"]
    names = [FRAME.fullmatch(f).group(1) for f in thread if FRAME.fullmatch(f)]
    assert names[:2] == ["middle", "worker"] and "start_thread" in names, thread
    assert not any("likely cut" in f for f in thread), thread


def test_deeper_than_the_copy_is_said_cut(target):
    out = _run([*TOOL, "--stack", str(target), "leaf"]).stdout
    [deep_leaf] = _blocks(out)["leaf(i=0)"]
    names = [FRAME.fullmatch(f).group(1) for f in deep_leaf[:-1]]
    assert names[0] == "leaf" and set(names[1:]) == {"deep"} and len(names) <= 5
    assert deep_leaf[-1] == "... likely cut: the stack copied (4096 bytes) ends before the " \
        "next frame"


def test_json_stack(target):
    out = _run([*TOOL, "--stack", "--json", str(target), "outer"]).stdout
    [entry] = [json.loads(line) for line in out.splitlines() if '"entry"' in line]
    stack = entry["stack"]
    assert set(stack) == {"ustack", "ustack_cut"} and stack["ustack_cut"] is None
    first, second = stack["ustack"][:2]
    assert (first["symbol"], first["offset"], first["object"]) == ("outer", 0, str(target))
    assert second["symbol"] == "main" and second["object"] == str(target)
    assert all(isinstance(f["ip"], int) for f in stack["ustack"])


@pytest.mark.parametrize("args, said", [
    (["--stack=heap"], "--stack=heap: 'heap' is not one of kernel, user (a comma list)"),
    (["--stack=kernel"], "--stack=kernel: a user function's call has no kernel stack"),
    (["--stack", "--count"], "--stack shows each call's stack; --count and --latency sum"),
])
def test_bad_stack_options_one_line(target, args, said):
    proc = _run([*TOOL, *args, str(target), "leaf"], status=2)
    assert said in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


DECODE = [sys.executable, "-m", "btfgen", "decode"]


def _frames_by_entry(out: str) -> dict[str, list[list[str]]]:
    """_blocks with each frame's address cut out (another run, other addresses)."""
    return {line: [[re.sub(r"0x[0-9a-f]{6,}", "ADDR", f) for f in b] for b in blocks]
            for line, blocks in _blocks(out).items()}


def test_recorded_stacks_decoded_after_the_process_exited(target, tmp_path):
    # recorded through a directory built with --stack (--run --record), decoded once the
    # traced process is gone: the frames the live tracer prints, from the recording's notes
    rec = tmp_path / "r.btfrec"
    _run([*TOOL, "--stack", "--build", str(tmp_path / "d"), str(target), "leaf", "middle"])
    _run([*TOOL, "--run", str(tmp_path / "d"), "--record", str(rec), "--", str(target)])
    decoded = _run([*DECODE, str(rec)]).stdout
    [main_leaf] = _blocks(decoded)["leaf(i=3)"]
    names = [FRAME.fullmatch(f).group(1) for f in main_leaf]
    assert names[:4] == ["leaf", "middle", "outer", "main"] and names[-1] == "_start"
    assert not any("likely cut" in f for f in main_leaf), main_leaf
    [thread] = _blocks(decoded)["middle(i=5)"]
    assert [FRAME.fullmatch(f).group(1) for f in thread[:2]] == ["middle", "worker"]
    live = _run([*TOOL, "--stack", str(target), "leaf", "middle"]).stdout
    assert _frames_by_entry(decoded) == _frames_by_entry(live)
    lines = _run([*DECODE, "--format", "jsonl", str(rec)]).stdout.splitlines()
    [entry] = [json.loads(x) for x in lines if '"args": {"i": 3}' in x and '"entry"' in x]
    frames = entry["stack"]["ustack"]
    assert [f["symbol"] for f in frames[:4]] == ["leaf", "middle", "outer", "main"]
    assert frames[0]["object"] == str(target) and entry["stack"]["ustack_cut"] is None
    # folded stacks: the recorded callers at the root, below the traced calls
    folded = _run([*DECODE, "--format", "folded", str(rec)]).stdout.splitlines()
    assert any(re.fullmatch(r"target \[\d+\];_start;(\S+;)*main;outer;middle;leaf \d+", x)
               for x in folded), folded
    assert any(re.fullmatch(r"target \[\d+\];(\S+;)*start_thread;worker;middle \d+", x)
               for x in folded), folded


def test_recorded_stacks_as_dataset_columns(target, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    rec = tmp_path / "r.btfrec"
    _run([*TOOL, "--stack", "--record", str(rec), str(target), "leaf"])
    _run([*DECODE, "--format", "parquet", "-o", str(tmp_path / "ds"), str(rec)])
    [leaf_file] = (tmp_path / "ds").rglob("*.parquet")
    rows = pq.read_table(leaf_file).to_pylist()
    entries = {r["arg_i"]: r for r in rows if r["kind"] == "entry"}
    main_leaf = entries[3]
    assert [FRAME.fullmatch(f).group(1) for f in main_leaf["stack"][:4]] == \
        ["leaf", "middle", "outer", "main"]
    assert len(main_leaf["stack_ip"]) == len(main_leaf["stack"]) and \
        all(ip > 0 for ip in main_leaf["stack_ip"]) and main_leaf["stack_cut"] is None
    assert entries[0]["stack_cut"] == "the stack copied (4096 bytes) ends before the next frame"
    assert all(r["stack"] is None and r["stack_ip"] is None for r in rows if r["kind"] == "exit")


def test_decoded_after_the_object_moved_or_was_rebuilt(target, tmp_path):
    exe = tmp_path / "prog"
    exe.write_bytes(target.read_bytes())
    exe.chmod(0o755)
    rec = tmp_path / "r.btfrec"
    _run([*TOOL, "--stack", "--record", str(rec), str(exe), "leaf"])
    exe.rename(tmp_path / "elsewhere")
    first = _run([*DECODE, str(rec)]).stdout
    said = f"{exe}: not found here (No such file or directory)"
    assert re.fullmatch(r"0x[0-9a-f]+ \(" + re.escape(said) + r"\)",
                        _blocks(first)["leaf(i=3)"][0][0]), first
    assert _blocks(first)["leaf(i=3)"][0][1] == f"... likely cut: {said}"
    # the same path, another build: never named by the other build's symbols
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-pthread", "-DOTHER",
                    str(target.with_name("target.c")), "-o", str(exe)], check=True)
    again = _run([*DECODE, "--format", "jsonl", str(rec)]).stdout.splitlines()
    [entry] = [json.loads(x) for x in again if '"args": {"i": 3}' in x and '"entry"' in x]
    [frame] = entry["stack"]["ustack"]
    assert frame["symbol"] is None and frame["object"] is None
    assert re.fullmatch(re.escape(str(exe)) + r": another build here \(build id [0-9a-f]+, "
                        r"recorded [0-9a-f]+\)", frame["why"]), frame


def test_a_failed_calls_stack_under_errors(target):
    # the failing call's line with the stack taken at its entry; the call that did not fail
    # (failing(0) -> 0) is not shown, nor its stack
    out = _run([*TOOL, "--stack", "--errors=negative", str(target), "failing"]).stdout
    lines = out.splitlines()
    assert re.fullmatch(r"failing\(i=1\) -> -1 \([0-9.]+ us\)", lines[0]), out
    names = [FRAME.fullmatch(f.strip()).group(1) for f in lines[1:]]
    assert names[:2] == ["failing", "main"] and names[-1] == "_start", out
    out = _run([*TOOL, "--stack", "--errors=negative", "--json", str(target), "failing"]).stdout
    [error] = [json.loads(line) for line in out.splitlines()]
    assert error["kind"] == "error" and error["args"] == {"i": 1}
    assert [f["symbol"] for f in error["stack"]["ustack"][:2]] == ["failing", "main"]
    assert error["stack"]["ustack_cut"] is None
