"""A recording's stacks named (`btfgen decode` of a recording made with --stack), as the live
tracer names them (btfgen.probe.symbolize: the same frames, text and JSON), from what the
recording kept (its notes: stack_notes.py) rather than from the running system: each process's
maps as they were read while it ran, each object found again by its path and checked by its
build id, the kernel's symbols copied while recording (or a --kallsyms FILE given to decode).

A frame is never given a wrong name: an object not there, or there but another build (its
build id not the recorded one), names none of its frames, and each says why."""

from __future__ import annotations

import os
import stat

from btfgen.probe import symbolize
from btfgen.probe.symbolize import Frame


class _Unreadable:
    """An object whose frames cannot be named here: symbolize._Object's shape, with why."""

    def __init__(self, path: str, why: str) -> None:
        self.path, self.why = path, why
        self.elf = self.frames = self.symbols = None


class _RecordedUser(symbolize.UserStacks):
    def __init__(self, arch: str) -> None:
        super().__init__(arch)
        self.recorded_maps: dict[int, list | str] = {}
        self.build_ids: dict[str, tuple] = {}  # path -> (build id or None, why or None)

    def read_maps(self, tgid: int):
        return self.recorded_maps.get(tgid, f"no maps of process {tgid} were recorded")

    def open_object(self, path: str):
        if not path.startswith("/"):  # the uretprobe trampoline's: never a file
            return super().open_object(path)
        recorded = self.build_ids.get(path)
        if recorded is None:
            return _Unreadable(path, "the recording holds no build id for it")
        bid, why = recorded
        if why is not None:
            return _Unreadable(path, f"it could not be read while recording ({why})")
        if bid is None:
            return _Unreadable(path, "it had no build id to check it by")
        # The path is the recording's: never a device or a FIFO (read whole, or never ended)
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except OSError as e:
            return _Unreadable(path, f"not found here ({e.strerror})")
        if not regular:
            return _Unreadable(path, "not a regular file here")
        obj = super().open_object(path)
        if obj.elf is None:
            return _Unreadable(path, f"not found here ({obj.why})")
        here = obj.elf.build_id
        if here != bid:
            return _Unreadable(path, f"another build here (build id {here or 'none'}, "
                               f"recorded {bid})")
        return obj


class _RecordedKernel:
    """KernelSymbols' frame(), from the symbols the recording copied; `kallsyms` (a path, or
    None) names the addresses it holds none for."""

    def __init__(self, kallsyms: str | None) -> None:
        self.recorded: dict[int, Frame] = {}
        self.file = symbolize.KernelSymbols(kallsyms) if kallsyms else None

    def frame(self, ip: int) -> Frame:
        found = self.recorded.get(ip)
        if (found is None or found.symbol is None) and self.file is not None:
            return self.file.frame(ip)
        if found is None:
            return Frame(ip, None, 0, None, "no kernel symbol for it in the recording "
                         "(--kallsyms FILE names it)")
        return found


class RecordedStacks(symbolize.Stacks):
    """What the printer asks (symbolize.Stacks' describe, text, as_json) of a recording's
    stacks; take() each span's notes before its events."""

    def __init__(self, arch: str, order: str, kallsyms: str | None = None) -> None:
        self.order = order
        self.user = _RecordedUser(arch)
        self.kernel = _RecordedKernel(kallsyms)

    def take(self, notes) -> None:
        """A span's notes (stack_notes.Note each), in file order: each process's maps replace
        those read before (the writer read them again where the next event needed it)."""
        for note in notes:
            for tgid, maps in note.maps:
                self.user.recorded_maps[tgid] = maps
            for path, bid, why in note.objects:
                self.user.build_ids.setdefault(path, (bid, why))
            for ip, symbol, offset, module, why in note.kernel:
                self.kernel.recorded[ip] = Frame(ip, symbol, offset, module, why)
