"""Decoding trace-ctx bytes into typed values: the stdlib-only runtime and its descriptors."""
