"""btfgen: typed decoders of function arguments and return values for BPF tracing.

It reads function prototypes from BTF and an architecture's calling convention from a declarative
description, places every argument and return value in the trace context (`pt_regs` or
`ftrace_regs`) and on the stack, and generates BPF C and Python decoders from that placement.
"""

__version__ = "0.1.0"

# The front door, imported on first use: `import btfgen` stays cheap for the commands (and for
# `btfgen trace`'s run side) that do not open anything.
_FRONT_DOOR = ("open", "Target", "Selection", "Placement", "AUTO", "BtfgenWarning")


def __getattr__(name: str):
    if name in _FRONT_DOOR:
        from btfgen import target

        return getattr(target, name)
    raise AttributeError(f"module 'btfgen' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_FRONT_DOOR])
