"""Prototypes to test: a fixed regression corpus of hard cases plus seeded random ones.

The random generator is a plain seeded `random.Random` (deterministic, no shrinking needed: a
failure names its prototype in full). `BTFGEN_CONFORMANCE_N` sets how many random prototypes each
arch gets; the default tops every arch up to at least 200 prototypes.
"""

from __future__ import annotations

import itertools
import os
import random

from .cmodel import (
    BOOL,
    CHAR,
    CHARP,
    DOUBLE,
    FLOAT,
    INT,
    INT128,
    INTEGERS,
    LLONG,
    LONG,
    SCHAR,
    SHORT,
    UCHAR,
    UINT,
    UINT128,
    ULLONG,
    ULONG,
    USHORT,
    VOIDP,
    CType,
    EnumT,
    Field,
    Proto,
    Record,
    Scalar,
    size_bound,
)

MIN_TOTAL = 200
MAX_PARAMS = 12


class _Names:
    """Unique tags; `space` keeps the regression and the random corpus apart."""

    def __init__(self, space: str) -> None:
        self._space = space
        self._n = itertools.count()

    def tag(self, prefix: str) -> str:
        return f"cf_{self._space}{prefix}{next(self._n)}"


def _rec(names: _Names, *types: CType | tuple, union=False, packed=False) -> Record:
    """A record from member specs: a type, or (type, count) for an array, or (type, 0, bits)."""
    fields = []
    for i, spec in enumerate(types):
        t, count, bits = (spec, 0, 0) if not isinstance(spec, tuple) else (*spec, 0)[:3]
        fields.append(Field(f"f{i}", t, count, bits))
    return Record(names.tag("u" if union else "s"), tuple(fields), union, packed)


def regression(ptr: int) -> list[Proto]:
    """Hand-picked cases, each a known trap of some arch's convention (see NOTES-ABI.md)."""
    n = _Names("")
    out: list[tuple[str, CType | None, tuple[CType, ...], tuple[Scalar, ...]]] = []

    def case(label, ret, *params, tail=()):
        out.append((label, ret, params, tail))

    # i386 -mregparm=3: 64-bit values take two registers or go (with all later ones) to the stack.
    case("long long after two ints", None, INT, INT, LLONG)
    case("long long after two ints, then int", LLONG, INT, INT, LLONG, INT)
    case("long long after one int", LLONG, INT, LLONG)
    case("long long after one int, then int", INT, INT, LLONG, INT)
    case("long long first", ULLONG, LLONG, INT, INT)
    # arm AAPCS: 64-bit values in an even/odd pair, 8-aligned on the stack.
    case("arm: long long after three ints", None, INT, INT, INT, LLONG)
    case("arm: long long after three ints then int", None, INT, INT, INT, LLONG, INT)
    case("arm: int, long long, int, long long", LLONG, INT, LLONG, INT, LLONG)
    case("double after one int", DOUBLE, INT, DOUBLE)
    # riscv: a 2xXLEN value with one register left is split between a7 and the stack.
    two_xlen = _rec(n, LONG, LONG)
    case("2xXLEN struct with one register left", two_xlen, *[INT] * 7, two_xlen)
    case("2xXLEN struct with no register left", two_xlen, *[INT] * 8, two_xlen, INT)
    case("long long with one register left", LLONG, *[LONG] * 7, LLONG, INT)
    case("double with one register left", DOUBLE, *[LONG] * 7, DOUBLE)
    # s390x: aggregates not of size 1, 2, 4, 8 go by reference.
    s12 = _rec(n, INT, INT, INT)
    case("12-byte struct", s12, s12, INT)
    case("12-byte struct after five ints", s12, *[INT] * 5, s12)
    case("3-byte struct", _rec(n, (UCHAR, 3)), _rec(n, (UCHAR, 3)), INT)
    # ppc64le: arguments past r10 live in the parameter save area.
    for k in (8, 9, 10, 12):
        case(f"{k} longs", LONG, *[LONG] * k)
    case("12 mixed", INT, INT, CHAR, SHORT, LONG, LLONG, VOIDP, UINT, UCHAR, USHORT, ULONG,
         ULLONG, BOOL)
    case("structs past the registers", None, *[LONG] * 7, _rec(n, INT, SHORT), s12,
         _rec(n, (UCHAR, 24)))
    # arm64: 24-byte struct returned through x8 while x0 is an argument.
    s24 = _rec(n, LONG, LONG, LONG)
    case("24-byte struct return with args", s24, LONG, LONG, LONG)
    case("large struct return with a large struct arg", _rec(n, (INT, 10)), _rec(n, (INT, 9)),
         INT)
    # Structs of every size 1..64, with several alignments, as argument and as return value.
    for size in range(1, 65):
        s = _rec(n, (UCHAR, size))
        case(f"char[{size}] struct", s, INT, s, CHAR)
    for elem, width in ((USHORT, 2), (UINT, 4), (ULLONG, 8)):
        for size in range(width, 65, width * (2 if width == 2 else 1)):
            s = _rec(n, (elem, size // width))
            case(f"{elem.c}[{size // width}] struct", s, s, SHORT)
    case("int+char struct (padding)", _rec(n, INT, CHAR), _rec(n, CHAR, LLONG), INT)
    case("packed", _rec(n, CHAR, INT, SHORT, packed=True), _rec(n, CHAR, LLONG, packed=True),
         INT)
    case("packed 7 bytes", None, INT, _rec(n, CHAR, SHORT, INT, packed=True), INT)
    inner = _rec(n, SHORT, CHAR)
    case("nested", _rec(n, inner, INT, inner), _rec(n, CHAR, _rec(n, inner, LLONG)), INT)
    case("array inside", _rec(n, (SHORT, 3), CHAR), _rec(n, INT, (CHAR, 5)), INT)
    u = _rec(n, INT, (CHAR, 6), SHORT, union=True)
    case("unions", u, _rec(n, LLONG, INT, union=True), u, _rec(n, CHAR, SHORT, union=True))
    case("bitfields", _rec(n, (UINT, 0, 3), (INT, 0, 7), (UCHAR, 0, 2), (ULLONG, 0, 33)),
         _rec(n, (UINT, 0, 1), (UINT, 0, 30), SHORT, (INT, 0, 12)), INT)
    case("bitfields 2", _rec(n, (USHORT, 0, 5), (UCHAR, 0, 3)), INT,
         _rec(n, (ULLONG, 0, 40), (ULLONG, 0, 20), (UINT, 0, 4)))
    case("bool/char/short", BOOL, BOOL, SCHAR, UCHAR, SHORT, USHORT, BOOL)
    e32 = EnumT(n.tag("e"), (("cf_e32a", -3), ("cf_e32b", 7)))
    e64 = EnumT(n.tag("e"), (("cf_e64a", 1), ("cf_e64b", 0x123456789A)))
    eneg = EnumT(n.tag("e"), (("cf_enga", -0x123456789A), ("cf_engb", 1)))
    case("enums", e32, e32, e64, eneg, INT)
    case("enum64 return", e64, e64)
    case("pointers", CHARP, VOIDP, CHARP, INT)
    case("12 ints", INT, *[INT] * 12)
    case("12 long longs", LLONG, *[LLONG] * 12)
    case("12 chars", CHAR, *[CHAR] * 12)
    case("float/double", FLOAT, FLOAT, DOUBLE, INT, FLOAT)
    case("double return", DOUBLE, DOUBLE, LONG)
    case("float struct", _rec(n, FLOAT, FLOAT), _rec(n, FLOAT, FLOAT), INT)
    case("double struct", _rec(n, DOUBLE, DOUBLE), INT, _rec(n, DOUBLE, DOUBLE))
    case("mixed float struct", _rec(n, LONG, DOUBLE), _rec(n, INT, FLOAT), _rec(n, DOUBLE, INT),
         INT)
    case("variadic ints", INT, INT, tail=(INT, LONG))
    case("variadic after long long", LLONG, INT, LLONG, tail=(INT, INT))
    case("variadic long tail", LONG, *[LONG] * 3, tail=(LONG,) * 8)
    case("variadic struct named", INT, _rec(n, INT, INT), INT, tail=(LONG,))
    # arm (gcc >= 9, PR 88469): a bitfield's declared 64-bit type makes even a packed struct
    # doubleword-aligned for argument passing; a packed double member does not.
    case("packed struct with a long long bitfield", None, INT,
         _rec(n, CHAR, (LLONG, 0, 40), packed=True), INT)
    case("packed struct with a double", None, INT, _rec(n, CHAR, DOUBLE, packed=True), INT)
    # arm64 HFAs and x86_64 SSE class include unions whose members are all one float type.
    uf = _rec(n, FLOAT, FLOAT, union=True)
    ud = _rec(n, DOUBLE, DOUBLE, union=True)
    case("union of floats", uf, INT, uf, ud, INT)
    # i386: a struct with a float mode travels like the float; an aggregate containing an
    # array of an odd size has no integer mode and is returned in memory despite its size.
    case("struct of one double", _rec(n, DOUBLE), INT, _rec(n, DOUBLE), INT)
    case("struct of one float", _rec(n, FLOAT), _rec(n, FLOAT), INT)
    case("4-byte struct with char[3]", _rec(n, (CHAR, 3), CHAR), INT, INT)
    case("8-byte struct with short[3]", _rec(n, (SHORT, 3), CHAR), INT, INT)
    if ptr == 8:
        case("__int128", INT128, INT128, INT)
        case("__int128 after one int", UINT128, INT, UINT128)
        case("__int128 with one register left", INT128, *[LONG] * 7, INT128)
        case("__int128 past the registers", INT, *[LONG] * 8, UINT128, INT)
        case("__int128 in a struct", _rec(n, CHAR, INT128), INT, _rec(n, INT128, INT))
        case("variadic __int128 named", INT, INT, INT128, tail=(LONG,))
    return [
        Proto(f"cf_{i}", ret, params, tail, bool(tail), label)
        for i, (label, ret, params, tail) in enumerate(out)
    ]


# -- random ----------------------------------------------------------------------------------
def _scalar(rng: random.Random, ptr: int, *, wide: bool) -> Scalar:
    pool = [*INTEGERS, BOOL, VOIDP, CHARP, FLOAT, DOUBLE]
    if wide and ptr == 8:
        pool += [INT128, UINT128]
    return rng.choice(pool)


def _member_type(rng: random.Random, n: _Names, ptr: int, depth: int) -> CType:
    r = rng.random()
    if r < 0.12 and depth < 2:
        return _record(rng, n, ptr, depth + 1)
    if r < 0.18:
        return _enum(rng, n)
    return _scalar(rng, ptr, wide=rng.random() < 0.1)


def _enum(rng: random.Random, n: _Names) -> EnumT:
    tag = n.tag("e")
    big = rng.random() < 0.3
    lo = -rng.randrange(1, 1 << (40 if big else 20)) if rng.random() < 0.5 else 0
    hi = rng.randrange(1, 1 << (40 if big else 20))
    return EnumT(tag, ((f"{tag}_lo", lo), (f"{tag}_hi", hi)))


def _record(rng: random.Random, n: _Names, ptr: int, depth: int = 0) -> Record:
    for _ in range(100):
        union = rng.random() < 0.2
        # BTF records no alignment: a packed record is only recognisable by a member off its
        # natural offset. Packed records here start with a char so the next member shows it;
        # invisibly packed ones (packed unions, naturally laid out structs) are a documented
        # limit of BTF, not something placement could get right.
        packed = not union and rng.random() < 0.15
        all_float = rng.random() < 0.1
        fields = [Field("f0", CHAR)] if packed else []
        for i in range(len(fields), rng.randint(2 if packed else 1, 6)):
            if all_float:
                fields.append(Field(f"f{i}", rng.choice((FLOAT, DOUBLE))))
                continue
            r = rng.random()
            if r < 0.15 and not union:
                base = rng.choice((UCHAR, USHORT, UINT, INT, ULLONG, LLONG))
                width = {"unsigned char": 8, "unsigned short": 16, "unsigned int": 32,
                         "int": 32}.get(base.c, 64)
                fields.append(Field(f"f{i}", base, bits=rng.randint(1, width)))
            elif r < 0.3:
                t = _scalar(rng, ptr, wide=False)
                t = t if t.kind != "bool" else UCHAR
                fields.append(Field(f"f{i}", t, count=rng.randint(1, 8)))
            else:
                t = _member_type(rng, n, ptr, depth)
                fields.append(Field(f"f{i}", t if t != BOOL else SCHAR))
        rec = Record(n.tag("u" if union else "s"), tuple(fields), union, packed)
        if size_bound(rec, ptr) <= 64:
            return rec
    return Record(n.tag("s"), (Field("f0", INT),))


def _value_type(rng: random.Random, n: _Names, ptr: int, p_aggregate: float) -> CType:
    r = rng.random()
    if r < p_aggregate:
        return _record(rng, n, ptr)
    if r < p_aggregate + 0.05:
        return _enum(rng, n)
    return _scalar(rng, ptr, wide=True)


def random_protos(ptr: int, count: int, seed: str, first: int) -> list[Proto]:
    rng = random.Random(seed)
    n = _Names("r")
    out = []
    for i in range(first, first + count):
        nparams = min(rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 3, 4, 5)),
                      MAX_PARAMS)
        params = tuple(_value_type(rng, n, ptr, 0.25) for _ in range(nparams))
        r = rng.random()
        ret = None if r < 0.1 else _value_type(rng, n, ptr, 0.45)
        variadic = bool(params) and rng.random() < 0.1
        tail = tuple(rng.choice((INT, LONG, LLONG, ULONG, VOIDP)) for _ in
                     range(rng.randint(0, 6))) if variadic else ()
        out.append(Proto(f"cf_{i}", ret, params, tail, variadic))
    return out


def corpus(arch: str, ptr: int) -> list[Proto]:
    fixed = regression(ptr)
    env = os.environ.get("BTFGEN_CONFORMANCE_N")
    count = int(env) if env else max(MIN_TOTAL - len(fixed), 64)
    return fixed + random_protos(ptr, count, f"btfgen-conformance:{arch}", len(fixed))
