# cython: language_level=3, boundscheck=False, wraparound=False
"""A gateway's per-item work on a columnar usage batch, compiled: the checks and the items in one pass.

``_quota_service._usage_columns`` is the reference. It checks a ``UsageColumns`` batch a column at a time with
Python's C loops (``min``, ``max(map(len, ...))``, ``"".join``), then zips the columns into the items. Measured on
bench/cluster_quota.py's 1000-item batches, the nine column checks cost ~290 us and the zip ~120 us: each
``map(len, users)`` calls ``len`` through the interpreter's generic call 1000 times. Here one loop reads each
item's five fields once, checks them with C comparisons and builds its tuple.

``usage_items`` answers None for any batch it does not pass whole (an item out of range, an unexpected type,
columns of unequal length); the caller then runs the reference, which raises INVALID_ARGUMENT naming the first bad
item and field, or, on a batch the reference passes after all, builds the items itself. So this module decides no
error message and passes nothing the reference refuses: ``tests/services/test_gateway_columns.py`` holds
the two to the same answers on random junk.

Built by ``setup.py`` with the quota core's extension (Cython, at install); without it the reference runs.
"""

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    Py_ssize_t PyUnicode_FindChar(object text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2

cdef double _INF = float("inf")


cdef inline bint _name_ok(object name, Py_ssize_t max_name, bint allow_empty) except -1:
    """``GatewayConfig.check_name``'s three conditions, for an exact ``str``."""
    cdef Py_ssize_t length
    if type(name) is not str:
        return False
    length = PyUnicode_GET_LENGTH(name)
    if length > max_name or (length == 0 and not allow_empty):
        return False
    return length == 0 or PyUnicode_FindChar(name, 0, 0, length, 1) == -1


def usage_items(
    list quota_types,
    list users,
    list client_ids,
    list values,
    list times,
    Py_ssize_t max_name,
    long long produce,
    long long fetch,
    object produce_name,
    object fetch_name,
):
    """The items ``(quota type name, user, client_id, value, now_ms)`` when every item passes the gateway's checks:
    its quota type ``produce`` or ``fetch`` (named ``produce_name`` / ``fetch_name``), its value a finite float
    >= 0, its user a non-empty name and its client id a name (at most ``max_name`` characters, no NUL), its time
    an int >= 0. None otherwise: the caller's reference decides."""
    cdef Py_ssize_t count = PyList_GET_SIZE(quota_types)
    cdef Py_ssize_t k
    cdef int overflow = 0
    cdef long long code, when
    cdef double value
    cdef object quota_type, user, client_id, number, time_ms
    cdef list items = []
    if not (
        PyList_GET_SIZE(users) == count
        and PyList_GET_SIZE(client_ids) == count
        and PyList_GET_SIZE(values) == count
        and PyList_GET_SIZE(times) == count
    ):
        return None
    for k in range(count):
        quota_type = <object>PyList_GET_ITEM(quota_types, k)
        if type(quota_type) is not int:
            return None
        code = PyLong_AsLongLongAndOverflow(quota_type, &overflow)
        if overflow != 0 or (code != produce and code != fetch):
            return None
        number = <object>PyList_GET_ITEM(values, k)
        if type(number) is not float:
            return None
        value = PyFloat_AS_DOUBLE(number)
        if not (value >= 0.0 and value < _INF):  # a NaN fails both
            return None
        time_ms = <object>PyList_GET_ITEM(times, k)
        if type(time_ms) is not int:
            return None
        when = PyLong_AsLongLongAndOverflow(time_ms, &overflow)
        if overflow != 0 or when < 0:
            return None
        user = <object>PyList_GET_ITEM(users, k)
        client_id = <object>PyList_GET_ITEM(client_ids, k)
        if not (_name_ok(user, max_name, False) and _name_ok(client_id, max_name, True)):
            return None
        items.append((produce_name if code == produce else fetch_name, user, client_id, number, time_ms))
    return items
