# cython: language_level=3, boundscheck=False, wraparound=False
"""A shard's unpacking of a gateway's usage columns, compiled: the checks, the core's tuples and the split by
quota type in one pass.

``_usage_columns.unpack_usage`` is the reference. It checks the columns with Python's C loops and builds the
core's ``(user, client_id, value, now_ms)`` tuples with ``zip`` and ``itertools.compress``. Measured on
bench/cluster_quota.py's 1000-item micro-batches (a shard's in-process replay): ~550 us of a ~3.4 ms
``serve_at``, its largest part outside the core: the checks ~130 us (``min`` and ``sum`` over the
``array`` columns make a Python float or int of every item to compare it), the tuples ~150 us (the same boxing
again) and the split ~130 us. Here the values and times are read from the columns' bytes as C numbers, checked
with C comparisons, and boxed once, into the tuple the core takes.

``unpack_rows`` answers None for any batch it does not pass whole; the caller then runs the reference, which
raises the ValueError naming what is wrong, or, on a batch the reference passes after all (a sum of values near
the float range's end, where Python's ``sum`` decides), unpacks it itself. So this module decides no error and
passes nothing the reference refuses: ``tests/actors/test_usage_columns.py`` holds the two to the same answers
on random columns.

Built by ``setup.py`` with the quota core's extension (Cython, at install); without it the reference runs.
"""

import sys

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int64_t
from libc.string cimport memcpy

cdef double _INF = float("inf")
#: a sum of values below this is finite whichever way Python adds them; at or above it the reference decides
cdef double _SUM_BOUND = 1e300
#: the columns are little-endian; on a big-endian host the reference reads them
cdef bint _LITTLE = sys.byteorder == "little"


def unpack_rows(bytes codes, list users, list client_ids, bytes values, bytes times_ms):
    """``(produce indices, produce rows, fetch indices, fetch rows)`` of a batch whose every column passes
    ``unpack_usage``'s checks: ``codes`` one byte per item (0 PRODUCE, 1 FETCH), ``users`` and ``client_ids`` one
    name per item, ``values`` and ``times_ms`` 8 little-endian bytes per item (float64 >= 0 with a finite sum,
    int64 >= 0). A row is ``(user, client_id, value, now_ms)``; the indices are None when every item is of one
    type (the other type's rows are then empty). None when anything does not pass: the reference decides."""
    cdef Py_ssize_t count = PyBytes_GET_SIZE(codes)
    cdef Py_ssize_t k, fetches = 0
    cdef const unsigned char* code = <const unsigned char*>PyBytes_AS_STRING(codes)
    cdef const char* value_bytes = PyBytes_AS_STRING(values)
    cdef const char* time_bytes = PyBytes_AS_STRING(times_ms)
    cdef double value, total = 0.0
    cdef int64_t when
    cdef list produce_rows = []
    cdef list fetch_rows = []
    cdef object produce_indices = None
    cdef object fetch_indices = None
    cdef tuple row
    if not (
        _LITTLE
        and count >= 1
        and PyList_GET_SIZE(users) == count
        and PyList_GET_SIZE(client_ids) == count
        and PyBytes_GET_SIZE(values) == 8 * count
        and PyBytes_GET_SIZE(times_ms) == 8 * count
    ):
        return None
    for k in range(count):
        if code[k] > 1:
            return None
        fetches += code[k]
        memcpy(&value, value_bytes + 8 * k, 8)
        if not (value >= 0.0 and value < _INF):  # a NaN fails both
            return None
        total += value
        memcpy(&when, time_bytes + 8 * k, 8)
        if when < 0:
            return None
    if not total < _SUM_BOUND:
        return None
    if 0 < fetches < count:
        produce_indices = []
        fetch_indices = []
    for k in range(count):
        memcpy(&value, value_bytes + 8 * k, 8)
        memcpy(&when, time_bytes + 8 * k, 8)
        row = (<object>PyList_GET_ITEM(users, k), <object>PyList_GET_ITEM(client_ids, k), value, when)
        if code[k]:
            fetch_rows.append(row)
            if fetch_indices is not None:
                fetch_indices.append(k)
        else:
            produce_rows.append(row)
            if produce_indices is not None:
                produce_indices.append(k)
    return produce_indices, produce_rows, fetch_indices, fetch_rows
