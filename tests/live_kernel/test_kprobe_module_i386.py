"""btfgen's kernel C over a kprobe handler's `struct pt_regs` on x86-32 (examples/kprobe), where
fprobe does not exist (Debian 12's 6.1 686-pae; x86-32 has no ftrace_regs argument access).

The module is built from the header generated with `--ctx pt_regs` for the exact kernel the
bookworm-i386 guest boots (kbuild.py: its gcc-12 and headers, -Werror), loaded with a
kretprobe on each of a list of functions whose `-mregparm=3` placement splits their arguments
between registers (eax, edx, ecx) and the stack, 64-bit `loff_t`s among them (in a register
pair where two registers are left, else whole on the stack). The guest loader (empty bundle:
only the scenario's system calls) calls them with distinctive values while `btfgen trace
--kernel` (built on the host for the same BTF, run by Debian's python3 in the guest, one kprobe
and kretprobe per function) records the same process; the module's records are read by the
fprobe example's reader. On the host both recordings are decoded by `btfgen decode`, and
(a) every value the workload passed (and every return it saw) is in the module's records,
exactly; (b) every call of the loader's thread to the listed functions is in both, in the same
order, with the same arguments and returns, value for value. The number of values compared and
how many of them were passed on the stack are printed (pytest -s) and asserted.
"""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import btfgen
from btfgen.btf.reader import open_btf
from btfgen.layout_json import to_json

from . import build, kbuild, modules, printed, python_guest, scenario
from .conftest import kernel_with_python, unavailable

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kprobe"
COMMON = ROOT / "examples" / "common"
READER = ROOT / "examples" / "fprobe" / "btfgen_fprobe_record.py"
GUEST = "bookworm-i386"
EMPTY_BUNDLE = b"BTFGBNDL" + bytes(16)  # no maps, no programs: the loader only makes the calls
MMAP = -1  # expected: what the loader's mmap returned
FD_NONE = 0xFFFF_FFFF  # mmap's fd of -1, as ksys_mmap_pgoff's unsigned long


def expectations(pagesize: int) -> dict[str, tuple[dict[str, int], int]]:
    """function -> ({parameter: value the workload passed}, the value it returned). Where each
    value is on x86-32 (btfgen layout --arch i386 on 6.1's BTF) is in the comments."""
    addr = scenario.mmap_addr(4)
    pgoff = scenario.MMAP_OFFSET // pagesize
    falloc = {"mode": scenario.FALLOC_MODE, "offset": scenario.FALLOC_OFFSET,
              "len": scenario.FALLOC_LEN}
    seek = {"offset": scenario.SEEK_TO, "whence": 0}
    return {
        # (fd eax, mode edx, offset stack, len stack): ecx is left unused
        "ksys_fallocate": ({"fd": None, **falloc}, 0),
        # (file eax, mode edx, offset stack, len stack)
        "vfs_fallocate": (falloc, 0),
        "shmem_fallocate": (falloc, 0),
        # (file eax, offset edx:ecx, whence stack); not vfs_llseek, the same placement, which
        # 6.1's llseek system call has inlined (its f_op->llseek call is made from the syscall)
        "shmem_file_llseek": (seek, scenario.SEEK_TO),
        # (addr eax, len edx, prot ecx, flags stack, fd stack, pgoff stack)
        "ksys_mmap_pgoff": ({"addr": addr, "len": scenario.MMAP_LEN, "prot": scenario.MMAP_PROT,
                             "flags": scenario.MMAP_FLAGS, "fd": FD_NONE, "pgoff": pgoff}, MMAP),
        # (file eax, addr edx, len ecx, prot stack, flag stack, pgoff stack)
        "vm_mmap_pgoff": ({"addr": addr, "len": scenario.MMAP_LEN, "prot": scenario.MMAP_PROT,
                           "flag": scenario.MMAP_FLAGS, "pgoff": pgoff}, MMAP),
        # (file eax, addr edx, len ecx, prot, flags, pgoff, populate, uf on the stack)
        "do_mmap": ({"addr": addr, "len": scenario.MMAP_LEN, "prot": scenario.MMAP_PROT,
                     "flags": scenario.MMAP_FLAGS, "pgoff": pgoff}, MMAP),
        # registers only, beside them: (fd or path eax, user edx, group ecx), (ns eax, uid edx);
        # not vfs_fchown, which ksys_fchown has inlined
        "ksys_fchown": ({"user": scenario.UID, "group": scenario.GID}, 0),
        "chown_common": ({"user": scenario.UID, "group": scenario.GID}, 0),
        "make_kuid": ({"uid": scenario.UID}, scenario.UID),
        "make_kgid": ({"gid": scenario.GID}, scenario.GID),
    }


# Must be in the kernel's BTF and probed: the stack and register-pair cases.
REQUIRED = {"vfs_fallocate", "shmem_fallocate", "shmem_file_llseek", "do_mmap"}


def _stack_args(t, name: str) -> set[str]:
    """The arguments of `name` with a piece on the stack at entry (btfgen layout's)."""
    fn = to_json(t.arch_layout(name))["functions"][0]
    return {a["name"] for a in fn["args"] if any("stack" in p for p in a["pieces"])}


def _decode(path: Path) -> list[dict]:
    p = subprocess.run([sys.executable, "-m", "btfgen", "decode", "--format", "jsonl",
                        str(path)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "; 0 records lost" in p.stderr, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def _calls(events: list[dict], tids: set[int], names: set[str]) -> dict[str, list[dict]]:
    """The calls of the threads `tids` to `names`, each {"args", "ret"}, per function in order:
    an exit closes the innermost open entry of its function on its thread."""
    out: dict[str, list[dict]] = defaultdict(list)
    open_calls: dict[int, list[dict]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["timestamp"]):
        if e["tid"] not in tids or e["function"] not in names:
            continue
        stack = open_calls[e["tid"]]
        if e["kind"] == "entry":
            call = {"args": e["args"], "ret": None, "exited": False}
            stack.append((e["function"], call))
            out[e["function"]].append(call)
        elif e["kind"] == "exit":
            at = next((i for i in range(len(stack) - 1, -1, -1)
                       if stack[i][0] == e["function"]), None)
            assert at is not None, f"an exit of {e['function']} without its entry: {e}"
            stack[at][1]["ret"] = e.get("return")
            stack[at][1]["exited"] = True
            del stack[at:]
    return out


def _number(v):
    """A decoded value as a number where it is one: an int, a one-member struct's member."""
    if isinstance(v, dict) and len(v) == 1:
        return _number(next(iter(v.values())))
    if isinstance(v, dict) and "value" in v:  # an enum
        return v["value"]
    return v


def _recording(text: str, dest: Path) -> Path:
    dest.write_bytes(gzip.decompress(base64.b64decode("".join(text.split()))))
    return dest


def test_kprobe_module_decodes_the_x86_32_split(tmp_path):
    k, btf_path = kernel_with_python(GUEST)
    table = open_btf(str(btf_path))
    # Why a kprobe module here: the kernel has no fprobe at all.
    assert not table.find_funcs("register_fprobe"), "6.1 686-pae has fprobe after all?"
    t = btfgen.open(str(btf_path), arch="i386", ctx="pt_regs")
    wanted = expectations(4096)
    present = [f for f in wanted if table.find_funcs(f)]
    assert REQUIRED <= set(present), f"missing from the BTF: {REQUIRED - set(present)}"
    for f in present:  # the expectations name the kernel's own parameters
        params = {p.name for p in table.find_funcs(f)[0].proto.params}
        assert set(wanted[f][0]) <= params, (f, sorted(params))
    stack = {f: _stack_args(t, f) for f in present}
    assert all(stack[f] for f in REQUIRED - {"shmem_file_llseek"}) and \
        stack["shmem_file_llseek"] == {"whence"}, stack

    # The module: the generic decoder's table for these functions, built with -Werror.
    d = tmp_path / "trace"
    proc = subprocess.run(
        [sys.executable, "-m", "btfgen", "trace", "--kernel", "--btf", str(btf_path),
         "--arch", "i386", "--build", str(d), *present],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    files = btfgen.open(str(btf_path), arch="i386", ctx="pt_regs").generate(
        present, ("kernel", "python"))
    gen = d / "kgen"
    gen.mkdir()
    for n, text in files.items():
        (gen / n).write_text(text)
    shutil.copy(READER, d / "btfgen_fprobe_record.py")  # beside the trace's btfgen_probe/
    sources = modules.sources("kprobe", files["btfgen.kernel.h"].encode())
    try:
        ko = kbuild.build_module(GUEST, sources, "btfgen_kprobe", extra_cflags=("-Werror",))
    except kbuild.debian.PackageError as e:
        unavailable(f"{GUEST}: the module's toolchain cannot be had: {e}")

    g, py = python_guest.trace_guest(k.target, d)
    g.file("btfgen_kprobe.ko", ko.read_bytes())
    g.file("loader", build.loader(k.target).read_bytes(), 0o755)
    g.file("empty.bundle", EMPTY_BUNDLE)
    env = f"export LD_LIBRARY_PATH={python_guest.library_path(k.target)}"
    actions = " ".join(" ".join(a) for a in scenario.actions(4))
    # Bad input: no function it can probe. Refused, with the reason in dmesg; nothing left.
    g.step("refused", "insmod /btfgen_kprobe.ko functions=btfgen_no_such_function; "
                      "echo \"insmod-exit $?\"; echo \"modules $(grep -c btfgen_kprobe "
                      "/proc/modules)\"; echo \"proc-files $(ls /proc | grep -c btfgen)\"; "
                      "dmesg | grep 'btfgen_kprobe:'")
    g.step("load", f"insmod /btfgen_kprobe.ko functions={','.join(present)} && "
                   "grep btfgen_kprobe /proc/modules && cat /proc/btfgen_kprobe_stats "
                   "|| { dmesg | tail -20; exit 1; }; dmesg | grep 'btfgen_kprobe:'")
    # The module's reader until told to stop; the trace tool, the workload under it.
    g.step("trace", f"cd /trace && {env}; {py.python} btfgen_fprobe_record.py --module "
                    "btfgen_kprobe kgen /tmp/mod.btfrec & R=$!; sleep 2; "
                    f"{py.python} btfgen_trace.py --run /trace --record /tmp/trace.btfrec -- "
                    f"sh -c '/loader /empty.bundle {actions}; true' 2>&1; rc=$?; "
                    "kill -INT $R; wait $R; rr=$?; cat /proc/btfgen_kprobe_stats; "
                    "echo \"reader $rr tool $rc\"; [ $rc = 0 ] && [ $rr = 0 ]")
    g.step("unload", "rmmod btfgen_kprobe; rc=$?; echo \"modules $(grep -c btfgen_kprobe "
                     "/proc/modules)\"; echo \"proc-files $(ls /proc | grep -c btfgen)\"; "
                     "dmesg | grep 'btfgen_kprobe:'; exit $rc")
    g.step("module", "gzip -c /tmp/mod.btfrec | base64")
    g.step("tool", "gzip -c /tmp/trace.btfrec | base64")
    boot = g.run(k, timeout=900)
    out, _ = boot.section("refused")  # the console interleaves the kernel's lines
    said = dict(line.split() for line in out.splitlines()
                if line.split()[:1] in (["insmod-exit"], ["modules"], ["proc-files"]))
    assert said.get("insmod-exit", "0") != "0", out
    assert said.get("modules") == "0" and said.get("proc-files") == "0", out
    assert "btfgen_no_such_function: not in btfgen's table" in out, out
    out, rc = boot.section("load")
    assert rc == 0, out
    stats = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    assert int(stats["probing"]) == len(present) and int(stats["error"]) == 0, out
    text, rc = boot.section("trace")
    assert rc == 0, text[-4000:]
    stats = dict(line.split() for line in text.splitlines()
                 if len(line.split()) == 2 and line.split()[0] in ("events", "lost", "missed"))
    assert int(stats["lost"]) == 0 and int(stats["missed"]) == 0, text[-3000:]
    assert "btfgen_trace: attaching one kprobe and kretprobe per function" in text, text[:3000]
    pagesize, returned = printed.loader_said([line.rstrip() for line in text.splitlines()])
    out, rc = boot.section("unload")
    assert rc == 0, out
    left = dict(line.split() for line in out.splitlines()
                if line.split()[:1] in (["modules"], ["proc-files"]))
    assert left == {"modules": "0", "proc-files": "0"}, out  # no module, no proc file

    mod_events = _decode(_recording(boot.section("module")[0], tmp_path / "mod.btfrec"))
    tool_events = _decode(_recording(boot.section("tool")[0], tmp_path / "tool.btfrec"))
    loader = {e["tid"] for e in tool_events if e["comm"] == "loader"}
    assert loader, "btfgen trace recorded no call of the loader"
    assert loader == {e["tid"] for e in mod_events if e["comm"] == "loader"}, "not the same loader"
    ours = _calls(mod_events, loader, set(present))
    theirs = _calls(tool_events, loader, set(present))

    # (a) what the workload passed and got back, in the module's records
    wanted = expectations(pagesize)
    mmap_ret = int(returned["mmap"], 0)
    problems, exact, exact_stack = [], 0, 0
    for f in present:
        args, ret = wanted[f]
        args = {a: v for a, v in args.items() if v is not None}
        ret = mmap_ret if ret == MMAP else ret
        hit = next((c for c in ours[f] if all(printed.same(v, _number(c["args"].get(a)))
                                             for a, v in args.items())), None)
        if hit is None:
            problems.append(f"{f}: no call with {args}; the module recorded "
                            f"{[c['args'] for c in ours[f]][:4]}")
            continue
        if not (hit["exited"] and printed.same(ret, _number(hit["ret"]))):
            problems.append(f"{f}: returned {hit['ret']}, the workload saw {ret:#x}")
        exact += len(args) + 1
        exact_stack += len(set(args) & stack[f])
    # (b) btfgen trace on the same calls: every argument and return, value for value
    same, same_stack = 0, 0
    for f in present:
        if len(ours[f]) != len(theirs[f]):
            problems.append(f"{f}: the module saw {len(ours[f])} calls of the loader, btfgen "
                            f"trace {len(theirs[f])}")
            continue
        for i, (a, b) in enumerate(zip(ours[f], theirs[f])):
            for name in sorted(set(a["args"]) | set(b["args"])):
                if a["args"].get(name) != b["args"].get(name):
                    problems.append(f"{f} call {i}: {name}: module {a['args'].get(name)!r}, "
                                    f"btfgen trace {b['args'].get(name)!r}")
                else:
                    same += 1
                    same_stack += name in stack[f]
            if (a["exited"], a["ret"]) != (b["exited"], b["ret"]):
                problems.append(f"{f} call {i}: return: module {a['ret']!r}, btfgen trace "
                                f"{b['ret']!r}")
            else:
                same += 1
    calls = sum(len(ours[f]) for f in present)
    print(f"\n{GUEST} ({k.release}): {len(present)} functions probed; (a) {exact} values the "
          f"workload passed or got back found exactly, {exact_stack} of them stack-passed; "
          f"(b) {calls} calls of the loader, {same} values equal to btfgen trace's, "
          f"{same_stack} of them stack-passed")
    assert not problems, "\n".join(problems)
    assert exact >= 30 and exact_stack >= 12, (exact, exact_stack)
    assert same >= exact and same_stack >= exact_stack, (same, same_stack)
