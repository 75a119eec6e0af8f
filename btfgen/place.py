"""The placement engine: run an ABI description's rules over function prototypes.

For each value: classify its type (btfgen.abi.classify), take the first rule whose conditions
hold, try its actions left to right, record where the bytes went. The engine knows register
pools, stack slots and the trace-ctx map, and nothing about any particular architecture: every
arch-specific fact is in btfgen/abi/arches/<arch>.abi.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from btfgen.abi.classify import Classifier, Shape, pointer_shape
from btfgen.abi.convention import ArgPlace, Chunks, Convention, Regs, Rule, Stack
from btfgen.abi.ctx import resolve_ctx
from btfgen.btf import types as T
from btfgen.btf.cnames import c_spelling
from btfgen.errors import ArchError
from btfgen.gcpause import collector_paused
from btfgen.layout import (
    ArchLayout,
    CtxInfo,
    FunctionLayout,
    ProtoLayout,
    RegPiece,
    StackPiece,
    ValueLayout,
)


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _NoPlace(Exception):
    """An action found no room; the next alternative is tried."""


@dataclass(slots=True)
class _Alloc:
    """Registers handed out so far per pool (by the pool's index), bytes of stack area used."""

    next: list[int]
    stack: int = 0


@dataclass(frozen=True, slots=True)
class _InReg:
    """A located piece before the ctx map is applied: value bytes in a hardware register."""

    hwreg: str
    value_offset: int
    size: int


_Raw = _InReg | StackPiece  # a stack piece needs no map: it is final as placed


@dataclass(frozen=True, slots=True)
class _Placed:
    """One argument placed from one allocation state: what the arg cache holds."""

    pieces: tuple
    by_ref: bool
    unavailable: str | None
    shape: Shape
    next: tuple[int, ...]  # the allocation state after it
    stack: int
    refused: bool = False  # `unavailable` is why the ctx refuses the whole function


@dataclass(frozen=True, slots=True)
class _RetInRegs:
    raw: tuple[_Raw, ...]


@dataclass(frozen=True, slots=True)
class _RetSret:
    """Through the hidden pointer."""


@dataclass(frozen=True, slots=True)
class _RetUnavailable:
    reason: str
    refused: bool = False  # the ctx refuses the whole function


@dataclass(frozen=True, slots=True)
class _RetAfter:
    """`regs(POOL, after_args)`: placed once the arguments are, after the registers they took."""

    act: Regs
    shape: Shape


_RetPlan = _RetInRegs | _RetSret | _RetUnavailable | _RetAfter
@dataclass(frozen=True, slots=True)
class _Start:
    """Where a prototype's placement starts: its return value, the allocation state after it."""

    ret_refused: bool

    ret: ValueLayout | None  # None: void
    next: tuple[int, ...]
    stack: int
    after: _RetAfter | None = None  # the return value waits for the arguments' placement


class _Engine:
    """Runs the rules; each action calls back the `Placer` methods (btfgen.abi.convention) it
    means."""

    def __init__(self, conv: Convention, ctx: CtxInfo, classifier: Classifier):
        self.conv = conv
        self.ctx = ctx
        self.classifier = classifier
        self.word = conv.pointer_size
        self.regmap = {r.hwreg: r for r in ctx.registers}
        self.ptr = pointer_shape(conv.pointer_size)
        self._rule_cache: dict[tuple, Rule | None] = {}
        # A ctx with rules of its own (a trampoline's slots) is placed by them.
        self.arg_rules, self.ret_rules = conv.ctx_rules.get(ctx.name,
                                                            (conv.arg_rules, conv.ret_rules))
        self._after_cache: dict[tuple, ValueLayout] = {}
        self._pool_index = {name: i for i, name in enumerate(conv.pools)}
        # Placing one value depends only on its type and the allocation state before it, and
        # kernels share prototypes between many functions: these two caches are what makes
        # placing a whole vmlinux take seconds, not minutes.
        self._arg_cache: dict[tuple, _Placed] = {}
        self._value_cache: dict[tuple, ValueLayout] = {}
        self._proto_cache: dict[int, ProtoLayout] = {}  # by FUNC_PROTO type id
        self._start_cache: dict[tuple[int, bool], _Start] = {}  # by (return type id, variadic)
        self._spell_cache: dict[int, str] = {}

    def new_alloc(self) -> _Alloc:
        return _Alloc([0] * len(self._pool_index))

    def spell(self, t: T.Type) -> str:
        name = self._spell_cache.get(t.id)
        if name is None:
            try:
                name = c_spelling(t)
            except T.TypeWalkError as e:
                name = f"<{e}>"
            self._spell_cache[t.id] = name
        return name

    # -- rules ---------------------------------------------------------------------------------
    def rule_for(self, which: str, key: int | None, shape: Shape, variadic: bool) -> Rule | None:
        cache_key = (which, key, variadic)
        if key is not None and cache_key in self._rule_cache:
            return self._rule_cache[cache_key]
        rules = self.arg_rules if which == "args" else self.ret_rules
        rule = next((r for r in rules if r.matches(shape, variadic)), None)
        if key is not None:
            self._rule_cache[cache_key] = rule
        return rule

    # -- actions -------------------------------------------------------------------------------
    def place_arg(self, shape: Shape, key: int | None, alloc: _Alloc, variadic: bool,
                  nested: bool = False) -> ArgPlace:
        """-> (raw pieces, by_ref, unavailable reason, refused)."""
        if shape.cls in ("opaque", "void"):
            return [], False, shape.reason or "void is not a value", False
        rule = self.rule_for("args", key, shape, variadic)
        if rule is None:
            return [], False, (f"{self.conv.path}: no argument rule for a {shape.cls} of "
                               f"{shape.size} bytes"), False
        for act in rule.actions:
            try:
                return act.arg(self, shape, alloc, variadic, nested)
            except _NoPlace:
                continue
        return ([], False, f"{rule.where(self.conv.path)}: no action of this rule found a place",
                False)

    # -- what actions ask for (convention.Placer) ---------------------------------------------
    def no_room(self):
        raise _NoPlace

    def by_ref(self, alloc: _Alloc, variadic: bool, nested: bool) -> ArgPlace:
        if nested:
            raise _NoPlace  # the pointer to a copy is never itself passed by reference
        pieces, _, why, refused = self.place_arg(self.ptr, -1, alloc, variadic, True)
        return pieces, True, why, refused

    def ret_located(self, raw: list[_Raw]) -> _RetPlan:
        return _RetInRegs(tuple(raw))

    def ret_sret(self) -> _RetPlan:
        return _RetSret()

    def ret_unavailable(self, reason: str) -> _RetPlan:
        return _RetUnavailable(reason)

    def ret_refused(self, reason: str) -> _RetPlan:
        return _RetUnavailable(reason, refused=True)

    def regs(self, act: Regs, shape: Shape, alloc: _Alloc) -> list[_Raw]:
        conv = self.conv
        pool_name = act.pool
        pool = conv.pools[pool_name]
        size = shape.size
        if act.per_member:
            count = shape.hfa_members or 1
            width = size // count
        else:
            width = self.word
            count = max(1, (size + width - 1) // width)
        if conv.shared_slots:
            return self._shared(act, pool, size, width, count, alloc)
        pi = self._pool_index[pool_name]
        start = alloc.next[pi]
        if act.even:
            start += start & 1
        free = len(pool) - start
        if act.per_field:
            # Each float field alone in its register, at the field's own offset; the padding
            # after it (up to the next field or the end) rides along in the same register.
            fields = shape.float_fields
            if not fields or len(fields) > free:
                raise _NoPlace
            alloc.next[pi] = start + len(fields)
            ends = [off for off, _ in fields[1:]] + [size]
            return [_InReg(pool[start + k], off, max(n, min(self.word, end - off)))
                    for k, ((off, n), end) in enumerate(zip(fields, ends))]
        if act.below and start + count > act.below:
            raise _NoPlace  # it would reach past the pool's first `below` registers
        if count <= free:
            alloc.next[pi] = start + count
            return [_InReg(pool[start + k], k * width, min(width, size - k * width))
                    for k in range(count)]
        if act.split and free > 0 and alloc.stack == 0:
            # The first registers take the low-addressed bytes, the stack the rest (AAPCS C.5,
            # RISC-V / LoongArch 2xXLEN with one register left).
            pieces: list[_Raw] = [_InReg(pool[start + k], k * width, width) for k in range(free)]
            done = free * width
            off = alloc.stack
            alloc.stack = off + _round_up(size - done, conv.slot)
            alloc.next[pi] = len(pool)
            return pieces + [StackPiece(conv.stack_base + off, done, size - done)]
        if pool_name in conv.close_on_miss:
            alloc.next[pi] = len(pool)
        raise _NoPlace

    def _shared(self, act: Regs, pool: tuple[str, ...], size: int, width: int, count: int,
                alloc: _Alloc) -> list[_Raw]:
        """Registers shadow the first stack slots (ppc64 ELFv2): one cursor for both."""
        slot = self.conv.slot
        first = _round_up(alloc.stack, slot) // slot
        if act.even:
            first += first & 1
        if first >= len(pool) or (first + count > len(pool) and not act.split):
            raise _NoPlace
        pieces: list[_Raw] = []
        for k in range(count):
            if first + k < len(pool):
                pieces.append(_InReg(pool[first + k], k * width, min(width, size - k * width)))
            else:
                done = k * width
                pieces.append(StackPiece(self.conv.stack_base + (first + k) * slot, done,
                                         size - done))
                break
        alloc.stack = (first + count) * slot
        return pieces

    def chunks(self, act: Chunks, shape: Shape, alloc: _Alloc) -> list[_Raw]:
        """System V x86-64: each eightbyte (a word) from the pool of its class, all or none."""
        int_pool, fp_pool = act.int_pool, act.fp_pool
        w = self.word
        classes = shape.sysv or ("INTEGER",) * max(1, (shape.size + w - 1) // w)
        want = {int_pool: classes.count("INTEGER"), fp_pool: classes.count("SSE")}
        pools = self.conv.pools
        index = self._pool_index
        for name, n in want.items():
            if alloc.next[index[name]] + n > len(pools[name]):
                if name in self.conv.close_on_miss:
                    alloc.next[index[name]] = len(pools[name])
                raise _NoPlace
        pieces: list[_Raw] = []
        for k, cls in enumerate(classes):
            name = int_pool if cls == "INTEGER" else fp_pool
            idx = alloc.next[index[name]]
            alloc.next[index[name]] = idx + 1
            pieces.append(_InReg(pools[name][idx], w * k, min(w, shape.size - w * k)))
        return pieces

    def stack(self, act: Stack, shape: Shape, alloc: _Alloc) -> list[_Raw]:
        conv = self.conv
        align = conv.slot
        if act.align == "natural":
            align = max(conv.slot, shape.align)
        elif isinstance(act.align, int):
            align = max(conv.slot, act.align)
        off = _round_up(alloc.stack, align)
        size = shape.size
        alloc.stack = off + _round_up(size, conv.slot)
        pos = conv.stack_base + off
        if conv.byte_order == "big" and size < conv.slot:
            pos += conv.slot - size  # right-justified in its slot
        return [StackPiece(pos, 0, size)]

    # -- results -------------------------------------------------------------------------------
    def pieces(self, raw) -> tuple[tuple, str | None]:
        """The ctx map applied: each register piece names its ctx field."""
        out = []
        for p in raw:
            if isinstance(p, _InReg):
                r = self.regmap.get(p.hwreg)
                if r is None:
                    return (), f"in {p.hwreg}, which {self.ctx.struct_name} does not hold"
                out.append(RegPiece(r.field, r.hwreg, r.offset, r.size, p.value_offset, p.size))
            elif self.ctx.sp_offset is None:
                return (), f"on the stack, but {self.ctx.struct_name} holds no stack pointer"
            else:
                out.append(p)
        return tuple(out), None

    def function(self, func: T.Func) -> FunctionLayout:
        proto = self._proto_cache.get(func.type_id)
        if proto is None:
            proto = self._proto_cache[func.type_id] = self._proto(func.proto)
        return FunctionLayout(func.name, func.id, proto)

    def _proto(self, proto: T.FuncProto) -> ProtoLayout:
        variadic = proto.variadic
        key = (proto.ret_id, variadic)
        start = self._start_cache.get(key)
        if start is None:
            start = self._start_cache[key] = self._start(proto.ret, proto.ret_id, variadic)
        alloc = _Alloc(list(start.next), start.stack)
        refusals: list[str] = []
        args = tuple(self._arg(p, alloc, variadic, i, refusals)
                     for i, p in enumerate(proto.params))
        ret = start.ret
        if start.after is not None:
            ret = self._ret_after(proto.ret, start.after, sum(alloc.next))
        if ret is not None and ret.unavailable and start.ret_refused:
            refusals.append(f"return value: {ret.unavailable}")
        if not refusals:
            return ProtoLayout(args, ret, variadic)
        # The ctx cannot take the function: no value of it is readable there, whatever its own
        # placement said (a trampoline is never built for it).
        why = refusals[0]
        return ProtoLayout(tuple(self._refused(a, why) for a in args),
                           None if ret is None else self._refused(ret, why), variadic, why)

    def _refused(self, v: ValueLayout, why: str) -> ValueLayout:
        return ValueLayout(name=v.name, type=v.type, type_name=v.type_name, size=v.size,
                           pieces=(), by_ref=v.by_ref, at_exit=False,
                           unavailable=f"the {self.ctx.name} cannot take the function: {why}",
                           signed=v.signed)

    def _ret_after(self, ret_t: T.Type, plan: _RetAfter, taken: int) -> ValueLayout:
        """A return value placed after the `taken` registers the arguments took."""
        key = (ret_t.id, taken)
        value = self._after_cache.get(key)
        if value is None:
            alloc = self.new_alloc()
            alloc.next[self._pool_index[plan.act.pool]] = taken
            try:
                raw_plan: _RetPlan = _RetInRegs(tuple(self.regs(plan.act, plan.shape, alloc)))
            except _NoPlace:
                raw_plan = _RetUnavailable(f"{plan.act.line}:{plan.act.column}: no register of "
                                           f"{plan.act.pool} after {taken} argument registers")
            value = self._after_cache[key] = self._ret(ret_t, plan.shape, raw_plan, [], None)
        return value

    def _start(self, ret_t: T.Type, ret_id: int, variadic: bool) -> _Start:
        """The return value's layout and the allocation state the arguments start from: both
        depend only on the return type (a hidden struct-return pointer may shift the arguments)
        and whether the function is variadic, so they are decided once per pair."""
        alloc = self.new_alloc()
        ret_shape = self.classifier.shape(ret_t)
        if ret_shape.cls == "void":
            return _Start(False, None, tuple(alloc.next), alloc.stack)
        sret_raw: list[_Raw] = []
        sret_why = None
        ret_plan = self._ret_plan(ret_shape, ret_id, variadic)
        if isinstance(ret_plan, _RetAfter):
            return _Start(False, None, tuple(alloc.next), alloc.stack, ret_plan)
        refused = isinstance(ret_plan, _RetUnavailable) and ret_plan.refused
        if isinstance(ret_plan, _RetSret):
            if self.conv.sret_mode == "arg":
                sret_raw, _, sret_why, _ = self.place_arg(self.ptr, -1, alloc, variadic)
            else:
                sret_raw = [_InReg(self.conv.sret_reg, 0, self.word)]
        ret = self._ret(ret_t, ret_shape, ret_plan, sret_raw, sret_why)
        return _Start(refused, ret, tuple(alloc.next), alloc.stack)

    def _arg(self, param: T.Param, alloc: _Alloc, variadic: bool, index: int,
             refusals: list[str]) -> ValueLayout:
        """One argument's layout. Where a value goes depends only on its type and the allocation
        state before it; the layout object also on its name (`struct file *file` first is one
        object for thousands of functions). Both are memoized."""
        state = (param.type_id, variadic, alloc.stack, *alloc.next)
        hit = self._arg_cache.get(state)
        if hit is None:
            shape = self.classifier.shape(param.type)
            raw, by_ref, why, refused = self.place_arg(shape, param.type_id, alloc, variadic)
            pieces: tuple = ()
            if why is None:
                pieces, why = self.pieces(raw)
            hit = self._arg_cache[state] = _Placed(pieces, by_ref, why, shape, tuple(alloc.next),
                                                   alloc.stack, refused)
        else:
            alloc.next[:] = hit.next
            alloc.stack = hit.stack
        if hit.refused:
            refusals.append(f"arg{index}" + (f" ({param.name})" if param.name else "")
                            + f": {hit.unavailable}")
        key = (param.name, state)
        value = self._value_cache.get(key)
        if value is None:
            t, shape = param.type, hit.shape
            value = self._value_cache[key] = ValueLayout(
                name=param.name, type=t, type_name=self.spell(t), size=shape.size,
                pieces=hit.pieces, by_ref=hit.by_ref, at_exit=False, unavailable=hit.unavailable,
                signed=shape.signed and shape.cls in ("integer", "enum"))
        return value

    def _ret_plan(self, shape: Shape, key: int, variadic: bool) -> _RetPlan:
        if shape.cls == "opaque":
            return _RetUnavailable(shape.reason)
        rule = self.rule_for("ret", key, shape, variadic)
        if rule is None:
            return _RetUnavailable(f"{self.conv.path}: no return rule for a {shape.cls} of "
                                   f"{shape.size} bytes")
        for act in rule.actions:
            if isinstance(act, Regs) and act.after_args:
                return _RetAfter(act, shape)
            try:
                return act.ret(self, shape)
            except _NoPlace:
                continue
        return _RetUnavailable(f"{rule.where(self.conv.path)}: no action of this rule found a "
                               "place")

    def _ret(self, t: T.Type, shape: Shape, plan: _RetPlan, sret_raw: list[_Raw],
             sret_why: str | None) -> ValueLayout:
        name = self.spell(t)
        signed = shape.signed and shape.cls in ("integer", "enum")

        def value(pieces=(), by_ref=False, at_exit=False, why=None) -> ValueLayout:
            return ValueLayout(name="", type=t, type_name=name, size=shape.size, pieces=pieces,
                               by_ref=by_ref, at_exit=at_exit, unavailable=why, signed=signed)

        if isinstance(plan, _RetUnavailable):
            return value(why=plan.reason)
        if isinstance(plan, _RetInRegs):
            pieces, why = self.pieces(plan.raw)
            return value(pieces, at_exit=why is None, why=why)
        if self.conv.sret_exit:
            pieces, why = self.pieces([_InReg(self.conv.sret_exit, 0, self.word)])
            if why is None:
                return value(pieces, by_ref=True, at_exit=True)
        # Only the entry-time pointer is promised: a copy saved at entry finds the value.
        if sret_why is not None:
            return value(by_ref=True, why=sret_why)
        pieces, why = self.pieces(sret_raw)
        return value(pieces, by_ref=True, why=why)


def _engine(types: T.TypeSource, conv: Convention, ctx: str) -> _Engine:
    size = types.declared_pointer_size
    if size is not None and size != conv.pointer_size:
        raise ArchError(f"{types.path}: pointers are {size} bytes, but arch {conv.name} has "
                        f"{conv.pointer_size}-byte pointers")
    types.assume_pointer_size(conv.pointer_size)
    if types.byte_order not in (None, conv.byte_order):
        raise ArchError(f"{types.path}: {types.byte_order}-endian BTF, but arch {conv.name} is "
                        f"{conv.byte_order}-endian")
    return _Engine(conv, resolve_ctx(types, conv, ctx), Classifier.for_convention(conv))


def place_functions(types, conv: Convention, funcs: Iterable[T.Func],
                    ctx: str = "pt_regs") -> ArchLayout:
    """Place every function of `funcs` (FUNC types of `types`) with `conv`, for `ctx`."""
    engine = _engine(types, conv, ctx)
    with collector_paused():
        layouts = tuple(engine.function(f) for f in funcs)
    return ArchLayout(conv.name, conv.byte_order, conv.pointer_size, engine.ctx, layouts,
                      max_scalar_align=conv.max_align,
                      target_arch=conv.target_arch, address_spaces=conv.address_spaces)
