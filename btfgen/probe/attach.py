"""How a trace's functions are attached, best first (as bpftrace's attached_probe): one session
link where the kernel has them (kprobe.session, Linux 6.10+; uprobe.session, 6.13+: one
program for entry and exit, the per-call state in the session cookie), else one kprobe_multi
(uprobe_multi) link per direction, else one kprobe and kretprobe (uprobe and uretprobe) each,
Linux 5.15+ (Debian 12's 6.1 has no uprobe_multi). The cookie of each function
(spec_format.Cookie) is its index in the manifest, which is also where its spec sits in the
`specs` map, and, where the register image decodes it, its BTF id and a bit per direction.
"""

from __future__ import annotations

import errno
import sys
from typing import NamedTuple

from . import features, prog
from .errors import BpfLoadError, RunError


class AttachMode(NamedTuple):
    kind: str  # "session", "multi" or "single"
    object: str  # its BPF object in the trace directory
    programs: tuple[str, ...]
    said: str  # what is attached, for the messages
    why: str = ""  # why this one: the others are missing, or it was asked for

    def announce(self) -> str:
        return f"attaching {self.said}" + (f" ({self.why})" if self.why else "")


def attach_modes(asked: str, kernel: bool, manifest: dict) -> list[AttachMode]:
    """The ways to attach, best first (a refused one falls back to the next), saying which
    one is tried and why."""
    modes = []
    if asked in ("auto", "session"):
        session, why = _session_mode(kernel, manifest)
        if session is None and asked == "session":
            raise RunError(f"--attach session: {why}")
        if session is not None:
            modes.append(session._replace(why="as asked" if asked == "session" else
                                          "entry and exit on one link"))
            if asked == "auto":
                modes.append(_pair_or_single("auto", kernel, manifest, quiet=True))
        else:
            modes.append(_pair_or_single("auto", kernel, manifest, no_session=why))
    else:
        modes.append(_pair_or_single(asked, kernel, manifest))
    print(f"{prog.NAME}: {modes[0].announce()}", file=sys.stderr)
    return modes


def _session_mode(kernel: bool, manifest: dict) -> tuple[AttachMode | None, str]:
    objects = manifest.get("session_objects")
    if not objects:
        return None, "this trace directory has no session program (built by an older btfgen)"
    variant, why = features.session_support(manifest["bpf_syscall"], kernel)
    if variant is None:
        return None, why
    kind = "kprobe" if kernel else "uprobe"
    return AttachMode("session", objects[variant], ("trace_session",),
                      f"one {kind}.session link"), ""


def _pair_or_single(asked: str, kernel: bool, manifest: dict, quiet: bool = False,
                    no_session: str = "") -> AttachMode:
    """multi or single: kprobe_multi (uprobe_multi) pairs where the kernel has them in auto."""
    pair, obj = ("trace_entry", "trace_exit"), manifest["object"]
    multi = AttachMode("multi", obj, pair, "kprobe_multi links" if kernel else
                       "uprobe_multi links", "as asked" if asked == "multi" else no_session)
    single = AttachMode("single", obj, pair, "one kprobe and kretprobe per function" if kernel
                        else "one uprobe and uretprobe per function",
                        "as asked" if asked == "single" else "")
    if asked != "auto":
        return single if asked == "single" else multi
    why = (features.kprobe_multi_unavailable if kernel else
           features.uprobe_multi_unavailable)(manifest["bpf_syscall"])
    if why is None:
        return multi
    also = features.kprobes_unavailable() if kernel else None
    if also and not quiet:
        raise RunError(f"{why}; {also}")
    return single._replace(why=why)


def attach_functions(obj, manifest: dict, keep: list[int], mode: AttachMode,
            cookie: list[int]) -> None:
    # No pid on the uprobe links: the processes to trace are the BPF side's `followed` set,
    # which grows as they fork.
    kernel = manifest["kind"] == "kernel"
    names = [manifest["functions"][i] for i in keep]
    session = mode.kind == "session"
    unprobed: list[str] = []
    for program, ret in zip(mode.programs, (False, True)):
        if mode.kind == "single":
            # The same program on every function: the cookie (Linux 5.15+) picks the spec.
            for i, name in zip(keep, names):
                if not kernel:
                    obj.attach_uprobe(program, manifest["program"], name, cookie=cookie[i],
                                      retprobe=ret, offset=manifest["offsets"][i])
                    continue
                if name in unprobed:
                    continue
                try:
                    obj.attach_kprobe(program, name, cookie[i], retprobe=ret)
                except BpfLoadError as e:
                    # A kprobe names its function, and a name several functions share, or
                    # the kprobe blacklist's, is refused: that function only is left out
                    # (a kretprobe never runs without its kprobe: both go together).
                    if e.errno not in (errno.EADDRNOTAVAIL, errno.EINVAL) or ret:
                        raise
                    unprobed.append(name)
        elif kernel:
            obj.attach_kprobe_multi(program, names, [cookie[i] for i in keep], retprobe=ret,
                                    session=session)
        else:
            obj.attach_uprobe_multi(program, manifest["program"], names,
                                    [cookie[i] for i in keep], retprobe=ret,
                                    offsets=[manifest["offsets"][i] for i in keep],
                                    session=session)
    if unprobed:
        if len(unprobed) == len(names):
            raise RunError(f"no function could take a kprobe by name (as {unprobed[0]}: "
                           "several functions of the name, or on the kprobe blacklist)")
        print(f"{prog.NAME}: left out, a kprobe by name refused (several functions of the "
              f"name, or the kprobe blacklist): {', '.join(unprobed[:10])}"
              f"{f' and {len(unprobed) - 10} more' if len(unprobed) > 10 else ''}",
              file=sys.stderr)


def enough_files(wanted: int) -> None:
    """One kprobe or kretprobe is one perf event file: a thousand functions attached singly
    passed the usual soft limit of 1,024 open files (EMFILE), and a whole kernel (Debian 12's
    6.1 has no kprobe_multi) the usual hard limit of 4,096. Raise them as far as allowed (root
    may raise the hard limit up to fs.nr_open); where that is not far enough, say so before
    attaching, not one EMFILE a probe after it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return
        except (OSError, ValueError):
            pass
    new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    if new < wanted:
        raise RunError(f"attaching one kprobe and kretprobe per function needs {wanted} open "
                       f"files, and this process may open {new} (ulimit -n; root may raise "
                       "it up to fs.nr_open): trace fewer functions, or raise the limit")
