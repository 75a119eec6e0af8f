"""`btfgen trace`: the run side's command line (btfgen.probe.tool) with a builder, so that one
command builds a trace directory (build.py: btfgen and clang) and runs it; `--run DIR` only
runs one, as a trace directory's own btfgen_trace.py does without btfgen.
"""

from __future__ import annotations

import sys
from pathlib import Path

from btfgen.probe import tool
from btfgen.probe.errors import BadInput, RunError


def main(argv=None) -> int:
    return tool.main(sys.argv[1:] if argv is None else argv, build=_build)


def _build(args, out: Path) -> None:
    # Imported when building only: `--run` starts without the generator's modules.
    try:
        from btfgen.errors import BtfgenError
        from btfgen.trace import build as trace_build
    except ImportError as e:
        raise RunError(f"building needs btfgen ({e.name} is missing); build elsewhere and "
                       "use --run here") from None
    fields = dict(
        functions=args.names if args.kernel else args.names[1:], kernel=args.kernel,
        btf=args.btf, module=args.module, module_btf=args.module_btf, dwarf=args.dwarf,
        arch=args.arch,
        program=None if args.kernel else args.names[0],
        headers=args.header, include=args.include, define=args.define, filters=args.filter,
        captures=args.capture, strings=args.strings, string_size=args.string_size,
        capture_budget=args.capture_budget,
        deny=not args.no_deny, timings=args.timings, stack=tool.stacks_asked(args),
        # one command: the run follows here, and the build compiles only what it loads
        run_here=None if args.build else (args.attach, args.sleepable))
    req = trace_build.Request(**{**fields, **_summary_request(args)})
    try:
        trace_build.build(req, out)
    except BadInput:  # trace_build.BuildError: its own one line and status
        raise
    except BtfgenError as e:
        raise BadInput(str(e), 2) from None
    except OSError as e:
        raise BadInput(f"{e.filename or out}: {e.strerror}", 2) from None


def _summary_request(args) -> dict:
    """--count / --latency: the request's part. Without --record nothing but the keys is
    decoded, so the string of every char * is not captured (and a string key is the build's
    KEY_STRING_SIZE characters unless --string-size says otherwise)."""
    if not (args.count or args.latency):
        return {}
    if getattr(args, "stack_key", None):
        # --by kstack / ustack: no summary in the kernel; each call's event carries its stack
        # (args.stack_is says which) and the tracer counts it (btfgen.probe.stack_summary)
        return {"strings": False, "stack_keys": {"count": args.count, "latency": args.latency,
                                                 "by": args.stack_key}}
    out = {"count": args.count, "latency": args.latency, "by": args.by}
    if not args.record:
        out["strings"] = False
    return out


if __name__ == "__main__":
    sys.exit(main())
