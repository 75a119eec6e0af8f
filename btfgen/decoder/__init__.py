"""What a trace record holds and how its bytes become typed values: value descriptors
(describe.py), the stdlib-only runtime that reads them (runtime/, embedded in generated
modules), the generic decoder's copy plans (generic.py) and its wire structs
(spec_format.py). The library API over all this is `btfgen.decode`."""
