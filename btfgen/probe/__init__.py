"""The tracer's run side: what runs on the target, with Python's standard library and libbpf
(through ctypes) alone. `btfgen trace --build` copies this package whole into every trace
directory (as btfgen_probe/, beside the launcher btfgen_trace.py), so its modules import only
the standard library and each other, relatively; tests/probe checks it.

One concept a module:

    libbpf.py       libbpf through ctypes: loading it, its log, its errors
    syscall.py      the bpf() syscall itself, for what libbpf 1.1 cannot do (multi links)
    bpf_object.py   a BPF object: load, maps, and its links (uprobe, kprobe, multi, session)
    links.py        the two kinds of link a BpfObject holds
    features.py     what this kernel has: BPF at all, multi links, session links, kprobes
    tracefs.py      tracefs: mounting it, what ftrace can attach to, the fork event's layout
    ring.py         the ring buffer's default size, and which reader reads it
    ringspan.py     the ring buffer read in place, in spans of records (its protocol kept)
    ringbuf.py      the ring buffer read through libbpf's consumer (where ringspan cannot)
    manifest.py     a trace directory: its manifest, its decoders, whether it fits this machine
    processes.py    which processes a trace runs and reports
    attach.py       how functions are attached: session, multi or single, and the fallbacks;
                    the trampoline's companion objects (its kprobe link, fsession's)
    loop.py         the event loop
    losses.py       what was lost or missed, and how far behind the reader is, said
    calls.py        entries paired with their exits
    output.py       what is printed: text or JSON lines, or only failed calls
    lines.py        a function's lines made by one struct and one format (output's fast path)
    lines.c         its bare handlers (the exports' texts) in C: _btfgen_lines, optional,
                    built by pip beside btfgen and not copied into trace directories
    recording.py    the --record file: its format and its writer (btfgen.recordings reads it)
    crc.py          CRC-32 as zlib makes it, by libdeflate where it is installed (recordings)
    summary.py      --count / --latency: the summary maps set up, read and printed
    stack_keys.py   --by kstack / ustack, parsed
    stack_summary.py  --count / --latency by stack: each call's event summed by its stack
    stack_wire.py   --stack: the stack part an entry's record carries, read
    elf_file.py     an ELF object's symbols, build id, segments and sections
    eh_frame.py     .eh_frame's call frame information: the CFA rules at an address
    unwind.py       a user stack unwound offline from its registers and a slice of it
    symbolize.py    stack frames named (kallsyms, the mapped objects' symbols), as text, JSON
    stack_notes.py  --stack with --record: the maps, build ids and kernel symbols noted
    spec_format.py  the wire formats BPF writes and Python reads (decoder/ and codegen/ use
                    them too)
    event.py        an event's heads as the run side reads them, derived once from spec_format
    options.py      what a run is asked to do, and the capture defaults
    timings.py      --timings
    errors.py       what goes wrong, each in one line
    prog.py         how the tool names itself (by the copy that runs), and says a line
    run.py          a trace run as one object (Run): set up, trace, detach
    tool.py         the command line (`btfgen trace`, a trace directory's btfgen_trace.py)
"""
