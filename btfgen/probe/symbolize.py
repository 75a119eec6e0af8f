"""--stack's frames named: a kernel address by the kernel's symbols (/proc/kallsyms, or a
System.map given for another machine), a user address by the mapped object's ELF symbol table
(each process's /proc/PID/maps, read when its first stack is shown), each frame as
`func+0xoff (object)`; a frame that cannot be named says why. User stacks are unwound from
the objects' .eh_frame (unwind.py); the kernel's frame-pointer walk is kept for where that
cannot start."""

from __future__ import annotations

import bisect
import os
from typing import NamedTuple

from . import eh_frame, elf_file, stack_wire, unwind

# Where Debian's -dbgsym and -dbg packages put an object's symbols, by build id.
DEBUG_DIR = "/usr/lib/debug/.build-id"
KALLSYMS = "/proc/kallsyms"  # the running kernel's symbols (--kallsyms FILE: another's)
UPROBES = "[uprobes]"  # the mapping of the kernel's uretprobe trampoline, as maps names it
# Traced calls a thread has open, their return addresses as seen at their entry: at most
MOST_OPEN = 256
MOST_FRAMES_KEPT = 1 << 17  # frames named, kept for the next stacks through them


class Frame(NamedTuple):
    ip: int
    symbol: str | None
    offset: int
    object: str | None  # the object's path (the kernel's: "kernel", or [module])
    why: str | None = None  # why it has no symbol

    @property
    def text(self) -> str:
        where = os.path.basename(self.object) if self.object and self.object[0] == "/" \
            else self.object
        if self.symbol is not None:
            return f"{self.symbol}+{self.offset:#x} ({where})"
        if where is not None:
            return f"{self.ip:#x} ({where}: {self.why})"
        return f"{self.ip:#x} ({self.why})"

    def as_dict(self) -> dict:
        out = {"ip": self.ip, "symbol": self.symbol, "offset": self.offset,
               "object": self.object}
        if self.why is not None:
            out["why"] = self.why
        return out


class Mapping(NamedTuple):
    start: int
    end: int
    offset: int
    path: str


def read_maps(tgid: int) -> list[Mapping] | str:
    """The file-backed mappings of process `tgid`, by address, or why there are none."""
    try:
        with open(f"/proc/{tgid}/maps") as f:
            text = f.read()
    except OSError as e:
        return f"its maps could not be read ({e.strerror}: the process had gone?)"
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        # files, and the kernel's uretprobe trampoline (a traced call's return goes there)
        if len(parts) < 6 or not (parts[5].startswith("/") or parts[5] == UPROBES):
            continue
        start, _, end = parts[0].partition("-")
        out.append(Mapping(int(start, 16), int(end, 16), int(parts[2], 16), parts[5]))
    if not out:
        return "its maps were empty (the process had gone?)"
    return sorted(out)


class _Object:
    """One mapped object: its ELF tables, its CFI, or why they cannot be read."""

    def __init__(self, path: str) -> None:
        self.path, self.elf, self.frames, self.why = path, None, None, None
        self.symbols = None  # the ElfFile whose symbols name its frames
        try:
            with open(path, "rb") as f:
                self.elf = elf_file.ElfFile(f.read(), path)
        except (OSError, elf_file.ElfError) as e:
            self.why = getattr(e, "strerror", None) or str(e)
            return
        self.symbols = self.elf
        if not self.elf.has_symtab:
            self.symbols = _debug_file(self.elf) or self.elf
        s = self.elf.section(".eh_frame")
        if s is not None:
            self.frames = eh_frame.EhFrame(self.elf.section_bytes(s), s.addr, self.elf.order,
                                           self.elf.wide)


def _debug_file(elf) -> "elf_file.ElfFile | None":
    """The object's separate debug file by its build id, where one is installed."""
    bid = elf.build_id
    if not bid or len(bid) < 3:
        return None
    path = f"{DEBUG_DIR}/{bid[:2]}/{bid[2:]}.debug"
    try:
        with open(path, "rb") as f:
            found = elf_file.ElfFile(f.read(), path)
    except (OSError, elf_file.ElfError):
        return None
    return found if found.has_symtab else None


class UserStacks:
    """User addresses named and stacks unwound, each process's maps and each object's tables
    read once (a process's maps again where an address is in none of them: a dlopen)."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self._maps: dict[int, list | str] = {}
        self._objects: dict[str, _Object] = {}
        # per thread, the traced calls it has open (of those seen with a stack): (sp at the
        # entry, the return address there), outermost first. A uretprobe takes a traced call's
        # return address over after its entry's program ran, so an inner call's stack holds
        # the trampoline's address there instead: the k-th such, going out, is the k-th open
        # call's from the innermost.
        self._open: dict[int, list] = {}
        self._frames: dict[tuple, Frame] = {}  # (tgid, ip, caller) -> its Frame
        self._placed: dict[tuple, tuple] = {}  # (tgid, ip) -> _place's answer

    def _object(self, path: str) -> _Object:
        obj = self._objects.get(path)
        if obj is None:
            obj = self._objects[path] = self.open_object(path)
        return obj

    def open_object(self, path: str) -> _Object:
        """A mapped object read (once a path): here, the file at `path` (a recording's
        symbolizer checks it is the file recorded)."""
        return _Object(path)

    def read_maps(self, tgid: int) -> list[Mapping] | str:
        """Process `tgid`'s maps, at its first address and again at one in none of them: here,
        /proc's (a recording's writer keeps them, its symbolizer gives back those kept)."""
        return read_maps(tgid)

    def _mapping(self, tgid: int, ip: int) -> Mapping | str:
        maps = self._maps.get(tgid)
        for attempt in (0, 1):
            if maps is None or (attempt and not isinstance(maps, str)):
                maps = self._maps[tgid] = self.read_maps(tgid)
            if isinstance(maps, str):
                return maps
            i = bisect.bisect_right(maps, (ip, 1 << 64)) - 1
            if i >= 0 and maps[i].start <= ip < maps[i].end:
                return maps[i]
        return "in no mapped file"

    def _place(self, tgid: int, ip: int):
        """(the object, the address in its own tables, the mapping) or why not."""
        key = (tgid, ip)
        found = self._placed.get(key)
        if found is None:
            found = self._find_place(tgid, ip)
            if not isinstance(found, str):  # one in no mapping may be in a later one
                if len(self._placed) >= MOST_FRAMES_KEPT:
                    self._placed.clear()
                self._placed[key] = found
        return found

    def _find_place(self, tgid: int, ip: int):
        m = self._mapping(tgid, ip)
        if isinstance(m, str):
            return m
        obj = self._object(m.path)
        if obj.elf is None:
            return f"{m.path}: {obj.why}"
        vaddr = obj.elf.vaddr_of(ip - m.start + m.offset)
        if vaddr is None:
            return f"{m.path}: in no loadable segment"
        return obj, vaddr, m

    def frame(self, tgid: int, ip: int, caller: bool) -> Frame:
        """The frame of `ip` (`caller`: a return address, named by the call before it)."""
        key = (tgid, ip, caller)
        found = self._frames.get(key)
        if found is None:
            found = self._frame(tgid, ip, caller)
            # kept where it was placed in a file: one in no mapping may be in a later one
            if found.object is not None:
                if len(self._frames) >= MOST_FRAMES_KEPT:
                    self._frames.clear()
                self._frames[key] = found
        return found

    def _frame(self, tgid: int, ip: int, caller: bool) -> Frame:
        placed = self._place(tgid, ip - 1 if caller else ip)
        if isinstance(placed, str):
            return Frame(ip, None, 0, None, placed)
        obj, vaddr, m = placed
        vaddr += 1 if caller else 0
        named = obj.symbols.symbol_at(vaddr - 1 if caller else vaddr)
        if named is None:
            why = "no symbol" if obj.elf.has_symtab or obj.symbols is not obj.elf else \
                "no symbol (stripped, no debug file)"
            return Frame(ip, None, vaddr, m.path, why)
        name, off = named
        return Frame(ip, name, off + (1 if caller else 0), m.path)

    def _returns(self, tgid: int, tid: int, sp: int):
        """walk()'s `returns` for a call of thread `tid` entered at `sp`: the calls it has open
        below that frame are gone (returned); those above it stand for the trampoline's
        addresses, innermost first."""
        kept = [c for c in self._open.get(tid, ()) if c[0] > sp]
        outer = sorted(kept, reverse=False)
        maps = self._maps.get(tgid)
        trampoline = [m for m in maps if m.path == UPROBES] if isinstance(maps, list) else []

        def returns(ra: int, k: int):
            if not any(m.start <= ra < m.end for m in trampoline):
                return ra
            return outer[k][1] if k < len(outer) else None
        return kept, returns

    def unwind(self, sample, tgid: int, tid: int = 0) -> tuple[list[Frame], str | None]:
        """The call's user frames, innermost first, and why they are likely cut (None: whole).
        Unwound from the objects' CFI where the stack was copied; else the kernel's
        frame-pointer walk."""
        def lookup(pc: int):
            placed = self._place(tgid, pc)
            if isinstance(placed, str):
                return placed
            obj, vaddr, m = placed
            if obj.frames is None:
                return f"{os.path.basename(m.path)} has no .eh_frame"
            return obj.frames, vaddr

        if sample.slice:
            self._mapping(tgid, sample.ip)  # the maps read (the trampoline's among them)
            kept, returns = self._returns(tgid, tid, sample.sp)
            walked = unwind.walk(sample, self.arch, lookup, returns)
            pcs, cut = walked.pcs, walked.cut
            if len(pcs) > 1:  # this call's own return address, before a uretprobe takes it
                self._open[tid] = (kept + [(sample.sp, pcs[1])])[-MOST_OPEN:]
        else:
            pcs = sample.user_fp or (sample.ip,)
            cut = "no user stack could be copied: the kernel's frame-pointer walk, which " \
                "code without frame pointers cuts short"
        return [self.frame(tgid, pc, i > 0) for i, pc in enumerate(pcs)], cut


class KernelSymbols:
    """The kernel's function symbols: /proc/kallsyms (or a System.map), read at first use."""

    def __init__(self, path: str = KALLSYMS) -> None:
        self.path = path
        self._table: tuple | None = None
        self.why: str | None = None

    def _load(self) -> tuple:
        if self._table is None:
            rows = []
            try:
                with open(self.path) as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) >= 3 and parts[1] in "tTwW":
                            addr = int(parts[0], 16)
                            if addr:
                                rows.append((addr, parts[2], parts[3] if len(parts) > 3
                                             else "kernel"))
            except (OSError, ValueError) as e:
                self.why = f"{self.path} could not be read ({e})"
            if not rows and self.why is None:
                self.why = f"{self.path} gives no addresses (kptr_restrict?)"
            rows.sort()
            self._table = ([r[0] for r in rows], rows)
        return self._table

    def frame(self, ip: int) -> Frame:
        starts, rows = self._load()
        i = bisect.bisect_right(starts, ip) - 1
        if i < 0:
            return Frame(ip, None, 0, None, self.why or "below every kernel symbol")
        addr, name, where = rows[i]
        return Frame(ip, name, ip - addr, where)


class Stacks:
    """What the printer asks: a call's stack part as frames, text lines and JSON."""

    def __init__(self, arch: str, order: str, kallsyms: str = KALLSYMS) -> None:
        self.order = order
        self.user = UserStacks(arch)
        self.kernel = KernelSymbols(kallsyms)

    def describe(self, raw, at: int, tgid: int, tid: int) -> dict:
        """{"kernel": [Frame], "user": [Frame], "user_cut": why or None} of the record."""
        sample = stack_wire.read(raw, at, self.order)
        out: dict = {}
        if sample.kernel:
            out["kernel"] = [self.kernel.frame(ip) for ip in sample.kernel]
        if sample.user_fp or sample.slice or sample.sp:
            out["user"], out["user_cut"] = self.user.unwind(sample, tgid, tid)
        return out

    @staticmethod
    def text(described: dict, indent: str = "    ") -> list[str]:
        lines = [indent + f.text for f in described.get("kernel", ())]
        lines += [indent + f.text for f in described.get("user", ())]
        if described.get("user_cut"):
            lines.append(f"{indent}... likely cut: {described['user_cut']}")
        return lines

    @staticmethod
    def as_json(described: dict) -> dict:
        out = {}
        for key, name in (("kernel", "kstack"), ("user", "ustack")):
            if key in described:
                out[name] = [f.as_dict() for f in described[key]]
        if "user" in described:
            out["ustack_cut"] = described["user_cut"]
        return out
