"""`btfgen trace` says how many functions decode on the ops interpreter: those whose op lists
fall past the straight-line decoders one program holds (straight.MAX_DECODERS of each kind),
counted from the specs the build writes."""

from __future__ import annotations

import itertools

import btfgen
from btfgen.codegen.straight import MAX_DECODERS
from btfgen.trace.build import _interpreted

TYPES = ("char", "short", "int", "long")


def _specs(tmp_path, n: int) -> list[bytes]:
    # n prototypes whose argument widths differ: n distinct entry op lists, one exit list; the
    # seventh argument is on the stack, so no list is the register image's
    protos = itertools.islice(itertools.product(TYPES, repeat=5), n)
    header = tmp_path / "many.h"
    header.write_text("".join(f"long f{i}({', '.join(f'{t} a{k}' for k, t in enumerate(p))}, "
                              "long a5, long a6);\n" for i, p in enumerate(protos)))
    t = btfgen.open(headers=[str(header)], arch="x86_64")
    files = t.generate(langs=["python"])
    ns: dict = {}
    (name, text), = files.items()
    exec(compile(text, name, "exec"), ns)
    return [ns["spec"](f"f{i}") for i in range(n)]


def test_past_the_cap_the_interpreted_functions_are_counted(tmp_path):
    specs = _specs(tmp_path, MAX_DECODERS + 9)
    assert _interpreted(specs, "little").startswith(
        f"9 of {MAX_DECODERS + 9} functions decode on the ops interpreter at entry, 0 at exit")


def test_within_the_cap_nothing_is_said(tmp_path):
    assert _interpreted(_specs(tmp_path, 5), "little") is None
