"""What a trace run is asked to do: the options `--run` takes (tool.py parses them); and the
capture defaults the build is asked with unless told otherwise."""

from __future__ import annotations

from dataclasses import dataclass

# The capture defaults, defined here for every command that takes them (`btfgen trace`'s and
# `btfgen`'s options, the trace build, typed/capture.py). retsnoop's per-value size: the bytes
# of a captured string or buffer kept (--value-size); two such strings fit beside the
# arguments within the record data bytes a call's captures may take (--capture-budget), which
# keeps a call's record near 1 KiB whatever it captures unasked.
STRING_SIZE = 256
CALL_BUDGET = 1024


@dataclass
class Options:
    command: list[str]  # run this and trace it while it runs (user mode: the program's args)
    pid: int = 0  # or trace this running process
    duration: float | None = None  # or stop after this many seconds
    # print only the calls that returned an error, with their arguments: True, or the set
    # --errors=WHAT gave (output.ERRORS_ARE's keys: a user function's errors)
    errors: bool | frozenset = False
    as_json: bool = False  # JSON lines instead of text
    record: str | None = None  # write the raw events to this file instead of printing
    attach: str = "auto"  # "tracing-multi", "fentry-multi" or "fsession" (kernel functions:
    # the BPF trampoline), "session" (one kprobe.session/uprobe.session link), "multi"
    # (kprobe_multi/uprobe_multi pairs), "single" (one kprobe or uprobe each, with its cookie),
    # or "auto": an fsession.multi link, else the first of the kprobe modes the kernel has
    # (kernel functions: with the right cookies, features.kprobe_multi_cookies)
    ring_mib: int | None = None  # the ring buffer's size; None: ring_size(functions)
    # user functions: sleepable uprobe programs where the kernel takes them (user memory not
    # yet paged in is read); False: the non-sleepable ones, which fault there
    sleepable: bool = True
    timings: bool = False  # say how long each stage took (Timings)
    bytes_as: str = "auto"  # a captured buffer as text: output.show_bytes' `how`
    # --count / --latency (built in: the manifest's summary): print every `interval` seconds
    # (None: at the end only); each summary map holds `map_size` keys (None: summary.MAP_SIZE)
    interval: float | None = None
    map_size: int | None = None
    # --stack: the kernel's symbols (a System.map or a copy of /proc/kallsyms from the traced
    # machine); None: this machine's /proc/kallsyms
    kallsyms: str | None = None
