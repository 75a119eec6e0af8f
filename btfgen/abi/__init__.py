"""ABI descriptions: the DSL, the arch registry and the trace-ctx layouts."""
