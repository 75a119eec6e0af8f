"""`btfgen trace --count / --latency --by kstack|ustack`: calls counted and timed by their
stack, in the tracer. A user stack is unwound in user space from the objects' .eh_frame
(symbolize.py), so it cannot be a key in the kernel's maps (a frame-pointer stack could, but
Debian's code keeps no frame pointers: it is cut after a frame or two, and cut stacks of
different callers would be one key). So each call's entry is sent through the ring buffer with
its stack as `--stack` sends it, and counted here by its symbolized frames; the exit too, for
--latency (paired per thread as the printer pairs them). A kernel stack is keyed the same
way, so both keys count alike; so is a kernel function's user stack (its task's user registers
and a copy of its user stack, unwound as a user function's), where a kernel thread's call has
its own key saying it has no user side.

A key is the function and the frames as shown (function+offset and object; a frame that
could not be named keeps its address and why), so the same call site in every process is
one key, and two different stacks never are. A stack that is cut, or absent, says why in its
key. What is lost is said: records the ring had no room for (their calls are in no count),
calls the kernel skipped, exits without their entry. Standard library only."""

from __future__ import annotations

import json
import struct
import sys
import time
from typing import NamedTuple

from . import prog, spec_format, stack_wire
from .calls import OpenCalls
from .event import DATA, HEAD_FORMAT
from .stack_keys import STACK_KEYS
from .summary import log2_hist, low

_LOSSES = spec_format.EVENT_THREAD_LOST | spec_format.EVENT_SOME_LOST
SLOTS = 64
# trace_stack omits the part where the record has no room for it (captures of kilobytes)
NO_ROOM = "the record had no room for the stack after its captures"


class StackKey(NamedTuple):
    """A call's key: its function and its stack, as shown."""

    function: str
    frames: tuple  # symbolize.Frame, innermost first; a named one's ip 0 (not part of it)
    cut: str | None  # why the stack is likely cut (user stacks), None: whole
    missing: str | None = None  # why there is no stack at all

    def text(self, indent: str = "    ") -> list[str]:
        if self.missing is not None:
            return [f"{indent}<no stack: {self.missing}>"]
        lines = [indent + f.text for f in self.frames]
        if self.cut:
            lines.append(f"{indent}... likely cut: {self.cut}")
        return lines


class StackSummary:
    """The sink of the ring's spans for a stack-keyed summary: each call counted (and timed)
    by its stack; printed at the end and every --interval, as summary.Summary prints."""

    def __init__(self, manifest, functions, stacks, order: str, out=sys.stdout,
                 as_json: bool = False, interval: float | None = None) -> None:
        keys = manifest.stack_keys
        self.count, self.latency, self.by = keys.count, keys.latency, keys.by
        self.which = STACK_KEYS[self.by]  # the part of Stacks.describe's dict it is
        self.functions = functions  # BTF id -> decoder (manifest.LazyFunctions)
        self.stacks = stacks  # symbolize.Stacks
        self.heads = struct.Struct(("<" if order == "little" else ">") + HEAD_FORMAT)
        # the functions whose --filter decides on $retval: only the exits it keeps are sent
        # (every entry is), so their calls are counted at exit, paired with their entry
        self.at_exit = frozenset(manifest.btf_ids[i] for i in manifest.retval_filtered or ())
        self.out, self.as_json, self.interval = out, as_json, interval
        self.open = OpenCalls()
        self.counts: dict[StackKey, int] = {}
        self.hists: dict[StackKey, list[int]] = {}
        self.no_entry = 0  # exits without their entry: not timed (nor counted, at exit)
        self.bad = 0  # records that could not be read: their calls in no count
        self._missed, self._lost = (lambda: 0), (lambda: 0)
        self.printed_missed = self.printed_lost = 0
        self.next_print = None if interval is None else time.monotonic() + interval
        self.prints = 0
        self._stack_at: dict = {}  # BTF id -> where an entry's stack part starts

    # ---- the ring's records -----------------------------------------------------------------

    def records(self, batch) -> bool:
        """A span of records (each one's bytes), each call counted or timed. A record that
        cannot be read is one line on stderr and counted as such; the reader goes on."""
        for raw in batch:
            try:
                self.record(raw)
            except Exception as e:
                self.bad += 1
                prog.say(f"a record could not be read: {e!r}", flush=True)
        return True

    def record(self, raw) -> None:
        if len(raw) < DATA:
            raise stack_wire.BadStack(f"an event of {len(raw)} bytes")
        tgid, tid, _comm, ns, _cpu, flags, btf_id, kind, _failed = self.heads.unpack_from(raw)
        fn = self.functions.get(btf_id)
        if fn is None or kind > 1:
            raise stack_wire.BadStack(f"no traced function has BTF id {btf_id} (kind {kind})")
        if flags & _LOSSES:  # this thread's (or some thread's) records were lost
            if flags & spec_format.EVENT_SOME_LOST:
                self.open.forget_all()
            else:
                self.open.forget(tid)
        at_exit = btf_id in self.at_exit
        if kind == 0:
            key = self._key(raw, fn, flags, tgid, tid)
            if self.count and not at_exit:
                self.counts[key] = self.counts.get(key, 0) + 1
            # an entry the trampoline's pair sends (EVENT_UNPAIRED) has no exit to pair with
            if (self.latency or at_exit) and not flags & spec_format.EVENT_NOT_PAIRED:
                self.open.enter(tid, fn, (ns, key))
            return
        if not (self.latency or at_exit):
            return  # a count made at entry: the exit has nothing to add
        entry = None if flags & spec_format.EVENT_NOT_PAIRED else self.open.exit(tid, fn)
        if entry is None:
            self.no_entry += 1
            return
        began, key = entry
        if self.count and at_exit:
            self.counts[key] = self.counts.get(key, 0) + 1
        if self.latency:
            hist = self.hists.get(key)
            if hist is None:
                hist = self.hists[key] = [0] * (1 + SLOTS)
            took = max(0, ns - began)
            hist[0] += took
            hist[1 + min(SLOTS - 1, max(took.bit_length() - 1, 0))] += 1  # floor(log2)

    def _key(self, raw, fn, flags: int, tgid: int, tid: int) -> StackKey:
        if not flags & stack_wire.EVENT_STACK:
            return StackKey(fn.name, (), None, NO_ROOM)
        at = self._stack_at.get(fn.btf_id)
        if at is None:
            at = self._stack_at[fn.btf_id] = spec_format.event_size(fn.desc, 0)
        try:
            described = self.stacks.describe(raw, at, tgid, tid)
        except stack_wire.BadStack as e:
            return StackKey(fn.name, (), None, f"its stack part could not be read ({e})")
        frames = described.get(self.which)
        if not frames:
            # a kernel function's call in a kernel thread says so (symbolize.NO_USER_SIDE)
            return StackKey(fn.name, (), None, "the kernel gave no kernel frames"
                            if self.which == "kernel" else
                            described.get("user_none") or "no user registers or frames")
        return StackKey(fn.name, tuple(f._replace(ip=0) if f.symbol is not None else f
                                       for f in frames),
                        described.get("user_cut") if self.which == "user" else None)

    # ---- printing ---------------------------------------------------------------------------

    def attached(self, obj, missed=lambda: 0, lost=lambda: 0) -> None:
        """`missed()`: calls the kernel skipped so far; `lost()`: records lost so far (the ring
        buffer full, no scratch): each print says how many more since the last."""
        self._missed, self._lost = missed, lost

    def tick(self) -> None:
        """After each drain of the ring: print when the interval is up."""
        if self.next_print is not None and time.monotonic() >= self.next_print:
            self.next_print += self.interval
            self.print()

    def print(self) -> None:
        missed, lost = self._missed(), self._lost()
        new_missed, self.printed_missed = missed - self.printed_missed, missed
        new_lost, self.printed_lost = lost - self.printed_lost, lost
        said = {"missed": new_missed, "lost": new_lost, "no_entry": self.no_entry,
                "bad": self.bad}
        self.prints += 1
        text = (self._json if self.as_json else self._text)(self.counts, self.hists, said)
        # each print shows the calls since the last
        self.counts, self.hists, self.no_entry, self.bad = {}, {}, 0, 0
        self.out.write(text)
        self.out.flush()

    def _text(self, counts: dict, hists: dict, said: dict) -> str:
        out = []
        if self.interval is not None:
            out.append(time.strftime("%H:%M:%S") + "\n")
        if self.count:
            rows = sorted(counts.items(), key=lambda r: (r[1], r[0].function, r[0].text()))
            fw = max([4] + [len(k.function) for k, _ in rows])
            out.append(f"{'FUNC':<{fw}}  COUNT  ({self.by} under each)\n")
            for key, n in rows:
                out.append(f"{key.function:<{fw}}  {n}\n")
                out += [line + "\n" for line in key.text()]
        if self.latency:
            for key, h in sorted(hists.items(), key=lambda r: (r[0].function, r[0].text())):
                out.append(f"\nFunction = {key.function}, {self.by}:\n")
                out += [line + "\n" for line in key.text()]
                out.append(log2_hist(h[1:], "nsecs"))
                n = sum(h[1:])
                out.append(f"\navg = {h[0] // n if n else 0} nsecs, total: {h[0]} nsecs, "
                           f"count: {n}\n")
        out += [line + "\n" for line in self._said(said)]
        return "".join(out)

    def _said(self, said: dict) -> list[str]:
        lines = []
        if said["missed"]:
            lines.append(f"{said['missed']} calls missed by the kernel (its programs did not "
                         f"run for them): not counted or timed, the figures above may be "
                         f"short by as many")
        if said["lost"]:
            lines.append(f"{said['lost']} records lost before they were read (--by {self.by} "
                         f"counts each call's event: ring buffer full, or no scratch): their "
                         f"calls are not counted or timed")
        if said["bad"]:
            lines.append(f"{said['bad']} records could not be read: not counted or timed")
        lost = " or ".join(w for w, on in (("timed", self.latency),
                                            ("counted (at exit)", bool(self.at_exit)))
                           if on)
        if said["no_entry"] and lost:
            lines.append(f"{said['no_entry']} exits without their entry: not {lost}")
        return lines

    def _json(self, counts: dict, hists: dict, said: dict) -> str:
        doc: dict = {}
        if self.interval is not None:
            doc["interval"] = self.prints
        if self.count:
            doc["counts"] = [{"function": k.function, "key": self._json_key(k), "count": n}
                             for k, n in sorted(counts.items(),
                                                key=lambda r: (r[1], r[0].function,
                                                               r[0].text()))]
        if self.latency:
            doc["latencies"] = []
            for k, h in sorted(hists.items(), key=lambda r: (r[0].function, r[0].text())):
                n = sum(h[1:])
                doc["latencies"].append({
                    "function": k.function, "key": self._json_key(k), "count": n,
                    "total_ns": h[0], "buckets": [{"low": low(b), "high": (2 << b) - 1,
                                                   "count": c}
                                                  for b, c in enumerate(h[1:]) if c]})
        doc["missed_by_kernel"] = said["missed"]
        doc["lost_records"] = said["lost"]
        doc["unreadable_records"] = said["bad"]
        if self.latency or self.at_exit:
            doc["no_entry"] = said["no_entry"]
        return json.dumps(doc) + "\n"

    def _json_key(self, key: StackKey) -> dict:
        """{"ustack": [frames], "ustack_cut": why or None} (kstack: no cut), as --stack's
        --json shows a stack; a named frame without its address (not part of the key);
        {"ustack": None, "no_stack": why} for a call without one."""
        if key.missing is not None:
            return {self.by: None, "no_stack": key.missing}
        frames = []
        for f in key.frames:
            d = f.as_dict()
            if f.symbol is not None:
                del d["ip"]
            frames.append(d)
        out: dict = {self.by: frames}
        if self.by == "ustack":
            out["ustack_cut"] = key.cut
        return out

