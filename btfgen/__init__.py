"""btfgen: typed decoders of function arguments and return values for BPF tracing.

It reads function prototypes from BTF and an architecture's calling convention from a declarative
description, places every argument and return value in the trace context (`pt_regs` or
`ftrace_regs`) and on the stack, and generates BPF C and Python decoders from that placement.
"""

__version__ = "0.1.0"
