"""The errno each exit of a batch stands for, as `btfgen decode` names it beside the return
(output.errno_of, the same rule over arrays): columnar's `errno` column of exits, the dataset's
`errno` and `errno_name`.

A kernel function's: -ret, for an integer return of -1..-4095 (the kernel's convention). A user
function's: for a -1 from a signed integer or a NULL pointer only, the error of the last system
call its thread made inside the call, carried in the exit's flags (output.EVENT_ERRNO_SHIFT);
never the kernel's guess. None (0 here, null in a column) where nothing is attributed: another
return, a return the BPF side failed to read, one not read in place (a struct), or a number
without a name.
"""

from __future__ import annotations

import errno

import numpy as np
import pyarrow as pa

from btfgen.probe import output

# The numbers that have a name here (what the printer names: errno.errorcode).
_NAMED = np.array(sorted(errno.errorcode), dtype=np.int64)
NUMBER = pa.int32()  # C's errno is an int


def numbers(ret, readable, flags, tag: str, kernel: bool) -> np.ndarray:
    """Per exit, its errno (0 where none): `ret` the returns read in place (a numpy integer
    array, signed where the type is), `readable` where the BPF side read them, `flags` the
    events' flags, `tag` the return type's tag."""
    out = np.zeros(len(ret), np.int64)
    if kernel:
        if tag != "int" or ret.dtype.kind != "i":
            return out
        code = -ret.astype(np.int64)
        out = np.where(readable & (code > 0), code, 0)
    else:
        signed = tag == "int" and ret.dtype.kind == "i"
        if not signed and tag != "ptr":
            return out
        failed = ret == (-1 if signed else 0)
        code = (flags.astype(np.int64) & output.EVENT_ERRNO_MASK) >> output.EVENT_ERRNO_SHIFT
        out = np.where(readable & failed, code, 0)
    return np.where(np.isin(out, _NAMED), out, 0)


def number_column(codes: np.ndarray):
    """The numbers as a column: null where 0."""
    return pa.array(codes.astype(np.int32), type=NUMBER, mask=codes == 0)


def name_column(numbers):
    """A number column's names, dictionary-encoded: null where it is."""
    codes = numbers.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    none = codes == 0
    uniques = np.unique(codes[~none])
    index = np.searchsorted(uniques, codes).astype(np.int32)
    names = pa.array([errno.errorcode[int(c)] for c in uniques], type=pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(index, mask=none), names)


__all__ = ["numbers", "number_column", "name_column"]
