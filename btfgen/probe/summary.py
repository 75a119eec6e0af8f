"""`btfgen trace --count / --latency`, the run side: the summary maps (trace.bpf.c's
summary.bpf.h) set up before the object loads, read every `--interval S` and at the end, and
printed as bcc's funccount and funclatency print them, or as JSON.

The maps are cumulative: each print shows what came since the last one (user space keeps the
totals it has printed, so no call is lost between a read and a clear). Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import json
import struct
import sys
import time

from .libbpf import libbpf, possible_cpus
from .manifest import Manifest

# struct sum_keyspec: how (its parts' together, KEY_COMM, KEY_AT_EXIT), 3 pads, then PARTS
# struct sum_keypart: off, size, how, dst (in the key's bytes), mask
PARTS = 4
KEYSPEC_FORMAT = "HHHH" + "HHHHQ" * PARTS
KEY_RECORD, KEY_STRING, KEY_CAPTURE, KEY_COMM = 1, 2, 4, 8
KEY_AT_EXIT = 16  # not a key: the function's calls are counted at exit (a $retval filter)
KEY_RETVAL = 32  # the key's bytes are the exit's record's (and the calls counted at exit)
MODE_COUNT, MODE_LATENCY, MODE_EVENTS = 1, 2, 4
SLOTS = 64
# sum_stats
COUNTS_FULL, HISTS_FULL, NO_ENTRY, NO_ROOM = range(4)
MAP_SIZE = 10240  # keys each map holds by default (bcc's default table size)
STARS = 40


def mode(manifest: Manifest, record: bool) -> int:
    s = manifest.summary
    return ((MODE_COUNT if s and s.count else 0) | (MODE_LATENCY if s and s.latency else 0)
            | (MODE_EVENTS if record else 0))


def needs_exit(manifest: Manifest, record: bool) -> bool:
    """Whether a summary's calls need their exit probed: --latency, a function counted at
    exit (its filter tests the return value), or the events recorded too. A directory built
    before the manifest said so: yes. Keyed by the stack (--by kstack / ustack, counted by
    the tracer from the events): for --latency, or a function counted at its exit (a filter
    on $retval)."""
    keys = manifest.stack_keys
    if keys:
        return record or keys.latency or bool(manifest.retval_filtered)
    s = manifest.summary
    return not s or record or s.exit


def entry_only(mode, manifest: Manifest, record: bool):
    """`mode` (attach.AttachMode) without its exit program, where it has one of its own (a pair
    of multi links, or single probes) and the summary does not need it: a count made at entry
    costs the traced call one probe, not two. A session link skips the exit itself (its entry
    returns 1)."""
    if (not (manifest.summary or manifest.stack_keys) or needs_exit(manifest, record)
            or mode.kind not in ("multi", "single") or len(mode.programs) != 2):
        return mode
    said = {"kprobe_multi links": "one kprobe_multi link",
            "uprobe_multi links": "one uprobe_multi link",
            "one kprobe and kretprobe per function": "one kprobe per function",
            "one uprobe and uretprobe per function": "one uprobe per function"}
    return mode._replace(programs=mode.programs[:1],
                         said=said.get(mode.said, mode.said) + " (entry only: a count needs "
                         "no exit)")


def before_load(obj, manifest: Manifest, map_size: int | None) -> None:
    """Size the maps: the one a summary does not use holds one key."""
    s = manifest.summary
    size = map_size or MAP_SIZE
    obj.set_max_entries("sum_counts", size if s.count else 1)
    obj.set_max_entries("sum_hists", size if s.latency else 1)
    obj.set_max_entries("sum_keys", len(manifest.functions))


def after_load(obj, directory, manifest: Manifest, record: bool) -> None:
    keys = (directory / manifest.summary.keyspecs).read_bytes()
    obj.fill_array("sum_keys", keys, len(manifest.functions))
    obj.update("sum_mode", struct.pack("I", 0), struct.pack("I", mode(manifest, record)))


class Summary:
    """Reads the maps of a loaded object and prints what changed since the last print."""

    def __init__(self, manifest: Manifest, decoders, out=sys.stdout, as_json: bool = False,
                 interval: float | None = None, map_size: int | None = None) -> None:
        s = manifest.summary
        self.count, self.latency = s.count, s.latency
        # functions counted at exit (their filter tests the return value): an exit without
        # its entry's state loses their count, as it loses a duration
        self.at_exit = bool(self.count and s.at_exit)
        self.key_size = s.key_size
        self.keys = s.keys
        self.names = manifest.functions
        # a kernel function's negative int return is an errno, named in a key as --errors
        # names it; a user function's never is (its errno is elsewhere)
        self.kernel = manifest.kind == "kernel"
        self.decoders = decoders
        self.order = "<" if decoders.BYTE_ORDER == "little" else ">"
        self.out, self.as_json, self.interval = out, as_json, interval
        self.map_size = map_size or MAP_SIZE
        self.obj = None
        self.ncpu = possible_cpus()
        self.printed_counts: dict = {}
        self.printed_hists: dict = {}
        self.printed_stats = [0, 0, 0, 0]
        self._missed = lambda: 0
        self.printed_missed = 0
        self.next_print = None if interval is None else time.monotonic() + interval
        self.prints = 0
        self._decoded: dict = {}
        self._fns: dict = {}

    # ---- reading ----------------------------------------------------------------------------

    def _keys(self, name: str) -> list[bytes]:
        fd = self.obj.map_fd(name)
        size = 16 + self.key_size
        lib = libbpf()
        out, prev = [], None
        nxt = ctypes.create_string_buffer(size)
        while True:
            if lib.bpf_map_get_next_key(fd, prev, nxt):
                return out
            out.append(nxt.raw)
            prev = ctypes.create_string_buffer(nxt.raw, size)

    def _per_cpu(self, name: str, key: bytes, words: int) -> list[int] | None:
        """The value at `key`, each of its `words` summed over the CPUs; None: gone."""
        step = words * 8
        try:
            raw = self.obj.lookup(name, key, step * self.ncpu)
        except Exception:
            return None
        vals = struct.unpack(f"{self.order}{words * self.ncpu}Q", raw)
        return [sum(vals[w::words]) for w in range(words)]

    def read(self) -> tuple[dict, dict, list[int]]:
        counts = {}
        if self.count:
            for k in self._keys("sum_counts"):
                v = self._per_cpu("sum_counts", k, 1)
                if v is not None:
                    counts[k] = v[0]
        hists = {}
        if self.latency:
            for k in self._keys("sum_hists"):
                v = self._per_cpu("sum_hists", k, 1 + SLOTS)
                if v is not None:
                    hists[k] = v
        ncpu = self.ncpu
        stats = []
        for at in range(4):
            raw = self.obj.lookup("sum_stats", struct.pack("I", at), 8 * ncpu)
            stats.append(sum(struct.unpack(f"{self.order}{ncpu}Q", raw)))
        return counts, hists, stats

    # ---- keys -------------------------------------------------------------------------------

    def _fn(self, fid: int):
        fn = self._fns.get(fid)
        if fn is None:
            fn = self._fns[fid] = self.decoders.function(self.names[fid])
        return fn

    def key(self, raw: bytes) -> tuple[str, str | tuple | None, object]:
        """(function, the key's name or None, its decoded value); a combined key's names and
        values are tuples, a part each."""
        hit = self._decoded.get(raw)
        if hit is not None:
            return hit
        fid, _zero, failed = struct.unpack_from(self.order + "IIQ", raw)
        name = self.names[fid]
        spec = self.keys[fid] if fid < len(self.keys) else None
        body = raw[16:]
        if spec is None:
            hit = (name, None, None)
        elif spec["by"] == "comm":
            hit = (name, "comm", body[:16].split(b"\0", 1)[0].decode("utf-8", "replace"))
        elif spec["by"] == "parts":
            parts = spec["parts"]
            hit = (name, tuple(p["name"] for p in parts),
                   tuple(self._part(fid, p, failed, body[p["dst"]:p["dst"] + p["size"]])
                         for p in parts))
        else:
            hit = (name, spec["name"], self._part(fid, spec, failed, body))
        self._decoded[raw] = hit
        return hit

    def _part(self, fid: int, spec: dict, failed: int, body: bytes):
        """A key's (or a combined key's part's) value, as the trace shows the same value."""
        value = self._record_value(fid, spec, failed, body)
        if spec.get("pointer") and type(value) is int:
            return Pointer(value)
        if spec.get("int") and self.kernel and type(value) is int and -value in errno.errorcode:
            return Errno(value, errno.errorcode[-value])
        return value

    def _record_value(self, fid: int, spec: dict, failed: int, body: bytes):
        """The key's bytes put back where the entry's record had them, decoded by the
        function's own decoder."""
        fn = self._fn(fid)
        desc = self.decoders._descriptor(self.names[fid])[0]
        kind = 1 if spec["by"] == "retval" else 0
        if spec["by"] in ("arg", "member"):
            off = desc.record.entry[spec["index"]].data_off + spec.get("within", 0)
        elif kind:
            off = desc.record.exit[0].data_off
        else:
            off = next(c.head for c in desc.captures if c.name == spec["name"])
        data = bytearray(max(desc.record.sizes[kind], off + len(body)) + 8)
        data[off:off + len(body)] = body
        head = struct.pack(self.order + "IIQ", desc.btf_id, kind, failed)
        record = head + bytes(data)
        if kind:
            return fn.decode_record(record)  # an exit's record: its return value
        if spec["by"] == "arg":
            return fn.decode_record(record)[spec["index"]]
        if spec["by"] == "member":
            # the argument decoded whole (the rest of it zeros), the member taken out of it
            value = fn.decode_record(record)[spec["index"]]
            for step in spec["steps"]:
                if isinstance(value, dict) and step in value:
                    value = value[step]
                elif isinstance(value, list) and isinstance(step, int) and step < len(value):
                    value = value[step]
            return value
        return fn.decode_captures(record)[spec["name"]]

    # ---- printing ---------------------------------------------------------------------------

    def attached(self, obj, missed=lambda: 0) -> None:
        """`missed()`: the calls the kernel skipped so far (its programs did not run), which
        no count or histogram holds: each print says how many more since the last."""
        self.obj = obj
        self._missed = missed

    def tick(self) -> None:
        """After each drain of the ring: print when the interval is up."""
        if self.next_print is not None and time.monotonic() >= self.next_print:
            self.next_print += self.interval
            self.print()

    def print(self) -> None:
        counts, hists, stats = self.read()
        new_counts = {k: v - self.printed_counts.get(k, 0) for k, v in counts.items()}
        new_hists = {}
        for k, v in hists.items():
            old = self.printed_hists.get(k)
            new_hists[k] = v if old is None else [a - b for a, b in zip(v, old)]
        new_stats = [a - b for a, b in zip(stats, self.printed_stats)]
        missed = self._missed()
        new_missed, self.printed_missed = missed - self.printed_missed, missed
        self.printed_counts, self.printed_hists, self.printed_stats = counts, hists, stats
        new_counts = {k: v for k, v in new_counts.items() if v}
        new_hists = {k: v for k, v in new_hists.items() if any(v[1:])}
        self.prints += 1
        text = (self._json if self.as_json else self._text)(new_counts, new_hists, new_stats,
                                                             new_missed)
        self.out.write(text)
        self.out.flush()

    def _rows(self, table: dict) -> list:
        rows = []
        for raw, value in table.items():
            func, kname, kvalue = self.key(raw)
            rows.append((func, kname, kvalue, value))
        return rows

    def _text(self, counts: dict, hists: dict, stats: list[int], missed: int = 0) -> str:
        out = []
        if self.interval is not None:
            out.append(time.strftime("%H:%M:%S") + "\n")
        if self.count:
            rows = self._rows(counts)
            shown = [(f, _shown(k, v), n) for f, k, v, n in rows]
            shown.sort(key=lambda r: (r[2], r[0], r[1]))
            keyed = any(r[1] for r in shown)
            fw = max([4] + [len(r[0]) for r in shown])
            kw = max([3] + [len(r[1]) for r in shown])
            out.append(f"{'FUNC':<{fw}}  {'KEY':<{kw}}  COUNT\n" if keyed else
                       f"{'FUNC':<{fw}}  COUNT\n")
            for f, k, n in shown:
                out.append(f"{f:<{fw}}  {k:<{kw}}  {n}\n" if keyed else f"{f:<{fw}}  {n}\n")
        if self.latency:
            rows = self._rows(hists)
            shown = sorted(((f, _shown(k, v), h) for f, k, v, h in rows),
                           key=lambda r: (r[0], r[1]))
            for f, k, h in shown:
                out.append(f"\nFunction = {f}" + (f", {k}" if k else "") + "\n")
                out.append(log2_hist(h[1:], "nsecs"))
                n = sum(h[1:])
                out.append(f"\navg = {h[0] // n if n else 0} nsecs, total: {h[0]} nsecs, "
                           f"count: {n}\n")
        out += [line + "\n" for line in self._said(stats, missed)]
        return "".join(out)

    def _said(self, stats: list[int], missed: int = 0) -> list[str]:
        lines = []
        if missed:
            lines.append(f"{missed} calls missed by the kernel (its programs did not run for "
                         f"them): not counted or timed, the figures above may be short by "
                         f"as many")
        if stats[COUNTS_FULL]:
            lines.append(f"{stats[COUNTS_FULL]} calls not counted: their key did not fit the "
                         f"map ({self.map_size} keys; --map-size)")
        if stats[HISTS_FULL]:
            lines.append(f"{stats[HISTS_FULL]} calls not timed: their key did not fit the map "
                         f"({self.map_size} keys; --map-size)")
        lost = " or ".join(w for w, on in (("timed", self.latency),
                                            ("counted (at exit)", self.at_exit)) if on)
        if stats[NO_ENTRY]:
            lines.append(f"{stats[NO_ENTRY]} exits without their entry (its state not kept): "
                         f"not {lost}")
        if stats[NO_ROOM]:
            lines.append(f"{stats[NO_ROOM]} calls not {lost}: too many calls under way at once")
        return lines

    def _json(self, counts: dict, hists: dict, stats: list[int], missed: int = 0) -> str:
        doc: dict = {}
        if self.interval is not None:
            doc["interval"] = self.prints
        if self.count:
            doc["counts"] = [dict(function=f, **({"key": _json_key(k, v)} if k else {}), count=n)
                             for f, k, v, n in sorted(self._rows(counts),
                                                      key=lambda r: (r[0], repr(r[2])))]
        if self.latency:
            doc["latencies"] = []
            for f, k, v, h in sorted(self._rows(hists), key=lambda r: (r[0], repr(r[2]))):
                n = sum(h[1:])
                doc["latencies"].append(dict(
                    function=f, **({"key": _json_key(k, v)} if k else {}), count=n,
                    total_ns=h[0], buckets=[{"low": low(b), "high": (2 << b) - 1,
                                             "count": c} for b, c in enumerate(h[1:]) if c]))
        doc["not_counted"] = stats[COUNTS_FULL]
        # calls the kernel skipped (its programs did not run): in no count or histogram
        doc["missed_by_kernel"] = missed
        if self.latency:
            doc["not_timed"] = {"map_full": stats[HISTS_FULL], "no_entry": stats[NO_ENTRY],
                                "no_room": stats[NO_ROOM]}
        if self.at_exit:
            doc["not_counted_at_exit"] = {"no_entry": stats[NO_ENTRY],
                                          "no_room": stats[NO_ROOM]}
        return json.dumps(doc) + "\n"


class Errno(int):
    """A kernel function's negative errno return as a key: `-2 ENOENT`, as --errors shows it;
    {"value": -2, "name": "ENOENT"} in JSON."""

    def __new__(cls, value: int, name: str):
        self = super().__new__(cls, value)
        self.name = name
        return self

    def __repr__(self) -> str:
        return f"{int(self)} {self.name}"


class Pointer(int):
    """A pointer key: a number in JSON, in hex in the table, as the trace shows a pointer
    argument."""

    __slots__ = ()

    def __repr__(self) -> str:
        return hex(self)


def _json_key(name, value) -> dict:
    """A key as JSON: {name: value}, a combined key's parts each so."""
    from .output import typed

    if isinstance(name, tuple):
        return {n: typed(v) for n, v in zip(name, value)}
    return {name: typed(value)}


def _shown(name: str | tuple | None, value) -> str:
    """A key as text: `comm=NAME`, `ARG=VALUE` and `PATH=VALUE` as trace lines show them; a
    combined key's parts so, with commas between."""
    from .output import show_captured

    if name is None:
        return ""
    if isinstance(name, tuple):
        return ", ".join(_shown(n, v) for n, v in zip(name, value))
    return f"comm={value}" if name == "comm" else f"{name}={show_captured(value)}"


def low(b: int) -> int:
    """The smallest duration in slot b (slot 0 holds 0 and 1)."""
    return 0 if b == 0 else 1 << b


def log2_hist(slots: list[int], unit: str) -> str:
    """A log2 histogram as bcc prints one: a row a slot up to the last that is used, each
    `low -> high : count |stars|`, 40 stars wide (20 past 32 slots, in wider columns)."""
    top = max((b for b, c in enumerate(slots) if c), default=-1)
    if top < 0:
        return ""
    most = max(slots)
    wide = top >= 32
    width = STARS // 2 if wide else STARS
    out = [(f"{'':15}{unit:<29} : count     distribution\n" if wide
            else f"{'':5}{unit:<19} : count     distribution\n")]
    for b in range(top + 1):
        c = slots[b]
        stars = "*" * (width * c // most)
        if wide:
            out.append(f"{low(b):20d} -> {(2 << b) - 1:<20d} : {c:<8d} |{stars:<{width}}|\n")
        else:
            out.append(f"{low(b):10d} -> {(2 << b) - 1:<10d} : {c:<8d} |{stars:<{width}}|\n")
    return "".join(out)

