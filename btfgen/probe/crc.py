"""CRC-32 as zlib makes it (the same polynomial, the same values, the same running argument),
at the machine's speed where it can: libdeflate's libdeflate_crc32 (carry-less multiplies:
~15 GB/s on this project's x86_64 machines, against ~4 for zlib.crc32) through ctypes where
libdeflate is installed (Debian: libdeflate0), else zlib.crc32. A recording's checks take as
long as its write with zlib's; so the recorder, and the columnar decoder reading them back.

Standard library only (ctypes). The buffer's address comes from the buffer protocol
(PyObject_GetBuffer), which read-only buffers (the ring's pages, mapped read-only) give as
well as writable ones; the call lets go of the GIL, as zlib's does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import zlib

SMALL = 16 << 10  # shorter buffers go to zlib: a ctypes call costs a few microseconds


class _PyBuffer(ctypes.Structure):
    # Py_buffer (Include/pybuffer.h), as every CPython 3 lays it out.
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


def _libdeflate():
    """libdeflate_crc32 as a callable, or None where libdeflate is not installed."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("deflate") or "libdeflate.so.0")
        fn = lib.libdeflate_crc32
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_uint32
    get, release = ctypes.pythonapi.PyObject_GetBuffer, ctypes.pythonapi.PyBuffer_Release
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    get.restype = ctypes.c_int
    release.argtypes = [ctypes.POINTER(_PyBuffer)]
    release.restype = None

    def crc32(data, value: int = 0) -> int:
        if len(data) < SMALL:
            return zlib.crc32(data, value)
        view = _PyBuffer()
        if get(data, ctypes.byref(view), 0):  # PyBUF_SIMPLE: contiguous bytes, read-only ok
            raise BufferError("no contiguous buffer")  # pythonapi raised the error already
        try:
            return fn(value & 0xFFFFFFFF, view.buf, view.len)
        finally:
            release(ctypes.byref(view))

    # Checked once against zlib: a library of that name making other values is not used.
    probe = bytes(range(256)) * 128
    return crc32 if crc32(probe, 7) == zlib.crc32(probe, 7) else None


_fast = _libdeflate()
crc32 = _fast or zlib.crc32
WHOSE = "libdeflate" if _fast else "zlib"
