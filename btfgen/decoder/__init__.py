"""What a trace record holds and how its bytes become typed values: value descriptors
(describe.py), the stdlib-only runtime that reads them (runtime/, embedded in generated
modules) and the generic decoder's copy plans (generic.py); its wire structs are the run
side's (btfgen.probe.spec_format). The library API over all this is `btfgen.decode`."""
