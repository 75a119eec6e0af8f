"""`btfgen trace`: the command (command.py) and the build side (build.py: btfgen and clang),
which writes a trace directory: the generated decoders, the BPF objects, the manifest, a copy
of the run side (btfgen.probe, which imports nothing of btfgen) and its launcher
(launcher.py, as btfgen_trace.py)."""
