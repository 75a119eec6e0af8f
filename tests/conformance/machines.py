"""What the capture harness must know to run each arch: registers, stack, return address.

Only public facts of each instruction set and psABI, used to drive the emulators and to self-check
the harness (`first_arg`, `ret_reg`); where arguments go is btfgen's business, never looked up here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Machine:
    arch: str
    ptr: int  # pointer and general register width in bytes
    byte_order: str
    engine: str  # "unicorn" | "qemu"
    regs: tuple[str, ...]  # general registers captured, as the arch names them
    sp: str
    ret_addr: str  # register holding the return address at entry; "[sp]": the word at SP
    first_arg: str  # public ABI: the first integer argument register (harness self-check)
    ret_reg: str  # public ABI: the integer return register (harness self-check)
    aliases: dict[str, str] = field(default_factory=dict)  # other spellings -> name in `regs`
    qemu: str = ""  # qemu-user binary (engine "qemu")

    def canonical(self, reg: str) -> str:
        return self.aliases.get(reg, reg)


_RISCV = ("ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", *(f"a{i}" for i in range(8)),
          *(f"s{i}" for i in range(2, 12)), "t3", "t4", "t5", "t6")
_LOONG = ("ra", "tp", "sp", *(f"a{i}" for i in range(8)), *(f"t{i}" for i in range(9)), "u0",
          "fp", *(f"s{i}" for i in range(9)))
# n64 register names: $1 at, $2-$3 v0-v1, $4-$11 a0-a7, $12-$15 t0-t3, $16-$23 s0-s7, ...
_MIPS64 = ("at", "v0", "v1", *(f"a{i}" for i in range(8)), *(f"t{i}" for i in range(4)),
           *(f"s{i}" for i in range(8)), "t8", "t9", "k0", "k1", "gp", "sp", "fp", "ra")


def _numbered(prefix: str, names: tuple[str, ...], first: int) -> dict[str, str]:
    return {f"{prefix}{first + i}": n for i, n in enumerate(names)}


MACHINES: dict[str, Machine] = {
    m.arch: m
    for m in (
        Machine("x86_64", 8, "little", "unicorn",
                ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
                 *(f"r{i}" for i in range(8, 16))),
                "rsp", "[sp]", "rdi", "rax",
                {"di": "rdi", "si": "rsi", "dx": "rdx", "cx": "rcx", "ax": "rax", "sp": "rsp"}),
        Machine("i386", 4, "little", "unicorn",
                ("eax", "ebx", "ecx", "edx", "esi", "edi", "ebp", "esp"),
                "esp", "[sp]", "eax", "eax",
                {"ax": "eax", "dx": "edx", "cx": "ecx", "sp": "esp"}),
        Machine("arm64", 8, "little", "unicorn", (*(f"x{i}" for i in range(31)), "sp"),
                "sp", "x30", "x0", "x0", {"lr": "x30", "fp": "x29"}),
        Machine("riscv64", 8, "little", "unicorn", _RISCV, "sp", "ra", "a0", "a0",
                {**_numbered("x", _RISCV, 1), "fp": "s0"}),
        Machine("riscv32", 4, "little", "unicorn", _RISCV, "sp", "ra", "a0", "a0",
                {**_numbered("x", _RISCV, 1), "fp": "s0"}),
        Machine("loongarch64", 8, "little", "qemu", _LOONG, "sp", "ra", "a0", "a0",
                {**_numbered("r", _LOONG, 1), "s9": "fp"}, qemu="qemu-loongarch64"),
        Machine("s390x", 8, "big", "unicorn", tuple(f"r{i}" for i in range(16)),
                "r15", "r14", "r2", "r2", {"sp": "r15"}),
        Machine("ppc64le", 8, "little", "qemu", (*(f"r{i}" for i in range(32)), "lr"),
                "r1", "lr", "r3", "r3", {"sp": "r1"}, qemu="qemu-ppc64le"),
        Machine("arm", 4, "little", "unicorn", (*(f"r{i}" for i in range(13)), "sp", "lr"),
                "sp", "lr", "r0", "r0", {"r13": "sp", "r14": "lr", "fp": "r11", "ip": "r12"}),
        Machine("mips64el", 8, "little", "unicorn", _MIPS64, "sp", "ra", "a0", "v0",
                {**_numbered("r", _MIPS64, 1), "s8": "fp"}),
    )
}
