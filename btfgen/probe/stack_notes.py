"""--stack with --record: what a recording keeps beside its spans so that `btfgen decode` names
its stacks elsewhere, later, once the traced processes are gone (recording.py's notes): each
process's maps, read where the live printer reads them (at a process's first stack, and again
at an address in none of them: a dlopen), each mapped object's path and build id, and the
kernel's symbols naming the kernel frames recorded.

The user stacks are unwound here as the printer unwinds them (symbolize.UserStacks), so that
the maps are read at the same events, including for the return addresses the unwind finds past
the first frame; what is named is thrown away (decode names it again, from the notes)."""

from __future__ import annotations

import struct

from . import spec_format, stack_wire, symbolize
from .event import HEAD_FORMAT


class _NotingUserStacks(symbolize.UserStacks):
    """UserStacks whose reads of maps and objects are noted for the recording."""

    def __init__(self, arch: str, notes: StackNotes) -> None:
        super().__init__(arch)
        self.notes = notes
        self.noted: dict[int, list | str] = {}  # each process's maps as last noted

    def read_maps(self, tgid: int):
        maps = super().read_maps(tgid)
        # read again at each address in no mapping (code made at run time): noted when changed
        if self.noted.get(tgid) != maps:
            self.noted[tgid] = maps
            self.notes.maps.append({"tgid": tgid, "why": maps} if isinstance(maps, str) else
                                   {"tgid": tgid, "maps": [list(m) for m in maps]})
        return maps

    def open_object(self, path: str):
        obj = super().open_object(path)
        if path.startswith("/"):  # not the uretprobe trampoline's mapping
            self.notes.objects.append({"path": path, "why": obj.why,
                                       "build_id": obj.elf.build_id if obj.elf else None})
        return obj


class StackNotes:
    """The sink of the ring's spans for a recording with --stack: each span's stacks looked
    at, what decode needs of them written as a note before the span (Writer.note), then the
    span (Writer.span)."""

    def __init__(self, writer, descriptors, arch: str, order: str, kallsyms: str) -> None:
        self.writer = writer
        # where each function's entry's stack part starts (after the data its decoder wrote)
        self.stack_at = {d.btf_id: spec_format.event_size(d, 0) for d in descriptors}
        self.order = order
        self.heads = struct.Struct(("<" if order == "little" else ">") + HEAD_FORMAT)
        self.user = _NotingUserStacks(arch, self)
        self.kernel = symbolize.KernelSymbols(kallsyms)
        self.kernel_named: set[int] = set()  # kernel addresses whose symbols are noted
        self.maps: list[dict] = []
        self.objects: list[dict] = []
        self.symbols: list[list] = []

    def span(self, span) -> None:
        for raw in span:
            self._event(raw)
        if self.maps or self.objects or self.symbols:
            note = {"maps": self.maps, "objects": self.objects, "kernel": self.symbols}
            self.maps, self.objects, self.symbols = [], [], []
            self.writer.note(note)
        self.writer.span(span)

    def _event(self, raw) -> None:
        if len(raw) < self.heads.size:
            return
        tgid, tid, _comm, _ns, _cpu, flags, btf_id, kind, _failed = self.heads.unpack_from(raw)
        at = self.stack_at.get(btf_id)
        if not flags & stack_wire.EVENT_STACK or kind != 0 or at is None:
            return
        try:
            sample = stack_wire.read(raw, at, self.order)
        except stack_wire.BadStack:
            return  # recorded as it is: decode says what is wrong with it
        for ip in sample.kernel:
            if ip not in self.kernel_named:
                self.kernel_named.add(ip)
                f = self.kernel.frame(ip)
                self.symbols.append([ip, f.symbol, f.offset, f.object, f.why])
        if sample.user_fp or sample.slice or sample.sp:
            self.user.unwind(sample, tgid, tid)
