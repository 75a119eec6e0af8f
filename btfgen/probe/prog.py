"""How the tool names itself at the start of what it says: `btfgen trace`, or a trace
directory's `btfgen_trace` (tool.main sets it)."""

NAME = "btfgen trace"
