"""What target.c passes and returns: written from the C source, checked against nothing else."""

M64 = (1 << 64) - 1

ARGS = {
    "add7": {"a": -1, "b": -2, "c": -3, "d": -4, "e": 4000000000, "f": 0x123456789abc, "g": -77},
    "take_pair": {"p": {"a": -5, "b": 1234567890123}, "k": 3},
    "take_big": {"k": -9, "b": {"x": 11, "y": -22, "z": 33}, "c": 7},
    "make_pair": {"a": 21, "b": -8},
    "make_big": {"a": 1000},
    "many": {"a": 1, "b": -2, "c": 3, "d": -4, "e": 5, "f": -6, "g": 7, "h": -8,
             "s": {"a": -70000, "b": -300, "c": -7, "d": True}, "i": ord("Z")},
    "take_flags": {"f": {"lo": 5, "mid": -200, "hi": 987654}, "yes": True,
                   "u": 0xfedcba9876543210},
}

RETURNS = {
    "add7": -1 - 2 - 3 - 4 + 4000000000 + 0x123456789abc - 77,
    "take_pair": -5 * 3 + 1234567890123,
    "take_big": -9 + 11 - 22 + 33 + 7,
    "make_pair": {"a": 42, "b": -9},
    "make_big": {"x": 1000, "y": 1001, "z": -1000},
    "many": 1 - 2 + 3 - 4 + 5 - 6 + 7 - 8 - 70000 - 300 - 7 + 1 + ord("Z"),
    "take_flags": (5 - 200 + 987654 + 1 + 0x76543210) & 0xffffffff,
}

FUNCS = tuple(ARGS)
