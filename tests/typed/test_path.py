"""Paths through pointers resolved against BTF: the reads a decoder makes, and one line naming
the column for a path that does not fit the types."""

from __future__ import annotations

import pytest

import btfgen
from btfgen.btf import types as T
from btfgen.typed import path as P

HEADER = r"""
struct qstr { unsigned int hash; unsigned int len; const unsigned char *name; };
struct dentry { int flags; struct qstr d_name; char d_iname[32]; };
struct path { void *mnt; struct dentry *dentry; };
struct file { unsigned mode : 3, busy : 1; unsigned int f_flags; struct path f_path;
              union { long l; struct { int lo, hi; }; }; };
struct pair { long a; struct file *f; };
struct opaque;
long vfs_read(struct file *file, char *buf, unsigned long count, long long *pos);
int by_value(struct pair p, struct opaque *o, void *v, int (*cb)(int));
struct file *get_file(int fd);
void nothing(int x);
"""


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    header = tmp_path_factory.mktemp("h") / "fs.h"
    header.write_text(HEADER)
    return btfgen.open(headers=[str(header)], arch="x86_64")


def func(target, name) -> T.Func:
    return target.types.find_funcs(name)[0]


def test_a_chain_of_pointers_is_one_read_per_hop(target):
    p = P.resolve(func(target, "vfs_read"), "file->f_path.dentry->d_name.name")
    # dentry sits at 8 + 8 in struct file, name at 8 + 8 in struct dentry (qstr aligned to 8)
    assert (p.param, p.within, [r.offset for r in p.reads]) == (0, 0, [16, 16])
    assert isinstance(P._spell(p.type), str) and "char *" in P._spell(p.type)
    assert not p.whole and p.size == 8


def test_whole_pointee_and_index(target):
    f = func(target, "vfs_read")
    whole = P.resolve(f, "*file")
    assert whole.whole and [r.offset for r in whole.reads] == [0]
    assert isinstance(whole.type, T.Struct) and whole.size == 32
    inner = P.resolve(f, "file->f_path.dentry->d_iname[3]")
    assert [r.offset for r in inner.reads] == [16, 24 + 3] and inner.size == 1
    assert [r.offset for r in P.resolve(f, "pos[2]").reads] == [16]


def test_bitfields_and_anonymous_members(target):
    f = func(target, "vfs_read")
    busy = P.resolve(f, "file->busy")
    assert (busy.reads[0].offset, busy.bit_offset, busy.bit_size, busy.size) == (0, 3, 1, 1)
    hi = P.resolve(f, "file->hi")  # a member of an anonymous struct in an anonymous union
    assert hi.reads[0].offset == 28


def test_by_value_member_and_return_value(target):
    g = func(target, "by_value")
    member = P.resolve(g, "p.a")
    assert (member.param, member.within, member.reads) == (0, 0, ())
    through = P.resolve(g, "p.f->f_flags")  # the pointer is the by-value struct's second word
    assert (through.within, [r.offset for r in through.reads]) == (8, [4])
    ret = P.resolve(func(target, "get_file"), "$retval->f_flags", at_exit=True)
    assert (ret.param, ret.root, [r.offset for r in ret.reads]) == (None, "$retval", [4])


def test_user_memory_is_unknown_without_user_tags(target):
    assert P.resolve(func(target, "vfs_read"), "buf[0]").reads[0].user is None


@pytest.mark.parametrize("name, text, column, says", [
    ("vfs_read", "file->f_pth", 7, "struct file has no member 'f_pth'"),
    ("vfs_read", "file.f_flags", 6, "is a pointer: use ->"),
    ("vfs_read", "count->x", 8, "is not a pointer"),
    ("vfs_read", "fil", 1, "no parameter 'fil' (parameters: file, buf, count, pos)"),
    ("vfs_read", "file->", 5, "not a path"),
    ("vfs_read", "  file->busy.x", 14, "a bitfield has no members"),
    ("vfs_read", "file->f_path.dentry->d_iname[32]", 30, "past the end"),
    ("vfs_read", "$retval", 1, "only at exit"),
    ("vfs_read", "*count", 1, "is not a pointer"),
    ("by_value", "o->x", 4, "only declared"),
    ("by_value", "v->x", 4, "points to nothing with a size"),
    ("by_value", "cb->x", 5, "points to nothing with a size"),
    ("nothing", "x->y", 4, "is not a pointer"),
])
def test_errors_name_the_column_of_the_step(target, name, text, column, says):
    f = func(target, name)
    with pytest.raises(P.PathError) as e:
        P.resolve(f, text)
    assert e.value.column == column, str(e.value)
    assert str(e.value).startswith(f"column {column}: ") and says in str(e.value)


def test_void_return_has_no_value(target):
    with pytest.raises(P.PathError, match="returns void"):
        P.resolve(func(target, "nothing"), "$retval", at_exit=True)


def test_memory_named_by_the_path(target):
    f = func(target, "vfs_read")
    said = P.resolve(f, "buf[0]:user")
    assert said.text == "buf[0]" and said.reads[0].user is True
    assert P.resolve(f, "file->f_path.dentry->d_name.name:kernel").pointee_user is False
    assert P.resolve(f, "buf").pointee_user is None  # no __user tags in this BTF: unknown


def test_overlapping_address_spaces_need_the_memory_named(target):
    f = func(target, "vfs_read")
    with pytest.raises(P.PathError) as e:
        P.resolve(f, "file->f_flags", separate_spaces="s390x")
    assert str(e.value) == ("column 1: on s390x kernel and user addresses overlap, and this "
                            "BTF has no __user tags to say which memory file->f_flags reads: "
                            "write file->f_flags:user or file->f_flags:kernel")
    assert P.resolve(f, "file->f_flags:kernel", separate_spaces="s390x").reads[0].user is False
    assert P.resolve(f, "count", separate_spaces="s390x").reads == ()  # no load: nothing to say
