"""Cross-architecture conformance: btfgen's layouts against what real compilers do.

Flow (one module each):
  corpus.py     prototypes: a fixed regression corpus of known traps + seeded random ones
                (BTFGEN_CONFORMANCE_N random prototypes per arch; default tops up to 200)
  emit.py       freestanding C per batch: targets that use every argument, callers passing
                distinctive pattern bytes, a `_start` calling them all
  (../toolchains.py compiles with the kernel's ABI flags, pahole -J makes the BTF, links)
  machines.py   what the emulators need per arch (register names, return address)
  emu_unicorn.py, emu_qemu.py (+ rsp.py)   run one batch, snapshot each target at entry and
                at its return address
  capture.py    `captures(arch) -> list[Capture]`: expected bytes + snapshots, cached
  check.py      compare a FunctionLayout with a Capture; say where a value really was

Decoder tests reuse `captures(arch)`: each Capture has the prototype, the BTF FUNC name and the
object holding its BTF, the exact bytes of every argument and of the return value, the entry
registers (`entry_regs`, by the arch's register names), `sp`, the memory at entry (`memory`:
the stack above SP and the data segment), the exit registers and the memory at exit
(`exit_memory`, holding the buffer behind an sret pointer). BTFGEN_CONFORMANCE_ARCHES (comma
list) restricts the arches.
"""
