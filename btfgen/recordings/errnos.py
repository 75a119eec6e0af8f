"""The errno each exit of a batch stands for, as `btfgen decode` names it beside the return
(output.errno_of, the same rule over arrays): the dataset's `errno` and `errno_name` columns.

A kernel function's: -ret, for an integer return of -1..-4095 (the kernel's convention). A user
function's: for a -1 from a signed integer or a NULL pointer only, the error of the last system
call its thread made inside the call, carried in the exit's flags (output.EVENT_ERRNO_SHIFT);
never the kernel's guess. None where nothing is attributed: another return, a return the BPF
side failed to read, one not read in place (a struct), or a number without a name.
"""

from __future__ import annotations

import errno

import numpy as np
import pyarrow as pa

from btfgen.probe import output
from btfgen.recordings import columnar, grouping

# The numbers that have a name here (what the printer names: errno.errorcode).
_NAMED = np.array(sorted(errno.errorcode), dtype=np.int64)
NUMBER = pa.int32()  # C's errno is an int


def numbers(layout: columnar.Layout, payload, kernel: bool) -> np.ndarray:
    """Per exit of `payload` (a section of `layout`'s exits), its errno, 0 where none."""
    records = grouping.records(payload, layout.dtype)
    out = np.zeros(len(records), np.int64)
    fn = layout.fn
    ret = [(mask, is_bool) for column, mask, is_bool in layout.scalars if column == "return"]
    if not len(records) or layout.kind != 1 or not ret or ret[0][1]:
        return out
    mask, tag = ret[0][0], fn.ret.value.type.tag
    values = records["return"]
    readable = (records[columnar.FAILED] & np.uint64(mask)) == 0 if mask else \
        np.ones(len(records), bool)
    if kernel:
        if tag != "int" or values.dtype.kind != "i":
            return out
        code = -values.astype(np.int64)
        out = np.where(readable & (code > 0), code, 0)
    else:
        signed = tag == "int" and values.dtype.kind == "i"
        if not signed and tag != "ptr":
            return out
        failed = values == (-1 if signed else 0)
        code = (records[columnar.FLAGS].astype(np.int64) & output.EVENT_ERRNO_MASK) \
            >> output.EVENT_ERRNO_SHIFT
        out = np.where(readable & failed, code, 0)
    return np.where(np.isin(out, _NAMED), out, 0)


def columns(codes: np.ndarray) -> tuple:
    """(errno, errno_name): the numbers, null where 0, and their names, dictionary-encoded."""
    none = codes == 0
    number = pa.array(codes.astype(np.int32), type=NUMBER, mask=none)
    uniques = np.unique(codes[~none])
    index = np.searchsorted(uniques, codes).astype(np.int32)
    names = pa.array([errno.errorcode[int(c)] for c in uniques], type=pa.string())
    return number, pa.DictionaryArray.from_arrays(pa.array(index, mask=none), names)


def empty(n: int) -> tuple:
    """An entry's (or a batch's without exits) errno columns: null."""
    return columns(np.zeros(n, np.int64))


__all__ = ["numbers", "columns", "empty"]
