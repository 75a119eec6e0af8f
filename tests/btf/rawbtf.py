"""A tiny BTF writer for tests: hand-built blobs with kinds and flags pahole 1.24 does not emit,
and damaged ones. Written from include/uapi/linux/btf.h, independent of btfgen's reader."""

from __future__ import annotations

import struct

KIND = {
    "INT": 1, "PTR": 2, "ARRAY": 3, "STRUCT": 4, "UNION": 5, "ENUM": 6, "FWD": 7, "TYPEDEF": 8,
    "VOLATILE": 9, "CONST": 10, "RESTRICT": 11, "FUNC": 12, "FUNC_PROTO": 13, "VAR": 14,
    "DATASEC": 15, "FLOAT": 16, "DECL_TAG": 17, "TYPE_TAG": 18, "ENUM64": 19,
}


class BtfWriter:
    def __init__(self, byte_order: str = "little", *, base_str_len: int = 0, first_id: int = 1):
        self.p = "<" if byte_order == "little" else ">"
        self.base_str_len = base_str_len
        # A split blob's strings continue the base's; a base's start with the empty string.
        self.strings = bytearray() if base_str_len else bytearray(b"\0")
        self.offsets: dict[str, int] = {} if base_str_len else {"": 0}
        self.records: list[bytes] = []
        self.first_id = first_id

    def s(self, name: str) -> int:
        if name == "" and self.base_str_len:
            return 0
        if name not in self.offsets:
            self.offsets[name] = self.base_str_len + len(self.strings)
            self.strings += name.encode() + b"\0"
        return self.offsets[name]

    def u32(self, *values: int) -> bytes:
        return struct.pack(f"{self.p}{len(values)}I", *[v & 0xFFFFFFFF for v in values])

    def add(self, kind: str | int, name: str, vlen: int, size_type: int, tail: bytes = b"",
            kflag: bool = False) -> int:
        """A record; `kind` by name, or by number for kinds this writer has no name for."""
        code = KIND[kind] if isinstance(kind, str) else kind
        info = (kflag << 31) | (code << 24) | vlen  # vlen: bits 0-23, kind: bits 24-30
        self.records.append(self.u32(self.s(name), info, size_type) + tail)
        return self.first_id + len(self.records) - 1

    # -- one helper per kind --------------------------------------------------------------------
    def int_(self, name: str, size: int, encoding: int = 0, bits: int | None = None,
             offset: int = 0) -> int:
        word = (encoding << 24) | (offset << 16) | (8 * size if bits is None else bits)
        return self.add("INT", name, 0, size, self.u32(word))

    def ref(self, kind: str, target: int, name: str = "") -> int:
        return self.add(kind, name, 0, target)

    def array(self, elem: int, index: int, nelems: int) -> int:
        return self.add("ARRAY", "", 0, 0, self.u32(elem, index, nelems))

    def composite(self, kind: str, name: str, size: int,
                  members: list[tuple[str, int, int, int]], kflag: bool = False) -> int:
        tail = b""
        for m_name, m_type, bit_off, bits in members:
            word = (bits << 24 | bit_off) if kflag else bit_off
            tail += self.u32(self.s(m_name), m_type, word)
        return self.add(kind, name, len(members), size, tail, kflag)

    def enum(self, name: str, size: int, values: list[tuple[str, int]],
             signed: bool = False) -> int:
        tail = b"".join(self.u32(self.s(n), v) for n, v in values)
        return self.add("ENUM", name, len(values), size, tail, signed)

    def enum64(self, name: str, size: int, values: list[tuple[str, int]],
               signed: bool = False) -> int:
        tail = b"".join(self.u32(self.s(n), v & 0xFFFFFFFF, (v >> 32) & 0xFFFFFFFF)
                        for n, v in values)
        return self.add("ENUM64", name, len(values), size, tail, signed)

    def fwd(self, name: str, union: bool = False) -> int:
        return self.add("FWD", name, 0, 0, kflag=union)

    def func(self, name: str, proto: int, linkage: int = 1) -> int:
        return self.add("FUNC", name, linkage, proto)

    def func_proto(self, ret: int, params: list[tuple[str, int]]) -> int:
        tail = b"".join(self.u32(self.s(n), t) for n, t in params)
        return self.add("FUNC_PROTO", "", len(params), ret, tail)

    def var(self, name: str, type_id: int, linkage: int = 1) -> int:
        return self.add("VAR", name, 0, type_id, self.u32(linkage))

    def datasec(self, name: str, size: int, vars_: list[tuple[int, int, int]]) -> int:
        tail = b"".join(self.u32(t, o, s) for t, o, s in vars_)
        return self.add("DATASEC", name, len(vars_), size, tail)

    def float_(self, name: str, size: int) -> int:
        return self.add("FLOAT", name, 0, size)

    def decl_tag(self, name: str, target: int, component_idx: int) -> int:
        return self.add("DECL_TAG", name, 0, target, self.u32(component_idx))

    def type_tag(self, name: str, target: int) -> int:
        return self.add("TYPE_TAG", name, 0, target)

    # -- the blob ---------------------------------------------------------------------------------
    def bytes(self, layout: list[tuple[int, int]] | None = None, *, hdr_len: int | None = None,
              **fields: int) -> bytes:
        """The blob. `layout`: a layout section, one (info_sz, elem_sz) per kind number from 0,
        after the types and before the strings, with the 32-byte header; `hdr_len` (24 or 32
        and up) and any header field (`layout_off=...`) may be given to damage it."""
        types = b"".join(self.records)
        section = b"".join(struct.pack(f"{self.p}BBH", info_sz, elem_sz, 0)
                           for info_sz, elem_sz in layout or ())
        if hdr_len is None:
            hdr_len = 24 if layout is None else 32
        values = {"magic": 0xEB9F, "version": 1, "flags": 0, "hdr_len": hdr_len,
                  "type_off": 0, "type_len": len(types),
                  "str_off": len(types) + len(section), "str_len": len(self.strings),
                  "layout_off": len(types), "layout_len": len(section)}
        values.update(fields)
        header = struct.pack(f"{self.p}HBBIIIIIII", *values.values())[:24]
        if hdr_len >= 32:
            header += struct.pack(f"{self.p}II", values["layout_off"], values["layout_len"])
            header += bytes(hdr_len - 32)
        else:
            header += bytes(hdr_len - 24)
        return header + types + section + bytes(self.strings)


# The layout section as an encoder of 2026 writes it for the kinds of include/uapi/linux/btf.h
# (struct btf_layout: bytes after struct btf_type, bytes per vlen item), from kind 0 (UNKN).
KNOWN_LAYOUT = [
    (0, 0),  # UNKN
    (4, 0),  # INT: the encoding word
    (0, 0), (12, 0),  # PTR, ARRAY (struct btf_array)
    (0, 12), (0, 12), (0, 8),  # STRUCT, UNION (struct btf_member), ENUM (struct btf_enum)
    (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0),  # FWD TYPEDEF VOLATILE CONST RESTRICT FUNC
    (0, 8), (4, 0), (0, 12),  # FUNC_PROTO (struct btf_param), VAR, DATASEC (btf_var_secinfo)
    (0, 0), (4, 0), (0, 0), (0, 12),  # FLOAT, DECL_TAG, TYPE_TAG, ENUM64 (struct btf_enum64)
]


def layout_with(extra: dict[int, tuple[int, int]]) -> list[tuple[int, int]]:
    """KNOWN_LAYOUT and entries for kind numbers past it (zeros between)."""
    top = max([len(KNOWN_LAYOUT) - 1, *extra])
    return [extra.get(code, KNOWN_LAYOUT[code] if code < len(KNOWN_LAYOUT) else (0, 0))
            for code in range(top + 1)]


def every_kind(byte_order: str = "little", odd: bool = True, new_kinds: bool = False) -> bytes:
    """One of each kind and kind_flag meaning, with values at the edges of their fields; `odd`:
    with a FUNC linkage (7) that bpftool prints but the type model refuses; `new_kinds`: in
    the 2026 format, with records of kinds 25 and 40 (unknown to btfgen) that its layout
    section steps over, and types referring to them."""
    w = BtfWriter(byte_order)
    i32 = w.int_("int", 4, 1)
    u8 = w.int_("unsigned char", 1, 0)
    ch = w.int_("char", 1, 2)
    w.int_("_Bool", 1, 4, bits=1)
    w.int_("odd", 8, 3, bits=33, offset=5)  # encoding 3 is no single flag: "UNKN"
    long_ = w.int_("long int", 8, 1)
    ptr = w.ref("PTR", i32)
    arr = w.array(ch, i32, 16)
    s = w.composite("STRUCT", "plain", 24, [("a", i32, 0, 0), ("p", ptr, 64, 0),
                                            ("", arr, 128, 0)])
    w.composite("STRUCT", "bits", 8, [("x", i32, 0, 3), ("y", u8, 3, 5), ("z", long_, 8, 0),
                                      ("w", i32, 0xFFFFFF, 255)], kflag=True)
    w.composite("UNION", "", 8, [("i", i32, 0, 0), ("l", long_, 0, 0)])
    w.enum("e_unsigned", 4, [("A", 0), ("B", 0xFFFFFFFF), ("C", 0x80000000)])
    w.enum("e_signed", 4, [("NEG", -1), ("MIN", -0x80000000), ("POS", 7)], signed=True)
    w.enum("", 1, [])
    w.enum64("e64u", 8, [("BIG", 0xFFFFFFFFFFFFFFFF), ("ONE", 1)])
    w.enum64("e64s", 8, [("NEG", -0x100000000), ("MIN", -(1 << 63))], signed=True)
    w.fwd("fwd_struct")
    w.fwd("fwd_union", union=True)
    td = w.ref("TYPEDEF", i32, "my_int")
    vol = w.ref("VOLATILE", td)
    cst = w.ref("CONST", vol)
    w.ref("RESTRICT", w.ref("PTR", cst))
    proto = w.func_proto(i32, [("a", ptr), ("", long_), ("", 0)])
    fn = w.func("variadic", proto, 1)
    w.func("local", w.func_proto(0, []), 0)
    w.func("ext", proto, 2)
    w.func("odd_linkage", proto, 7 if odd else 0)
    v1 = w.var("v_static", i32, 0)
    v2 = w.var("v_global", s, 1)
    v3 = w.var("v_extern", long_, 2)
    w.var("v_odd", long_, 9)
    w.datasec(".data", 64, [(v1, 0, 4), (v2, 8, 24), (v3, 32, 8)])
    w.datasec(".bss", 0, [])
    w.float_("double", 8)
    w.float_("long double", 16)
    w.decl_tag("tag_fn", fn, -1)
    w.decl_tag("tag_param", fn, 1)
    w.decl_tag("tag_member", s, 2)
    w.ref("PTR", w.type_tag("user", i32))
    w.func_proto(ptr, [])
    if not new_kinds:
        return w.bytes()
    k25 = w.add(25, "k25", 0, i32)
    k40 = w.add(40, "k40", 2, 8, w.u32(0x40000002, 1, 2, 3, 0x0D000001))
    w.func("takes_new", w.func_proto(k25, [("a", k40), ("b", w.ref("PTR", k40))]))
    w.composite("STRUCT", "holds_new", 8, [("n", k40, 0, 0), ("i", i32, 32, 0)])
    return w.bytes(layout_with({25: (0, 0), 40: (4, 8)}))
