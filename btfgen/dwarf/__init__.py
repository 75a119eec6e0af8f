"""DWARF: where the compiler says each parameter is at a function's first instruction.

`locations` turns one DWARF location (expression or list) into entry-PC pieces, `reader` walks an
ELF's compile units and ties every subprogram to its ELF symbol, `compare` sets them against
btfgen's placement, `correct` puts DWARF's word into a layout where the two differ.
"""
