"""The system calls the guest makes, with distinctive values, and what each traced function sees.

Every value reaches its kernel function unchanged (anonymous mmap, fchown, fallocate's hole punch
and lseek on a tmpfs file), so a decoded argument either equals the value passed or is wrong.
Values with bits above 32 travel as 64-bit arguments on 32-bit arches (loff_t), and those arches'
stack and register-pair rules decide where their halves are.
"""

from __future__ import annotations

from dataclasses import dataclass

UID, GID = 123456, 654321
FALLOC_MODE = 3  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE: nothing is allocated
FALLOC_OFFSET, FALLOC_LEN = 0x12_3456_7000, 0x2_4680_1000
SEEK_TO = 0x9_8765_4000
MMAP_LEN, MMAP_PROT, MMAP_FLAGS = 0x7000, 0x1, 0x22  # PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS
MMAP_OFFSET = 0x1234_0000  # aligned for 4K and 64K pages


def mmap_addr(pointer_size: int) -> int:
    return 0x7E57_A000_0000 if pointer_size == 8 else 0x5E57_0000


def actions(pointer_size: int) -> list[list[str]]:
    """The loader's command line; action n (1-based) runs while the "phase" map holds n."""
    return [
        ["mmap", hex(mmap_addr(pointer_size)), hex(MMAP_LEN), hex(MMAP_PROT), hex(MMAP_FLAGS),
         hex(MMAP_OFFSET)],
        ["fchown", str(UID), str(GID)],
        ["fallocate", str(FALLOC_MODE), hex(FALLOC_OFFSET), hex(FALLOC_LEN)],
        ["lseek", hex(SEEK_TO)],
    ]


PHASE = {"mmap": 1, "fchown": 2, "fallocate": 3, "lseek": 4}
STRUCT_RETURN = "a struct returned by value"
RETURNED = -1  # the value the system call returned (the kernel may not honour an mmap hint)


@dataclass(frozen=True)
class Expect:
    function: str
    phase: int  # the action that reaches it
    args: dict[str, int]  # parameter name -> value it must have
    ret: int | None  # the return value (a one-member struct: its member), None: not compared,
    # RETURNED: what the system call returned
    # Parameters some kernels lack (do_mmap gained vm_flags after 6.1): compared where present.
    optional: frozenset[str] = frozenset()
    # Functions of one group stand in for each other where a kernel's BTF lacks some (s390x has
    # no make_kuid, 6.1 no from_vfsuid): at least one of the group must be checked.
    group: str | None = None

    def returned(self, calls: dict[str, str]) -> int | None:
        """The return value to compare; `calls`: action -> what the loader printed it returned."""
        if self.ret != RETURNED:
            return self.ret
        action = next(a for a, n in PHASE.items() if n == self.phase)
        return int(calls[action], 0)


def expectations(pointer_size: int, pagesize: int) -> list[Expect]:
    return [
        Expect("do_mmap", PHASE["mmap"],
               {"addr": mmap_addr(pointer_size), "len": MMAP_LEN, "prot": MMAP_PROT,
                "flags": MMAP_FLAGS, "vm_flags": 0, "pgoff": MMAP_OFFSET // pagesize},
               RETURNED, optional=frozenset({"vm_flags"})),
        Expect("make_kuid", PHASE["fchown"], {"uid": UID}, UID, group=STRUCT_RETURN),
        Expect("make_kgid", PHASE["fchown"], {"gid": GID}, GID, group=STRUCT_RETURN),
        # chown_common() hands the new owner to security_path_chown() through from_vfsuid():
        # a one-member struct both passed and returned by value (make_kuid is missing from
        # some kernels' BTF, e.g. s390x's).
        Expect("from_vfsuid", PHASE["fchown"], {"vfsuid": UID}, UID, group=STRUCT_RETURN),
        Expect("vfs_fallocate", PHASE["fallocate"],
               {"mode": FALLOC_MODE, "offset": FALLOC_OFFSET, "len": FALLOC_LEN}, 0),
        Expect("shmem_fallocate", PHASE["fallocate"],
               {"mode": FALLOC_MODE, "offset": FALLOC_OFFSET, "len": FALLOC_LEN}, 0),
        Expect("shmem_file_llseek", PHASE["lseek"], {"offset": SEEK_TO, "whence": 0}, SEEK_TO),
    ]
