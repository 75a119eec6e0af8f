"""All generated files for one placed arch: name -> content. Pure (no I/O), deterministic.

Kernels have about half as many distinct prototypes as functions, and placement hands functions
of one prototype one `ProtoLayout`: everything below that depends only on the layout is computed
once per prototype (`layout.by_prototype`) and the function's own name and id are put in
afterwards. Each output file is one entry of `OUTPUTS`: the language that selects it, its file
name, its renderer and which of two processes renders it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from btfgen.codegen import bpf, forked, python, straight
from btfgen.codegen.names import c_ident, function_keys, py_ident
from btfgen.codegen.render import environment
from btfgen.decoder import generic
from btfgen.decoder.describe import function_desc
from btfgen.gcpause import collector_paused
from btfgen.layout import ArchLayout, FunctionLayout, ProtoLayout, ValueLayout, by_prototype


def plans(arch: ArchLayout, captures: dict | None = None) -> list[generic.GenericPlan]:
    """Each function's generic plan; one object per prototype (and per function with
    captures: `captures` maps a function's name to its btfgen.typed.capture.Captures)."""
    fs = arch.functions
    captures = captures or {}
    firsts, at = _by_plan(fs, captures)
    ret_at = arch.ctx.ret_slot  # a trampoline's: one return slot for every function
    made = [generic.plan(fs[i].proto, arch.byte_order, arch.pointer_size,
                         captures.get(fs[i].name, ()), ret_at=ret_at) for i in firsts]
    return [made[k] for k in at]


def plan_table(arch: ArchLayout, gplans, more_plans=(),
               limit: int = straight.MAX_DECODERS) -> straight.PlanTable:
    """The straight-line decoders of `gplans` (then `more_plans`, past the limit after every
    list of `gplans`), numbered as the header and the specs number them."""
    own = len(gplans) if more_plans else None
    return straight.plan_table(list(gplans) + list(more_plans), bpf.ctx_window(arch), limit,
                               own)


def _by_plan(fs, captures: dict) -> tuple[list[int], list[int]]:
    return bpf.by_plan(fs, captures)


class _Files:
    """The renderers, with what several outputs share computed once per process."""

    def __init__(self, arch: ArchLayout, table, self_contained: bool, captures: dict,
                 more_plans: tuple = ()):
        self.arch, self.table = arch, table
        self.self_contained = self_contained
        self.captures = captures
        self.more_plans = more_plans
        self._plans: list[generic.GenericPlan] | None = None
        self._straight: straight.PlanTable | None = None
        self._cnames: list[str] | None = None

    @property
    def plans(self) -> list[generic.GenericPlan]:
        if self._plans is None:
            self._plans = plans(self.arch, self.captures)
        return self._plans

    @property
    def straight(self) -> straight.PlanTable:
        """The straight-line decoders: the header prints them, the specs name them."""
        if self._straight is None:
            self._straight = plan_table(self.arch, self.plans, self.more_plans)
        return self._straight

    @property
    def cnames(self) -> list[str]:
        if self._cnames is None:
            self._cnames = bpf.function_names(self.arch.functions)
        return self._cnames

    def _ctypes(self):
        return bpf.c_types(self.arch, self.table, self.self_contained)

    def _guard(self) -> str:
        return f"BTFGEN_{self.arch.arch}_H"

    def header(self) -> str:
        env = environment()
        ctypes = self._ctypes()
        func_t = env.get_template("bpf_function.h.j2")
        ptr = bpf.PtrType(bpf.reg_type(self.arch.pointer_size))
        blocks = bpf.function_blocks(self.arch, self.cnames, ctypes,
                                     lambda fs: func_t.render(fs=fs, h=ptr, end=bpf.BLOCK_END)
                                     .split(bpf.BLOCK_END), self.captures)
        h = bpf.header_view(self.arch, ctypes, guard=self._guard(),
                            captures=bool(self.captures), table=self.straight)
        return env.get_template("bpf.h.j2").render(h=h, blocks=blocks)

    def specs(self) -> str:
        env = environment()
        ops_t = env.get_template("spec_ops.h.j2")
        specs = bpf.spec_views(self.arch, self.cnames, self.plans,
                               lambda ss: ops_t.render(ss=ss).split("\0"), self.straight)
        # The table needs only the header's guard and sizes, none of its type definitions.
        h = bpf.header_view(self.arch, self._ctypes(), guard=self._guard())
        values, users = bpf.user_views(self.arch, self.plans)
        return env.get_template("specs.h.j2").render(
            h=h, specs=specs, values=values, users=users,
            decoders_header=file_name("header", self.arch.arch))

    def python(self) -> str:
        return python_module(self.arch, self.plans, self.captures, self.straight)

    def layout(self) -> str:
        return layout_text(self.arch)

    def kernel(self) -> str:
        from btfgen.codegen import kernel

        return kernel.render(self.arch, self.table, self.plans, self.straight, self.captures)


@dataclass(frozen=True, slots=True)
class Output:
    """One generated file: a new format is one entry below (and its template)."""

    name: str
    lang: str  # the --lang that selects it
    file_name: Callable[[str], str]  # for an arch's canonical name
    render: Callable[[_Files], str]
    # With two processes, which one renders it: the two halves take about as long on a whole
    # kernel (the header is the largest file; the spec table and the Python module share the
    # generic plans, computed once per process).
    half: int


OUTPUTS = (
    Output("header", "bpf", lambda arch: "btfgen.bpf.h", _Files.header, half=0),
    Output("specs", "bpf", lambda arch: "btfgen_specs.h", _Files.specs, half=1),
    Output("python", "python", lambda arch: f"btfgen_{py_ident(c_ident(arch))}.py",
           _Files.python, half=1),
    Output("layout", "json", lambda arch: "layout.json", _Files.layout, half=0),
    Output("kernel", "kernel", lambda arch: "btfgen.kernel.h", _Files.kernel, half=0),
)
_BY_NAME = {o.name: o for o in OUTPUTS}
LANGS = tuple(dict.fromkeys(o.lang for o in OUTPUTS))
# What is generated unasked: kernel C is for a kernel ctx (fprobe's ftrace_regs, a kprobe's
# pt_regs), asked for with its ctx.
DEFAULT_LANGS = ("bpf", "python", "json")


def file_name(output: str, arch: str) -> str:
    """The file name of output `output` ("header", "specs", "python", "layout") for `arch`."""
    return _BY_NAME[output].file_name(arch)


def file_names(arch: str) -> dict[str, str]:
    """Output name -> its file name, for `arch`."""
    return {o.name: o.file_name(arch) for o in OUTPUTS}


def generate(arch: ArchLayout, table, langs=DEFAULT_LANGS, *, self_contained: bool = False,
             specs_table: bool = True, jobs: int = 1,
             captures: dict | None = None, more_plans: tuple = ()) -> dict[str, str]:
    """The files for `langs` (without the spec table unless `specs_table`); with `jobs` > 1
    rendered in two processes (the same bytes). `captures`: function name -> its
    btfgen.typed.capture.Captures, in the header (struct btfgen_captures_F), the generic
    decoder's specs and the Python module. `more_plans`: generic plans of other functions
    whose straight-line decoders the header holds too (a benchmark loading a whole kernel's)."""
    chosen = [o for o in OUTPUTS if o.lang in langs and (specs_table or o.name != "specs")]
    files = _Files(arch, table, self_contained, captures or {}, tuple(more_plans))
    groups = [chosen] if jobs < 2 else [[o for o in chosen if o.half == h] for h in (0, 1)]
    with collector_paused():
        return forked.run([lambda g=g: _render(files, g) for g in groups if g])


def _render(files: _Files, chosen: list[Output]) -> dict[str, str]:
    return {o.file_name(files.arch.arch): o.render(files) for o in chosen}


def python_module(arch: ArchLayout, gplans, captures: dict | None = None,
                  table: straight.PlanTable | None = None) -> str:
    """The module's text: each prototype's descriptor once, as the source of a tuple the module
    evaluates on first use (CPython took 30 s and 4 GB to compile a whole kernel's descriptors
    as one literal), and every function's name, id and prototype index."""
    lits = python.Literals()
    memo: dict = {}
    captures = captures or {}
    table = table or plan_table(arch, gplans)

    def proto_text(f: FunctionLayout, p: generic.GenericPlan) -> str:
        sizes = table.sizes(p)
        d = function_desc(f, arch.byte_order, arch.pointer_size, p, memo,
                          captures.get(f.name, ()), sizes)
        ops = (tuple(o.spelled for o in p.entry_ops),
               tuple(o.spelled for o in p.exit_ops), p.carry_code) + table.ids(p) + sizes \
            + ((p.carry_span,) if p.carry_span else ())
        parts = [lits.value_text(a) for a in d.args]
        args_text = ", ".join(parts) + ("," if len(parts) == 1 else "")
        ret_text = ("None" if d.ret is None else
                    f"({lits.value_text(d.ret.value)}, {d.ret.needs_entry!r})")
        caps = ""
        if d.captures:  # a ninth field only where there are captures
            caps = (", (" + ", ".join(lits.capture_text(c) for c in d.captures)
                    + ("," if len(d.captures) == 1 else "") + ")")
        # Two sources, each evaluated on first use: spec() needs only the ops (a whole kernel's
        # spec table evaluated every descriptor's values too, for nothing).
        values = (f"({d.byte_order!r}, {d.pointer_size}, ({args_text}), {ret_text}, "
                  f"{d.fast!r}, {d.record!r}{caps})")  # plain-tuple reprs
        return f"({values!r}, {repr(ops)!r})"

    fs = arch.functions
    firsts, at = _by_plan(fs, captures)
    protos = tuple(proto_text(fs[i], gplans[i]) for i in firsts)
    funcs = tuple((repr(key), f"({f.name!r}, {f.btf_id}, {k})")
                  for f, key, k in zip(fs, function_keys(fs, str), at))
    view = python.ModuleView(
        title=f"{py_ident(arch.arch)} ({py_ident(arch.ctx.name)})",
        arch=repr(arch.arch), byte_order=repr(arch.byte_order), pointer_size=arch.pointer_size,
        ctx=repr(arch.ctx.name), runtime=python.runtime_source(), types=tuple(lits.entries),
        protos=protos, functions=funcs,
        spec_order=repr("<" if arch.byte_order == "little" else ">"), max_ops=generic.MAX_OPS)
    return environment().get_template("decoder.py.j2").render(m=view)


def layout_text(arch: ArchLayout) -> str:
    """The layout (layout.json) as compact JSON: each prototype's part serialised once, every
    function's name and id spliced in (the same text `json.dumps(layout_doc(arch))` gives)."""
    from btfgen.layout_json import to_json, value_json

    doc = to_json(replace(arch, functions=()))
    head = json.dumps(doc, separators=(",", ":"))
    marker = '"functions":[]}'
    if not head.endswith(marker):
        return json.dumps(layout_doc(arch), separators=(",", ":")) + "\n"
    values: dict[tuple[ValueLayout, bool], str] = {}

    def text(v: ValueLayout, with_name: bool) -> str:
        t = values.get((v, with_name))
        if t is None:
            t = values[v, with_name] = json.dumps(value_json(v, with_name), separators=(",", ":"))
        return t

    def proto_text(p: ProtoLayout) -> str:
        return ('"args":[' + ",".join(text(a, True) for a in p.args) + '],"ret":'
                + ("null" if p.ret is None else text(p.ret, False))
                + (',"variadic":true' if p.variadic else ',"variadic":false')
                + ("}" if p.refused is None else f',"refused":{json.dumps(p.refused)}}}'))

    fs = arch.functions
    firsts, at = by_prototype(fs)
    rests = [proto_text(fs[i].proto) for i in firsts]
    parts = [f'{{"name":{json.dumps(f.name)},"btf_id":{f.btf_id},{rests[k]}'
             for f, k in zip(fs, at)]
    prefix = head[: -len(marker)] + '"functions":['
    if not parts:
        return prefix + "]}\n"
    # The join makes the whole text: a concatenation after it would copy a kernel's 40 MB again.
    parts[0] = prefix + parts[0]
    parts[-1] += "]}\n"
    return ",".join(parts)


def layout_doc(arch: ArchLayout) -> dict:
    """`btfgen layout --json`'s document (btfgen.layout_json), one function dict per prototype
    copied with the function's own name and id."""
    from btfgen.layout_json import to_json

    return to_json(arch)
