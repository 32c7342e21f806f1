# cython: language_level=3, boundscheck=False, wraparound=False
"""A push's zstd frame decoded in one call that keeps the GIL: the common case of ``_codecs._zstd``.

Why: every zstd library for Python releases the GIL around each call into libzstd. A push's frame decodes in
~2 us, and each release hands the GIL to any thread waiting for it: in a shard, the telemetry archive's thread
waits for it after each of its own calls into C (compress, write, fsync). It is woken by every push's release,
finds the GIL taken again by the time it runs, and sleeps again: ~0.5 futile context switches a push, measured
(docs/performance.md, "Kept: a push's zstd frame is decoded without letting the GIL go"). Holding the GIL for a
decode bounded by ``OUTPUT_CAPACITY`` costs the other threads at most a few tens of microseconds.

Only the plain case is answered here: exactly one zstd frame filling ``data`` whose output fits
``min(limit, OUTPUT_CAPACITY)``. Anything else (a skippable frame, bytes after the frame, a truncated or
corrupt frame, a dictionary, more output) answers None and the caller decodes with the streaming decoder,
which gives the precise error, so the two agree on every input (``tests/telemetry/test_zstd_compiled.py``).

The zstd is python-zstandard's own, the one its streaming decoder runs: its functions are taken from the
package's cffi module (``zstandard._cffi``, which exports them) and called directly, with the GIL held, which
cffi's wrappers would release. Another zstd (the system's libzstd 1.5.4 here) judged some corrupt frames
differently from the bundled 1.5.7. Where that module cannot be imported this extension is not loaded and
``_codecs`` decodes with the streaming decoder alone.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize

from libc.stdint cimport uintptr_t

cdef extern from *:
    """
    #include <stddef.h>
    typedef struct ZSTD_DCtx_s ZSTD_DCtx;
    typedef struct ZSTD_inBuffer_s { const void* src; size_t size; size_t pos; } ZSTD_inBuffer;
    typedef struct ZSTD_outBuffer_s { void* dst; size_t size; size_t pos; } ZSTD_outBuffer;
    """
    ctypedef struct ZSTD_DCtx:
        pass
    ctypedef struct ZSTD_inBuffer:
        const void* src
        size_t size
        size_t pos
    ctypedef struct ZSTD_outBuffer:
        void* dst
        size_t size
        size_t pos

ctypedef ZSTD_DCtx* (*create_dctx_t)() noexcept nogil
ctypedef size_t (*dctx_reset_t)(ZSTD_DCtx*, int) noexcept nogil
ctypedef size_t (*decompress_stream_t)(ZSTD_DCtx*, ZSTD_outBuffer*, ZSTD_inBuffer*) noexcept nogil
ctypedef unsigned (*is_error_t)(size_t) noexcept nogil

from zstandard._cffi import ffi as _ffi, lib as _lib  # ImportError: the extension is not used (see _codecs)


cdef uintptr_t _address(str name):
    return int(_ffi.cast("uintptr_t", _ffi.addressof(_lib, name)))


cdef create_dctx_t ZSTD_createDCtx = <create_dctx_t>_address("ZSTD_createDCtx")
cdef dctx_reset_t ZSTD_DCtx_reset = <dctx_reset_t>_address("ZSTD_DCtx_reset")
cdef decompress_stream_t ZSTD_decompressStream = <decompress_stream_t>_address("ZSTD_decompressStream")
cdef is_error_t ZSTD_isError = <is_error_t>_address("ZSTD_isError")

#: The zstd this module decodes with: python-zstandard's own, the streaming decoder's.
ZSTD_VERSION = _ffi.string(_lib.ZSTD_versionString()).decode()
cdef enum:
    _CAPACITY = 128 * 1024

#: The most output decoded here (one zstd block's worth, as the streaming path's pieces); more goes that way.
OUTPUT_CAPACITY = _CAPACITY
#: ``ZSTD_reset_session_only``: a new frame, the context's parameters kept.
cdef int _RESET_SESSION = 1

# One context and one output buffer for the module: every call holds the GIL from start to end, so no two
# calls use them at once.
cdef ZSTD_DCtx* _dctx = ZSTD_createDCtx()
cdef char _out[_CAPACITY]
cdef const unsigned char* _MAGIC = b"\x28\xb5\x2f\xfd"

if _dctx == NULL:
    raise ImportError("libzstd could not create a decompression context")


def decompress_frame(bytes data, Py_ssize_t limit):
    """The output of ``data`` if it is exactly one zstd frame decoding to at most ``min(limit, OUTPUT_CAPACITY)``
    bytes; None for anything else (the caller's streaming decoder then decides).

    The frame is decoded as the streaming decoder does it (``ZSTD_decompressStream``, not the one-shot call,
    which is laxer with a block larger than the frame's window), so the two judge a frame alike."""
    cdef const unsigned char* src = data
    cdef size_t size = len(data)
    cdef ZSTD_inBuffer source
    cdef ZSTD_outBuffer output
    cdef size_t result, consumed, produced
    if limit < 0 or size < 4:
        return None
    if src[0] != _MAGIC[0] or src[1] != _MAGIC[1] or src[2] != _MAGIC[2] or src[3] != _MAGIC[3]:  # skippable, ...
        return None
    if ZSTD_isError(ZSTD_DCtx_reset(_dctx, _RESET_SESSION)):
        return None
    source.src = src
    source.size = size
    source.pos = 0
    output.dst = _out
    output.size = _CAPACITY if limit > _CAPACITY else <size_t>limit
    output.pos = 0
    while True:
        consumed = source.pos
        produced = output.pos
        result = ZSTD_decompressStream(_dctx, &output, &source)
        if ZSTD_isError(result):  # corrupt, a dictionary, a bad checksum
            return None
        if result == 0:  # the frame is complete: it must be all of ``data``
            return PyBytes_FromStringAndSize(_out, output.pos) if source.pos == size else None
        if output.pos == output.size or source.pos == size:  # more output than room, or a truncated frame
            return None
        if source.pos == consumed and output.pos == produced:  # no progress: let the streaming path judge
            return None
