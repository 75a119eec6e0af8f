"""Reading BTF: the wire format, the type model and the reader."""
