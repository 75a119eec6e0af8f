"""What to generate for one input, worked out once (`btfgen.Target.plan`) and rendered by both
of btfgen's outputs: `btfgen -o DIR` (`Target.generate`: `Plan.files`) and a trace directory
(btfgen/trace/build.py: `Plan.trace_files`).

A plan holds the placed layout, each function's captures resolved against its prototype and
the filters checked against its placement: every decision about the input is taken before the
first byte is rendered (a capture or a filter that does not fit is refused here), and codegen/
only turns the plan into text. What the planning has to say (DWARF corrections, captures left
out) it keeps as lines, for each command to word as it words everything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from btfgen.btf import types as T
from btfgen.codegen import outputs
from btfgen.layout import ArchLayout


@dataclass(frozen=True, slots=True)
class Plan:
    layout: ArchLayout
    types: T.TypeSource
    captures: dict  # function name -> its btfgen.typed.capture.Captures
    filters: tuple  # btfgen.typed.filter.Bound, checked against `layout`, in its order
    self_contained: bool  # the BPF header defines its types (no vmlinux.h)
    placement_notes: tuple[str, ...] = ()  # Placement.notes() of the placing done for the plan
    capture_notes: tuple[str, ...] = ()  # captures asked for but left out, and why
    # Functions whose `char *` arguments are not captured by default: kernel and user
    # addresses overlap on the arch and the BTF does not say which a pointer is.
    unguessable: tuple[str, ...] = ()

    def files(self, langs=outputs.DEFAULT_LANGS, *, specs_table: bool = True,
              jobs: int = 1) -> dict[str, str]:
        """`btfgen -o DIR`'s files, name -> text: those of `langs`, and btfgen_filter.h beside
        the BPF header when there are filters."""
        files = outputs.generate(self.layout, self.types, langs,
                                 self_contained=self.self_contained, specs_table=specs_table,
                                 jobs=jobs, captures=self.captures)
        if self.filters:
            from btfgen.codegen import filter_c  # (the filter language only for filters)

            files[filter_c.HEADER] = filter_c.header(
                self.filters, self.layout, self.types, self_contained=self.self_contained,
                decoders=outputs.file_name("header", self.layout.arch))
        return files

    def trace_files(self) -> dict[str, str]:
        """What a trace directory holds of generated text: the BPF header, the spec table, the
        Python module and trace_filter.h (always, so a directory built again without
        --filter does not keep an old one)."""
        files = outputs.generate(self.layout, self.types, ("bpf", "python"),
                                 self_contained=self.self_contained, captures=self.captures)
        from btfgen.codegen import filter_c, filter_trace

        files[filter_c.TRACE_HEADER] = filter_trace.trace_header(list(self.filters),
                                                                 self.layout, self.types)
        return files

    def filtered_names(self) -> list[str]:
        """The C names of the functions a filter decodes with their own decoders."""
        from btfgen.codegen import filter_c

        return filter_c.filtered_names(self.filters, self.layout)
