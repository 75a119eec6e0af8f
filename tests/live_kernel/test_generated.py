"""btfgen-generated decoders in real kernels: every decoded value against the value passed.

Per target: btfgen generates BPF C from the kernel's own BTF for the functions the scenario
reaches; a wrapper attaches each as kprobe + kretprobe (typed decoders, arguments restored at
exit from the entry-time copy) and, where the kernel has kprobe_multi (FPROBE), one multi link
per direction running the generic table-driven decoder with the spec index as cookie. The guest
makes the scenario's system calls; the records come back over the console.
"""

from __future__ import annotations

import json

import pytest

from btfgen.btf.reader import open_btf

from . import build, cache, fprobe, generated, runner, scenario, wrapper
from .conftest import btf_for, kernel_for
from .targets import TARGETS

pytestmark = pytest.mark.live

FUNCTIONS = [e.function for e in scenario.expectations(8, 4096)]


def _mask(value: int, size: int) -> int:
    return value & ((1 << (8 * size)) - 1)


def _same(expected: int, decoded) -> bool:
    if isinstance(decoded, dict) and len(decoded) == 1:  # kuid_t from the Python decoder
        decoded = next(iter(decoded.values()))
    return isinstance(decoded, int) and _mask(expected, 8) == _mask(decoded, 8)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_generated_decoders(name):
    k = kernel_for(name)
    t = k.target
    btf_path = btf_for(k)
    table = open_btf(str(btf_path))
    present = [f for f in FUNCTIONS if table.find_funcs(f)]
    gen = generated.generate(k, btf_path, present)
    vh = None if gen.self_contained else build.vmlinux_h(btf_path)
    psize = table.pointer_size
    obj, bnd = generated.compile_bundle(k, gen, vh, multi=t.multi_broken is None,
                                        pointer_size=psize)
    symbols = "|".join(present)
    before = [] if t.multi_broken else [fprobe.setup_step(present)]
    report = runner.run(k, bnd, scenario.actions(psize), before=before,
                        after=[fprobe.trace_step(),
                               ("kallsyms", f"grep -E ' ({symbols})$' /proc/kallsyms")])
    kallsyms = sorted(
        (int(addr, 16), sym)
        for addr, _, sym in (line.split()[:3] for line in
                             report.boot.section("kallsyms")[0].splitlines() if line.strip())
    )
    multi_ips = {
        int.from_bytes(key, "big" if t.big_endian else "little"):
        int.from_bytes(value, "big" if t.big_endian else "little")
        for key, value in report.maps.get("multi_ip", {}).items()
    }

    def function_at(ip: int) -> str:
        below = [(a, s) for a, s in kallsyms if a <= ip]
        return f"{below[-1][1]}+{ip - below[-1][0]:#x}" if below else f"{ip:#x}"
    kernel_events = fprobe.parse(report.boot.section(fprobe.TRACE)[0])
    layouts = generated.Layouts(obj, t.big_endian)
    decoder = gen.python_module(t.arch)
    records = {
        int.from_bytes(key, "big" if t.big_endian else "little"): value
        for key, value in report.maps.get("results", {}).items()
    }
    where = f"{t.arch} {k.release}"
    has_multi = report.attached.get("m_entry") == "ok"
    notes: list[str] = []
    if t.multi_broken:
        notes.append(f"kprobe_multi not attached: {t.multi_broken}")
    problems: list[str] = []
    groups_seen: set[str] = set()
    rows = []
    side_by_side = []

    def compare(fn, arg, expected, ours, event, field):
        theirs = fprobe.number((event or {}).get(field)) if field else None
        if theirs is None:
            verdict = "cannot fetch"
        else:
            verdict = "agrees" if _same(expected, theirs) else "disagrees"
        side_by_side.append({"function": fn, "value": arg, "expected": expected,
                             "btfgen": ours if isinstance(ours, int) else repr(ours),
                             "fprobe": theirs, "verdict": verdict})

    def check(fn, what, arg, expected, decoded):
        ok = _same(expected, decoded)
        rows.append({"function": fn, "via": what, "value": arg, "expected": expected,
                     "decoded": decoded if isinstance(decoded, (int, dict)) else repr(decoded),
                     "ok": ok})
        if not ok:
            shown = f"{decoded:#x}" if isinstance(decoded, int) else repr(decoded)
            problems.append(f"{where} {fn} {what} {arg}: expected {expected:#x}, decoded {shown}")

    for exp in scenario.expectations(psize, report.pagesize):
        f = exp.function
        if f not in gen.functions:
            if exp.group:
                notes.append(f"{f}: not in the kernel's BTF")
            else:
                problems.append(f"{where} {f}: not in the kernel's BTF")
            continue
        if exp.group:
            groups_seen.add(exp.group)
        ret = exp.returned(report.calls)
        i = gen.functions.index(f)
        params = {p.name for p in table.find_funcs(f)[0].proto.params}
        expected_args = {a: v for a, v in exp.args.items()
                         if a in params or a not in exp.optional}
        key = exp.phase << 16 | i << 2
        for prog in (f"e_{f}", f"x_{f}"):
            if report.attached.get(prog) != "ok":
                problems.append(f"{where} {f}: {prog} not attached: {report.attached.get(prog)}")
        entry = records.get(key | wrapper.ENTRY)
        if entry is None:
            problems.append(f"{where} {f}: no entry record in action {exp.phase}")
        else:
            rec = layouts.fields(f"btfgen_live_entry_{f}", entry)
            assert rec["err"] == 0, f"{where} {f}: entry decoder reported {rec['err']}"
            event = kernel_events.get((exp.phase, "e", f))
            for arg, value in expected_args.items():
                check(f, "entry", arg, value, rec["a"].get(arg))
                compare(f, arg, value, rec["a"].get(arg), event, arg)
            if f in wrapper.SELF_POINTERS:
                ptr = rec["a"][wrapper.SELF_POINTERS[f]]
                for n, v in zip(("next", "prev"), rec["pointee"]):
                    check(f, "entry", f"{wrapper.SELF_POINTERS[f]}->{n}", ptr, v)
        exit_ = records.get(key | wrapper.EXIT)
        if exit_ is None:
            problems.append(f"{where} {f}: no exit record in action {exp.phase}")
        else:
            rec = layouts.fields(f"btfgen_live_exit_{f}", exit_)
            if not rec["found"]:
                problems.append(f"{where} {f}: exit found no entry-time copy")
            for arg, value in expected_args.items():
                check(f, "exit (saved at entry)", arg, value, rec["a"].get(arg))
            if ret is not None:
                check(f, "exit", "return", ret, rec["r"])
                event = kernel_events.get((exp.phase, "x", f))
                compare(f, "return", ret, rec["r"], event, next(iter(event or {}), None))
        if has_multi:
            fn = decoder.function(f)
            m = records.get(key | wrapper.MULTI_ENTRY)
            for kind in (wrapper.MULTI_ENTRY, wrapper.MULTI_EXIT):
                ip = multi_ips.get(key | kind)
                if ip is not None and not function_at(ip).startswith(f + "+"):
                    problems.append(f"{where} {f}: the kprobe_multi record for cookie {i} "
                                    f"was taken at {function_at(ip)}: wrong cookie")
            if m is None:
                problems.append(f"{where} {f}: no kprobe_multi entry record")
            else:
                try:
                    values = fn.as_dict(fn.decode_record(m))
                except Exception as e:  # the generated decoder's failure is a finding
                    problems.append(f"{where} {f} kprobe_multi: Python decoder: {e!r}")
                    values = {}
                for arg, value in expected_args.items():
                    check(f, "kprobe_multi", arg, value, values.get(arg))
            m = records.get(key | wrapper.MULTI_EXIT)
            if m is None:
                problems.append(f"{where} {f}: no kretprobe_multi exit record")
            elif ret is not None:
                try:
                    check(f, "kretprobe_multi", "return", ret, fn.decode_record(m))
                except Exception as e:
                    problems.append(f"{where} {f} kretprobe_multi: Python decoder: {e!r}")

    for group in {e.group for e in scenario.expectations(psize, 4096) if e.group}:
        if group not in groups_seen:
            problems.append(f"{where}: no function checks {group}")
    cache.write_atomic(
        cache.ROOT / "results" / f"{name}.json",
        json.dumps({"target": name, "kernel": k.release, "multi": has_multi, "rows": rows,
                    "fprobe": side_by_side,
                    "fprobe_setup": report.boot.section(fprobe.SETUP)[0] if before else "",
                    "problems": problems, "notes": notes}, indent=1, default=str).encode(),
    )
    assert not problems, "\n".join(problems)
