"""lark grammars (installed as btfgen.grammars)."""
