"""Typed captures and filters: what pointers point to, resolved against BTF at generation time."""
