"""`btfgen trace`: build a trace directory (build.py: btfgen and clang), then load, attach and
print with Python's standard library and libbpf only (tool.py, run.py, bpfload.py, which are
copied into the directory and import nothing else of btfgen)."""
