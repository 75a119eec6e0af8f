"""`btfgen`: generate decoders (the default), `btfgen dump`, `btfgen layout`, `btfgen trace`.

Every failure the user can cause ends in one line on stderr and exit status 2; a requested
function that is missing is exit status 1 (the generator says which).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from btfgen.errors import BtfgenError, BtfgenWarning

SUBCOMMANDS = {
    "dump": "print BTF as `bpftool btf dump ... format raw` does",
    "layout": "print where each argument and return value lives",
    "check": "compare btfgen's placement with the compiler's DWARF",
    "trace": "trace functions of a program or of the kernel, printing typed arguments and returns",
    "decode": "print a recording made by `btfgen trace --record` (text, JSON lines, Parquet)",
}
# Commands with their own command line (`btfgen trace` splits off `-- COMMAND` before parsing,
# and its run side must stay importable without the rest of btfgen): module -> its main(argv).
OWN_MAIN = {"trace": "btfgen.trace.command"}
DEFAULT_COMMAND = "generate"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own is two lines (usage + error)
        raise BtfgenError(message)


def _build_parser(command: str) -> argparse.ArgumentParser:
    module = importlib.import_module(f"btfgen.commands.{command}")
    prog = "btfgen" if command == DEFAULT_COMMAND else f"btfgen {command}"
    parser = _Parser(prog=prog, description=module.__doc__.strip().splitlines()[0])
    module.add_arguments(parser)
    parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    # What the library did not do (BtfgenWarning) is one line, as errors are; Python's own
    # format would add the file and source line of the warn() call.
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, BtfgenWarning):
                print(f"btfgen: warning: {message}", file=sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    ends_process = argv is None  # the program (`btfgen`, `python -m btfgen`), not a caller
    argv = sys.argv[1:] if argv is None else argv
    command = DEFAULT_COMMAND
    if argv and argv[0] in SUBCOMMANDS:
        command, argv = argv[0], argv[1:]
    if command in OWN_MAIN:
        return importlib.import_module(OWN_MAIN[command]).main(argv)
    try:
        parser = _build_parser(command)
        if command == DEFAULT_COMMAND and argv[:1] in (["-h"], ["--help"]):
            parser.epilog = "subcommands: " + "; ".join(
                f"btfgen {name}: {text}" for name, text in SUBCOMMANDS.items()
            )
        # a command may respell its argv first (decode: `--errors=WHAT`)
        rewrite = getattr(importlib.import_module(f"btfgen.commands.{command}"),
                          "rewrite_argv", None)
        args = parser.parse_args(rewrite(argv) if rewrite else argv)
        args._ends_process = ends_process
        return args._run(args)
    except BtfgenError as e:
        print(f"btfgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("btfgen: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (`| head`) went away: not an error of ours. Keep Python from complaining again
        # when it flushes stdout at exit.
        sys.stdout = None  # type: ignore[assignment]
        return 0
    except OSError as e:
        print(f"btfgen: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
