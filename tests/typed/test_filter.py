"""--filter: the language, its type checks against BTF (one line, the column, exit 2 through the
CLI), and the C it emits, compiled by clang for BPF."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

import btfgen
from btfgen.typed import filter as F
from btfgen.typed import filter_check as C
from btfgen.codegen import filter_c, filter_trace

HEADER = r"""
struct qstr { unsigned int hash; unsigned int len; const unsigned char *name; };
struct dentry { int flags; struct qstr d_name; char d_iname[8]; };
struct path { void *mnt; struct dentry *dentry; };
struct file { unsigned mode : 3, busy : 1; int lvl : 5; unsigned int f_flags; struct path f_path;
              double ratio; };
enum fmode { FMODE_READ = 1, FMODE_WRITE = 2 };
long vfs_read(struct file *file, char *buf, unsigned long count, long long *pos, long off,
              enum fmode m, const char *name);
long vfs_write(struct file *file, const char *buf, unsigned long count);
void vfs_sync(struct file *file);
int vfs_fsync(struct file *file, int datasync);
"""


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    path = tmp_path_factory.mktemp("h") / "fs.h"
    path.write_text(HEADER)
    return path


@pytest.fixture(scope="module")
def target(header):
    return btfgen.open(headers=[str(header)], arch="x86_64")


@pytest.fixture(scope="module")
def layout(target):
    funcs, _ = target.select(["vfs_*"])
    return target.placement(funcs).layout


def bind(target, layout, *texts):
    return F.bind(F.parse_options(list(texts)), layout, target.types)


def error(target, layout, text) -> str:
    with pytest.raises(F.FilterOptionError) as e:
        bind(target, layout, text)
    message = str(e.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("text, column, says", [
    # syntax
    ("vfs_read: count >", 18, "ends too early"),
    ("vfs_read: count > 1)", 20, "unexpected ')'"),
    ("vfs_read: count @ 1", 17, "unexpected '@'"),
    ("vfs_read count > 1", 1, "FUNC: EXPR"),
    ('vfs_read: name == "a\\q"', 21, "unknown escape"),
    # names
    ("vfs_read: nope > 1", 11, "no parameter 'nope'"),
    ("vfs_read: file->nope > 1", 17, "has no member 'nope'"),
    ("vfs_read: count > 1 && $retval->x", 33, "long int is not a pointer"),
    ("vfs_read: $retval > 1 || count > 1", 11, "mixes arguments"),
    # type mismatches
    ('vfs_read: count > "x"', 17, "strings compare only with == and !="),
    ('vfs_read: count == "x"', 11, "not a string"),
    ("vfs_read: file->f_path == 1", 11, "a struct (struct path)"),
    ("vfs_read: *file == 1", 11, "whole pointee"),
    ("vfs_read: file < 3", 11, "pointer: pointers compare only with == and !="),
    ("vfs_read: file == count", 11, "compare it with another pointer"),
    ("vfs_read: file->ratio > 1", 11, "floating point"),
    ("vfs_read: file & 1", 11, "& tests bits of integers"),
    ("vfs_read: count", 11, None),  # a truth value: fine
    ('vfs_read: "x"', 11, "not a condition"),
    ("vfs_read: 1", 11, "constant condition"),
    # signedness
    ("vfs_read: count < -1", 19, "count is unsigned"),
    ("vfs_read: -1 < file->f_flags", 11, "file->f_flags is unsigned"),
    ("vfs_read: file->busy == -1", 25, "unsigned"),
    ("vfs_read: off < count", 15, "differ in signedness"),
    ("vfs_read: off < 0x8000000000000000", 17, "beyond every signed 64-bit value"),
    ("vfs_read: count > 0x10000000000000000", 19, "does not fit in 64 bits"),
    # strings
    ('vfs_read: file->f_path.dentry->d_iname == "123456789"', 43, "longer than"),
    ('vfs_read: prefix(count, "x")', 18, "not a string"),
    # functions
    ("vfs_sync: $retval == 0", 11, "returns void"),
    ("nothing: 1 == 1", None, "matches none of the functions"),
])
def test_errors_name_the_column(target, layout, text, column, says):
    if says is None:
        bind(target, layout, text)
        return
    message = error(target, layout, text)
    assert message.startswith(f"--filter {text!r}: "), message
    if column is not None:
        assert f": column {column}: " in message, message
    assert says in message, message


def test_a_glob_is_checked_on_every_function_it_matches(target, layout):
    message = error(target, layout, "vfs_*: count > 1")
    # vfs_fsync and vfs_sync have no `count`: the first in the layout is named
    assert ": column 8: " in message and "(for vfs_sync)" in message
    assert len(bind(target, layout, "vfs_[rw]*: count > 1")) == 2


def test_two_filters_for_one_function_are_refused(target, layout):
    with pytest.raises(F.FilterOptionError, match="has a filter already"):
        bind(target, layout, "vfs_read: count > 1", "vfs_r*: off < 0")


def test_entry_and_exit_conditions_are_split_at_top_level_and(target, layout):
    (b,) = bind(target, layout, "vfs_read: count > 1 && $retval < 0 && off != 0")
    assert isinstance(b.checked.entry, C.Both) and isinstance(b.checked.exit, C.Cmp)
    assert b.checked.exit.signed  # long < 0: a signed comparison
    (b,) = bind(target, layout, "vfs_write: $retval < 0")
    assert b.checked.entry is None and b.checked.exit is not None


def test_signedness_follows_the_types(target, layout):
    (b,) = bind(target, layout, "vfs_read: off < -1 && count > 5 && file->lvl < 0 && "
                                "m == FMODE_WRITE")
    cmps = []
    cond = b.checked.entry
    while isinstance(cond, C.Both):
        cmps.insert(0, cond.right)
        cond = cond.left
    cmps.insert(0, cond)
    assert [c.signed for c in cmps] == [True, False, True, False]
    assert cmps[3].right == C.Const(2)  # the enum constant's value, from BTF


def _compile(tmp_path, files: dict[str, str], source: str):
    clang = shutil.which("clang-19") or shutil.which("clang")
    if clang is None:
        pytest.skip("no clang")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "use.c").write_text(source)
    proc = subprocess.run([clang, "-O2", "-g", "-target", "bpf", "-Wall", "-Werror",
                           "-Wno-unused-function", f"-I{tmp_path}", "-c",
                           str(tmp_path / "use.c"), "-o", str(tmp_path / "use.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


FULL = ('vfs_read: count > 4096 && file->f_flags & 0x800 && (off < -1 || file->lvl < 0) && '
        '!file->busy && m == FMODE_READ && name != "abc" && '
        'prefix(file->f_path.dentry->d_name.name, "lib") && file->f_path.dentry->d_iname == '
        '"x" && $retval >= 0')


def test_generated_predicates_compile_for_bpf(target, layout, tmp_path):
    from btfgen.codegen import outputs

    bound = bind(target, layout, FULL, "vfs_write: $retval < 0")
    files = outputs.generate(layout, target.types, ("bpf",), self_contained=True)
    files[filter_c.HEADER] = filter_c.header(bound, layout, target.types, self_contained=True,
                                             decoders="btfgen.bpf.h")
    for user in ("", "#define BTFGEN_USER\n"):
        _compile(tmp_path, files, user + """\
#include "btfgen_filter.h"
SEC("kprobe") int e(void *ctx)
{
	struct btfgen_args_vfs_read a = {};
	btfgen_entry_vfs_read(ctx, &a);
	return btfgen_filter_vfs_read(&a);
}
SEC("kretprobe") int x(void *ctx)
{
	struct btfgen_ret_vfs_write r = {};
	btfgen_exit_vfs_write(ctx, 0, &r);
	return btfgen_filter_exit_vfs_write(&r);
}
char LICENSE[] SEC("license") = "GPL";
""")


def test_trace_header_compiles_into_trace_bpf_c(target, layout, tmp_path):
    from btfgen.codegen import outputs
    from btfgen.trace import build

    bound = bind(target, layout, FULL, "vfs_fsync: datasync != 0")
    files = outputs.generate(layout, target.types, ("bpf",), self_contained=True)
    files["trace_filter.h"] = filter_trace.trace_header(bound, layout, target.types)
    files["trace_event.h"] = (build.HERE / "trace_event.h").read_text()
    _compile(tmp_path, files, (build.HERE / "trace.bpf.c").read_text())


def test_output_is_deterministic(target, layout):
    texts = {filter_c.header(bind(target, layout, FULL), layout, target.types,
                             self_contained=True, decoders="btfgen.bpf.h") for _ in range(2)}
    assert len(texts) == 1
    assert filter_trace.trace_header([], layout, target.types) == filter_trace.NO_FILTER


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True,
                          text=True, timeout=300)


def test_generator_option_writes_the_header(header, tmp_path):
    proc = _cli("--header", str(header), "--arch", "x86_64", "--func", "vfs_read", "-q",
                "-o", str(tmp_path), "--filter", "vfs_read: count > 4096")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / filter_c.HEADER).read_text()
    assert "btfgen_filter_vfs_read(const struct btfgen_args_vfs_read *a)" in text
    assert '#include "btfgen.bpf.h"' in text


@pytest.mark.parametrize("command", [[], ["trace", "--build", "DIR"]])
def test_cli_errors_are_one_line_and_exit_2(header, tmp_path, command):
    command = [str(tmp_path / "t") if c == "DIR" else c for c in command]
    if command:  # btfgen trace on a user program, types from the header
        # A program with the function, so that the build gets as far as the filter's types.
        exe = tmp_path / "prog"
        source = tmp_path / "prog.c"
        source.write_text("long vfs_read(void) { return 0; }\nint main(void) { return 0; }\n")
        subprocess.run(["gcc", "-w", "-o", str(exe), str(source)], check=True)
        args = [*command, "--header", str(header), "--filter", 'vfs_read: count > "x"',
                str(exe), "vfs_read"]
    else:
        args = ["--header", str(header), "--arch", "x86_64", "--func", "vfs_read", "-o",
                str(tmp_path), "--filter", 'vfs_read: count > "x"']
    proc = _cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].endswith("--filter 'vfs_read: count > \"x\"': column 17: strings compare "
                             "only with == and != (or prefix()), not >"), lines[0]
