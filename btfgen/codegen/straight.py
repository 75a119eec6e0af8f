"""Straight-line generic decoders: one per distinct list of copy operations (issue 24).

The generic decoder's interpreter runs a function's ops in a loop the verifier cannot see
through: ~20 ns a call where the reads themselves cost a few. A whole kernel's tens of thousands
of functions share a few hundred to 1,500 distinct op lists (benchmarks/bench_plans.py), so each
list becomes straight-line C making exactly its reads at constant offsets, and each spec names
its lists (`entry_plan`, `exit_plan`: the decoder's number; 0 keeps the function on the
interpreter). One program holds them all behind a switch on the spec's number: a tail call
through a program array would need a program per list to load and verify, and an exit that
carries the hidden return pointer needs its entry's record in the same program anyway.

Most functions need no decoder of their own: their values are argument registers, each in the
record slot of its place in the argument list, and one decoder copying all those words whole
(the register image, number 1) serves them all. It reads a few registers more than a function
with fewer arguments needs, and has no branch on the function: under mass attach calls of many
functions interleave, and the switch over hundreds of decoders then mispredicted at every call
(bench_generic's mix: 12.7 ns a decode through the switch, 3-4 ns with the image). Its number
is 1 in every table, with or without an image, so that an attach cookie can say "on the image"
(spec_format.Cookie) and such a call is decoded with no lookup of its spec.

Entry and exit lists are numbered apart (a function's entry is a kprobe's, its exit a
kretprobe's), an exit list with the bit of its first op (its entry's op count), since the
record's failed bits of exit ops follow the entry's.

Capture ops (what a pointer argument points to) are steps too: each calls the capture
subprogram the interpreter calls, on the spec's own op, whose index is the same in every spec
sharing the list. The helper reads dominate a capture's cost; what the list saves is the
interpreter's loop around them and its reads of the other ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from btfgen.probe import spec_format
from btfgen.decoder.generic import (CAP_BUF, CAP_COPY, CAP_ROOT, CAP_STR, FROM_CTX, FROM_PTR,
                                    FROM_STACK, GenericPlan, Op, data_end)


@dataclass(frozen=True, slots=True)
class CtxWindow:
    """The ctx bytes a straight-line decoder loads directly, in words of `word` bytes from `lo`
    up to `end`: the argument and return registers, the span the interpreter's snapshot loads
    (bpf._snapshot), so no plan loads what the interpreter does not."""

    lo: int
    end: int
    word: int

    def word_of(self, op: Op) -> int | None:
        """The ctx offset of the word holding all of `op`'s bytes; None: none does."""
        at = op.src - (op.src - self.lo) % self.word
        if op.src < self.lo or op.src + op.size > min(at + self.word, self.end):
            return None
        return at


@dataclass(frozen=True, slots=True)
class Step:
    """One copy of a straight-line decoder, as the template prints it."""

    source: int  # FROM_CTX, FROM_STACK, FROM_PTR
    src: int  # FROM_CTX: the word's ctx offset; else the op's src
    skip: int  # FROM_CTX: the op's bytes start this far into the word
    dst: int
    size: int
    bit: int  # the record's failed bit for this op; a capture: its index in the spec's ops
    space: int = 0  # a capture's load: the memory it reads (Op.space)

    @property
    def capture(self) -> bool:
        """A capture op: run by the capture subprogram on the spec's own op (its index is the
        same in every spec sharing the list), so each is verified once per call site."""
        return self.source >= CAP_ROOT

    @property
    def root(self) -> bool:
        """A capture's first op (the pointer it starts from, in the record): inline."""
        return self.source == CAP_ROOT

    @property
    def load(self) -> bool:
        """A capture's last op (the bytes or the string it points to): inline, its offsets and
        size constants; a hop between pointers calls the capture subprogram."""
        return self.source in (CAP_COPY, CAP_STR)

    @property
    def string(self) -> bool:
        return self.source == CAP_STR

    @property
    def buffer(self) -> bool:
        """A buffer's last op (its length in the record at `src`): inline, as a load."""
        return self.source == CAP_BUF


IMAGE = spec_format.IMAGE_PLAN  # the register image's number, of each kind


@dataclass(frozen=True, slots=True)
class Straight:
    """One straight-line decoder: its number (1-based) and steps."""

    number: int
    steps: tuple[Step, ...]
    users: int  # distinct generic plans (prototypes, mostly) that run it
    image: bool = False  # the register image (RegisterImage): run before the switch


@dataclass(frozen=True)
class PlanTable:
    """Every distinct op list of a set of plans that can run straight-line: of each kind, the
    register image first, then the others in the order the plans first use them
    (deterministic: the functions' order)."""

    entry: tuple[Straight, ...]
    exit: tuple[Straight, ...]
    interpreted: tuple[str, ...]  # why each list left on the interpreter is (one per list)
    _ids: dict = field(repr=False, compare=False)
    # id(plan) -> (plan, its ids), filled by plan_table for its plans and by ids() for others: a
    # key hashes every Op of the list (a Python call each, half a million for a whole kernel's
    # specs and module), where the plans are a few shared objects.
    _by_plan: dict = field(default_factory=dict, repr=False, compare=False)
    # The same for sizes(), and each kind's image_size(): asked per spec, made once.
    _sizes_by_plan: dict = field(default_factory=dict, repr=False, compare=False)
    _image_sizes: dict = field(default_factory=dict, repr=False, compare=False)

    def ids(self, p: GenericPlan) -> tuple[int, int]:
        """(entry_plan, exit_plan) of a spec; 0 where the interpreter runs the ops, 1 the register
        image (IMAGE)."""
        known = self._by_plan.get(id(p))
        if known is not None and known[0] is p:
            return known[1]
        ids = (self._ids.get((0, 0, p.entry_ops), 0),
               self._ids.get((1, len(p.entry_ops), p.exit_ops), 0))
        self._by_plan[id(p)] = (p, ids)  # the plan kept alive: its id stays its own
        return ids

    def image_size(self, kind: int) -> int:
        """The record data bytes the register image of `kind` writes (0: there is none): its
        furthest word's end, rounded up to 8."""
        known = self._image_sizes.get(kind)
        if known is None:
            known = 0
            for s in self.exit if kind else self.entry:
                if s.image:
                    known = data_end(tuple(Op(FROM_CTX, t.src, t.dst, t.size) for t in s.steps))
                    break
            self._image_sizes[kind] = known
        return known

    def sizes(self, p: GenericPlan) -> tuple[int, int]:
        """(entry_size, exit_size) of a spec: the record data bytes the decoder that runs each
        kind writes, what the BPF side sends. On the register image that is the image's bytes,
        however few of its words the function uses: a call decoded by its attach cookie alone
        has no spec to say less, and the image writes them all."""
        known = self._sizes_by_plan.get(id(p))
        if known is not None and known[0] is p:
            return known[1]
        own = p.sizes
        sizes = tuple(max(own[k], self.image_size(k)) if n == IMAGE else own[k]
                      for k, n in enumerate(self.ids(p)))
        self._sizes_by_plan[id(p)] = (p, sizes)  # the plan kept alive: its id stays its own
        return sizes

    def on_image(self, p: GenericPlan) -> tuple[bool, bool]:
        """Whether the register image decodes the function's entry, its exit."""
        return tuple(n == IMAGE for n in self.ids(p))


def window(snapshot: dict, word: int) -> CtxWindow | None:
    """The direct-load window from bpf._snapshot's figures; None: no ctx op loads directly."""
    if not snapshot.get("snap_words"):
        return None
    lo = snapshot["snap_lo"]
    return CtxWindow(lo, lo + snapshot["snap_words"] * word, word)


def _steps(ops: tuple[Op, ...], first: int, win: CtxWindow | None) -> tuple[Step, ...] | str:
    """The steps of an op list, or why it stays on the interpreter."""
    steps = []
    for i, op in enumerate(ops):
        bit = first + i
        if op.source == FROM_CTX:
            at = win.word_of(op) if win else None
            if at is None:
                return "a register outside the ctx words the decoder loads"
            steps.append(Step(FROM_CTX, at, op.src - at, op.dst, op.size, bit))
        elif op.source in (FROM_STACK, FROM_PTR) or CAP_ROOT <= op.source <= CAP_BUF:
            steps.append(Step(op.source, op.src, 0, op.dst, op.size, bit, op.space))
        else:
            return f"an op of unknown source {op.source}"
    return tuple(steps)


@dataclass(frozen=True, slots=True)
class RegisterImage:
    """The decoder most functions share: every argument (or return) register word most op lists
    read, each copied whole to the one record offset they agree on. It serves every list of
    register copies it covers, whatever their sizes and however few of the registers they use,
    and it has no branch: calls of different functions interleave under mass attach, and a
    branch on the function (a switch over hundreds of decoders) mispredicts where a few more
    loads and stores from the ctx cost a cycle or two and cannot fail."""

    slots: tuple[tuple[int, int], ...]  # (ctx word offset, record data offset), by data offset
    word: int

    def covers(self, steps: tuple[Step, ...]) -> bool:
        at = dict(self.slots)
        return all(s.source == FROM_CTX and at.get(s.src) == s.dst - s.skip for s in steps)

    def steps(self) -> tuple[Step, ...]:
        return tuple(Step(FROM_CTX, w, 0, d, self.word, 0) for w, d in self.slots)


def register_image(lists: list, users: dict, word: int) -> RegisterImage | None:
    """The image of `lists` ((key, steps), in first-use order): the lists of register copies
    taken by use, most used first, each adding its (register word, record offset) pairs where
    they agree with those taken so far (a word in one place, whole words apart). None: no list
    copies registers only (or there is no ctx window)."""
    if not word:
        return None
    slots: dict[int, int] = {}
    for i in sorted(range(len(lists)), key=lambda i: -users[lists[i][0]]):
        steps = lists[i][1]
        if not steps or any(s.source != FROM_CTX for s in steps):
            continue
        merged = dict(slots)
        if any(s.dst - s.skip < 0 or merged.setdefault(s.src, s.dst - s.skip) != s.dst - s.skip
               for s in steps):
            continue
        at = sorted(merged.values())
        if any(b - a < word for a, b in zip(at, at[1:])):
            continue
        slots = merged
    if not slots:
        return None
    return RegisterImage(tuple(sorted(slots.items(), key=lambda s: s[1])), word)


# The most straight-line decoders of each kind one program holds. A whole kernel's 900-odd
# entry decoders behind one switch made arm64 7.2's verifier refuse the trace program (E2BIG:
# every case is a path it walks to the end); the commonest ones serve most functions, and the
# rest run on the interpreter, as before.
MAX_DECODERS = 256


def plan_table(plans, win: CtxWindow | None, limit: int = MAX_DECODERS,
               own: int | None = None) -> PlanTable:
    """The table for `plans` (GenericPlan, shared objects counted once): of each kind, the
    register image (number 1) for every list it covers, then at most `limit` decoders in all,
    the ones the most plans use (ties: the first used). With `own`, the lists of the first `own`
    plans come before the others' whatever their use (the functions a header is for, before
    other functions' decoders it holds too)."""
    ids: dict = {}
    lists: dict[int, list] = {0: [], 1: []}
    # key -> [its users, its number]: one lookup a plan and kind, since a key hashes and compares
    # each Op of its list in Python (a whole kernel's 25,000 plans share a thousand lists); each
    # plan keeps its two slots, so its numbers need no lookup afterwards.
    slots: dict = {}
    planned: list = []  # (plan, entry slot, exit slot), each plan once
    why: dict = {}
    seen: set[int] = set()
    mine: set = set()
    for at, p in enumerate(plans):
        if id(p) in seen:
            continue
        seen.add(id(p))
        got = []
        # Keyed with the kind too: a function with no argument and no return value has the
        # same empty list, from bit 0, at entry and at exit, and each switch numbers its own.
        for kind, key in ((0, (0, 0, p.entry_ops)), (1, (1, len(p.entry_ops), p.exit_ops))):
            if own is not None and at < own:
                mine.add(key)
            slot = slots.get(key)
            if slot is not None:
                slot[0] += 1
            else:
                slot = slots[key] = [1, 0]
                made = _steps(key[2], key[1], win)
                if isinstance(made, str):
                    why[key] = made
                else:
                    lists[kind].append((key, made))
                    ids[key] = len(lists[kind])
            got.append(slot)
        planned.append((p, got[0], got[1]))
    users = {key: slot[0] for key, slot in slots.items()}
    word = win.word if win else 0
    entry, exit_ = (_numbered(lists[k], users, mine, word, limit, why, ids) for k in (0, 1))
    for key in why:
        ids.pop(key, None)
    for key, slot in slots.items():
        slot[1] = ids.get(key, 0)
    by_plan = {id(p): (p, (e[1], x[1])) for p, e, x in planned}
    return PlanTable(entry, exit_, tuple(why.values()), ids, by_plan)


def _numbered(lists: list, users: dict, mine: set, word: int, limit: int, why: dict,
              ids: dict) -> tuple[Straight, ...]:
    """One kind's decoders, numbering `ids`: the register image (1) for every list it covers,
    then the others, at most `limit` decoders in all (those left out are given a reason in
    `why`)."""
    image = register_image(lists, users, word)
    served, others = [], []
    for key, steps in lists:
        if image and image.covers(steps):
            served.append(key)
        else:
            others.append((key, steps))
    room = limit - (1 if image else 0)
    if len(others) > room:
        ranked = sorted(range(len(others)),
                        key=lambda i: (others[i][0] not in mine, -users[others[i][0]]))
        kept = set(ranked[:room])
        for i, (key, _) in enumerate(others):
            if i not in kept:
                why[key] = (f"past the {limit} straight-line decoders one program holds "
                            "(the verifier's limit)")
        others = [item for i, item in enumerate(others) if i in kept]
    made = []
    if image:
        made.append(Straight(1, image.steps(), sum(users[key] for key in served), True))
        ids.update((key, 1) for key in served)
    # 1 is the image's even where there is none: an attach cookie says "on the image" by the
    # number alone (spec_format.cookie), with no table at hand.
    for n, (key, steps) in enumerate(others, 2):
        ids[key] = n
        made.append(Straight(n, steps, users[key]))
    return tuple(made)


def counts(table: PlanTable) -> str:
    """One line for a header comment and the benchmarks."""
    reasons: dict[str, int] = {}
    for r in table.interpreted:
        reasons[r] = reasons.get(r, 0) + 1
    left = "; ".join(f"{n}: {r}" for r, n in sorted(reasons.items()))
    return (f"{len(table.entry)} entry, {len(table.exit)} exit; "
            f"{len(table.interpreted)} op lists on the interpreter" + (f": {left}" if left
                                                                      else ""))
