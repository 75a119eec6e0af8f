"""--capture options: parsed with the column of what is wrong, resolved against BTF into the
pointer loads and the final read, default strings for `char *` arguments only, and the generic
plan's capture ops within the record and the op table."""

from __future__ import annotations

import pytest

import btfgen
from btfgen.btf import types as T
from btfgen.decoder import generic
from btfgen.typed import capture as C

HEADER = r"""
struct qstr { unsigned int hash; unsigned int len; const unsigned char *name; };
struct dentry { int flags; struct qstr d_name; char d_iname[32]; struct dentry **up; };
struct path { void *mnt; struct dentry *dentry; };
enum mode { RD = 1, WR = 2 };
struct file { unsigned mode : 3, busy : 1; enum mode m; struct path f_path; char big[4100]; };
long vfs_read(struct file *file, char *buf, unsigned long count, const char *name,
              unsigned char *bytes, signed char *s);
struct file *get_file(int fd);
"""


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    header = tmp_path_factory.mktemp("h") / "fs.h"
    header.write_text(HEADER)
    return btfgen.open(headers=[str(header)], arch="x86_64")


def func(target, name) -> T.Func:
    return target.types.find_funcs(name)[0]


def resolve(target, name, text, **kw) -> C.Capture:
    return C.resolve(func(target, name), C.parse(f"{name}: {text}").paths[0], **kw)


def test_a_string_through_two_pointers(target):
    c = resolve(target, "vfs_read", "file->f_path.dentry->d_name.name", limit=64)
    assert c.string and c.size == 64 and c.param == 0 and c.within == 0
    assert [h.offset for h in c.hops] == [16, 16]  # dentry in file, name in dentry
    assert [h.name for h in c.hops] == ["file->f_path.dentry", "file->f_path.dentry->d_name.name"]
    assert c.root == "file" and (c.offset, c.type) == (0, None)
    # headers carry no __user tags: every load is "try kernel, then user"
    assert {h.space for h in c.hops} == {C.EITHER} and c.space == C.EITHER


def test_a_member_a_bitfield_a_whole_pointee(target):
    m = resolve(target, "vfs_read", "file->m")
    assert (m.string, m.hops, m.offset, m.size) == (False, (), 4, 4)
    bits = resolve(target, "vfs_read", "file->busy")
    assert (bits.offset, bits.bit_offset, bits.bit_size, bits.size) == (0, 3, 1, 1)
    whole = resolve(target, "vfs_read", "*file->f_path.dentry")
    assert [h.name for h in whole.hops] == ["file->f_path.dentry"]
    assert (whole.offset, whole.size) == (0, 64)


def test_an_index_into_an_array_loads_nothing_one_through_a_pointer_does(target):
    arr = resolve(target, "vfs_read", "file->f_path.dentry->d_iname[3]")
    assert [h.name for h in arr.hops] == ["file->f_path.dentry"]
    ptr = resolve(target, "vfs_read", "file->f_path.dentry->up[1]->flags")
    assert [h.name for h in ptr.hops] == ["file->f_path.dentry", "file->f_path.dentry->up",
                                          "file->f_path.dentry->up[1]"]


def test_default_strings_are_char_pointers_only(target):
    caps = C.default_strings(func(target, "vfs_read"), 100)
    assert [c.text for c in caps] == ["buf", "name"]  # not unsigned char *, signed char *
    assert all(c.string and c.size == 100 and not c.hops for c in caps)
    # An explicit path to an unsigned char pointer is a string all the same.
    assert resolve(target, "vfs_read", "bytes").string


@pytest.mark.parametrize("option, column, says", [
    ("vfs_read file", 1, "expected 'FUNC: PATH, PATH'"),
    ("vfs_read: file->nope", 17, "has no member 'nope'"),
    ("vfs_read: file, ", 17, "an empty path"),
    ("vfs_read: file->f_path..x", 24, "not a path"),
    ("vfs_read: count", 11, "the argument's own value"),
    ("vfs_read: *file", 11, "4128 bytes"),  # struct file is larger than one operation
    ("vfs_read: $retval->m", 20, "long int is not a pointer"),
])
def test_errors_name_the_column(target, option, column, says):
    with pytest.raises(C.CaptureError) as e:
        reqs = [C.parse(option)]
        C.for_functions([func(target, "vfs_read")], reqs)
    assert e.value.column == column and says in str(e.value), str(e.value)
    assert e.value.option == option


def test_a_capture_of_a_function_not_traced_is_refused(target):
    with pytest.raises(C.CaptureError, match="not among the functions traced"):
        C.for_functions([func(target, "vfs_read")], [C.parse("get_file: $retval->m")])


def test_return_value_paths_are_exit_captures(target):
    caps = C.for_functions([func(target, "get_file")], [C.parse("get_file: $retval->m")])
    (c,) = caps["get_file"]
    assert c.at_exit and c.param is None


def _plan(target, name, caps, **kw):
    placed = target.placement([func(target, name)]).layout
    f = placed.functions[0]
    return generic.plan(f.proto, "little", 8, caps, **kw)


def test_plan_ops_and_heads(target):
    f = func(target, "vfs_read")
    caps = C.for_functions([f], [C.parse("vfs_read: file->f_path.dentry->d_name.name, "
                                         "file->busy")], limit=32, strings=True)["vfs_read"]
    # what the user named first, then the default strings (they give way first)
    assert [c.text for c in caps] == ["file->f_path.dentry->d_name.name", "file->busy", "buf",
                                      "name"]
    assert [c.default for c in caps] == [False, False, True, True]
    p = _plan(target, "vfs_read", caps)
    heads = [cp.head for cp in p.captures]
    assert all(h % 8 == 0 for h in heads) and heads == sorted(heads)
    cap_ops = [o for o in p.entry_ops if o.source >= generic.CAP_ROOT]
    kinds = [o.source for o in cap_ops]
    R, H, S, K = generic.CAP_ROOT, generic.CAP_HOP, generic.CAP_STR, generic.CAP_COPY
    assert kinds == [R, H, H, S, R, K, R, S, R, S]
    # the string reads one character past the limit and the NUL; it follows its head
    strs = [o for o in cap_ops if o.source == S]
    assert [o.size for o in strs] == [34] * 3
    assert [o.dst for o in strs] == [heads[i] + generic.CAPTURE_HEAD_SIZE for i in (0, 2, 3)]
    # each HOP names its capture's head; ROOT reads the argument's record bytes
    assert all(o.dst == heads[0] for o in cap_ops if o.source == H)
    assert cap_ops[6].src == p.entry[1].data_off and p.captures[2].root_mask == p.entry[1].op_mask
    assert all(o.dst + o.size <= generic.DATA_SIZE and o.dst < generic.OP_LIMIT
               for o in cap_ops)


def test_plan_leaves_out_what_does_not_fit_and_says_so(target):
    f = func(target, "vfs_read")
    caps = C.for_functions([f], [], limit=C.MAX_STRING_SIZE, strings=True)["vfs_read"]
    p = _plan(target, "vfs_read", caps)
    assert p.captures[0] is not None and p.captures[1] is None  # one 511-byte string fits
    assert any("capture name: no room" in s for s in p.skipped)
    # a default string the budget cannot hold whole is shrunk to the room left; one the user
    # named is not: it is left out, said
    small = _plan(target, "vfs_read", caps[:1], budget=256)
    (shrunk,) = small.captures
    assert shrunk.size == 256 - shrunk.head - generic.CAPTURE_HEAD_SIZE - 2
    asked = C.for_functions([f], [C.parse("vfs_read: buf")], limit=C.MAX_STRING_SIZE)
    assert _plan(target, "vfs_read", asked["vfs_read"], budget=256).captures == (None,)


DEEP = r"""
struct node { int v; const char *label; struct node *next; void *opaque; void (*fn)(int);
              struct opaque *hidden; union { long n; char *text; } u; char *many[2];
              struct { struct node *prev; } link; };
struct opaque;
int walk(struct node *head, int depth);
"""


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    header = tmp_path_factory.mktemp("d") / "deep.h"
    header.write_text(DEEP)
    return btfgen.open(headers=[str(header)], arch="x86_64")


def expanded(t, option, **kw):
    notes: list[str] = []
    funcs = t.select([option.split(":")[0]]).functions
    caps = C.for_functions(funcs, [C.parse(option)], notes=notes, **kw)
    return [(c.text, c.string, [h.name for h in c.hops]) for c in caps["walk"]], notes


def test_two_stars_are_the_pointee_and_what_its_pointers_point_to(deep):
    caps, notes = expanded(deep, "walk: **head")
    assert caps == [
        ("*head", False, []),
        ("head->label", True, ["head->label"]),          # a char * is its string
        ("*head->next", False, ["head->next"]),
        ("*head->link.prev", False, ["head->link.prev"]),  # pointers of nested structs too
    ]
    # void and function pointers stay addresses; the rest is said, never dropped unsaid
    assert notes == [
        "walk: **head leaves out head->hidden: its type is only declared in this BTF, "
        "not defined",
        "walk: **head leaves out head->u: pointers in a union (which member is in use is "
        "not known)",
        "walk: **head leaves out head->many: pointers in an array",
    ]
    assert expanded(deep, "walk: *head")[0] == [("*head", False, [])]


def test_each_star_is_one_level_more(deep):
    caps, _ = expanded(deep, "walk: ***head")
    assert [c[0] for c in caps] == [
        "*head", "head->label", "*head->next", "head->next->label", "*head->next->next",
        "*head->next->link.prev", "*head->link.prev", "head->link.prev->label",
        "*head->link.prev->next", "*head->link.prev->link.prev"]
    assert caps[4][2] == ["head->next", "head->next->next"]


def test_an_expansion_is_bounded_and_says_what_it_left_out(deep):
    caps, notes = expanded(deep, "walk: *****head")
    assert len(caps) == C.MAX_EXPANDED
    assert any(f"past the {C.MAX_EXPANDED} captures one path stands for" in n for n in notes)


def test_the_memory_named_goes_with_every_path_it_stands_for(deep):
    notes: list[str] = []
    caps = C.for_functions(deep.select(["walk"]).functions, [C.parse("walk: **head:user")],
                           notes=notes)["walk"]
    assert {c.space for c in caps} == {C.USER}
    assert {h.space for c in caps for h in c.hops} == {C.USER}


def test_more_stars_on_what_is_not_a_pointer_name_the_column(deep):
    with pytest.raises(C.CaptureError) as e:
        C.for_functions(deep.select(["walk"]).functions, [C.parse("walk: **depth")])
    assert str(e.value) == "column 8: int is not a pointer" and e.value.option == "walk: **depth"
