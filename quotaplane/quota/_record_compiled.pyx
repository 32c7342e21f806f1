# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=False
"""The client quota managers' batch hot path, compiled: ``_plain_width`` and ``_record_plain_batch``.

The pure-Python functions in ``_client.py`` (and ``Rate.record_and_measure`` in ``metrics/_rate.py``) are
the reference; this module does the same work per item without the interpreter's bytecode dispatch, without a
frame for the fused record-and-measure and without a float object per intermediate result. It reads and writes
exactly the Python attributes the reference reads and writes (``Rate``'s and ``WindowedSum``'s slots), so a
manager can switch between the two paths between batches, and ``tests/quota/test_record_compiled.py`` holds
both to the same throttle times and the same sensor state on random workloads, bit for bit.

Whatever the C arithmetic could do differently from Python's is sent back to the reference: a time outside
``[0, 2**62)`` (a C ``long long`` could overflow where Python's ints do not), a sample value that is not a
``float``, a bound that is not a ``float``, a ``Rate`` whose remembered window is not there to reuse. Those items
go through the same Python methods the pure loop calls.

Built by ``setup.py`` (Cython, at install); without a C compiler the package installs without it and
``_client.py`` uses the pure path (``quotaplane.quota.compiled_core()`` says which).
"""

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

cdef long long _TIME_LIMIT = 1LL << 62
#: window lengths and sample counts below this keep ``(samples - 1) * window_ms`` far from overflowing
cdef long long _SMALL_LIMIT = 1LL << 30


cdef inline bint _in_range(object number):
    """``number`` an exact int in [0, 2**62): C arithmetic on it and on its differences cannot overflow."""
    return type(number) is int and 0 <= number < _TIME_LIMIT


cdef inline bint _is_str(object obj):
    return type(obj) is str


def plain_width(items):
    """``_client._plain_width``, in one pass: 3 or 4 if every item is a ``(str, str, number)`` or every item a
    ``(str, str, number, int)`` tuple with a finite value >= 0, else 0 (then checked item by item).

    Equal to the reference on every input (the tests compare them on random junk): exact types (a bool is
    neither a value nor a time), the same finiteness rule (the values' sum, as ``sum(values, 0.0)`` adds them,
    is finite), an int too large for a float gives 0 as the reference's OverflowError does.
    """
    cdef Py_ssize_t n = len(items)
    cdef Py_ssize_t width = -1
    cdef Py_ssize_t k
    cdef double total = 0.0
    cdef bint negative = False
    cdef object item, value
    if n == 0:
        return 0  # the reference's set of types is empty, not {tuple}
    for k in range(n):
        item = items[k]
        if type(item) is not tuple:
            return 0
        if width < 0:
            width = len(<tuple>item)
            if width != 3 and width != 4:
                return 0
        elif len(<tuple>item) != width:
            return 0
        if not _is_str((<tuple>item)[0]) or not _is_str((<tuple>item)[1]):
            return 0
        if width == 4 and type((<tuple>item)[3]) is not int:
            return 0
        value = (<tuple>item)[2]
        if type(value) is float:
            if PyFloat_AS_DOUBLE(value) < 0.0:
                negative = True
            total += PyFloat_AS_DOUBLE(value)
        elif type(value) is int:
            if value < 0:
                negative = True
            try:
                total += <double>float(value)
            except OverflowError:
                return 0
        else:
            return 0
    # ``min(values) >= 0.0`` and a finite sum: a NaN makes the sum NaN, an infinity makes it infinite
    if negative or not (total - total == 0.0):
        return 0
    return width


def record_plain_batch(
    dict fast_paths,
    object items,
    object batch_now_ms,
    object record_one,
    object sensors_for,
    object throttle,
    object record_reference,
):
    """``ClientQuotaManager._record_plain_batch`` over validated items; the throttle times, in order.

    ``items`` are ``(user, client_id, value, now_ms)`` tuples, or ``(user, client_id, value)`` tuples all
    recorded at ``batch_now_ms`` (None for the former). ``record_one(sensors_for(user, client_id, now_ms),
    value, now_ms)`` records an item whose client has no fast path (the manager's ``_record``),
    ``throttle(measured, bound, window_ms)`` is the manager's throttle time, and
    ``record_reference(rate, config, value, now_ms)`` the reference ``Rate.record_and_measure`` for what the C
    path sends back.
    """
    cdef list results = []
    cdef object item, user, client_id, value, now_ms, clients, entry
    cdef object quota_sensor, metric, rate, value_sensor, config, quota, bound, measured_obj
    cdef double measured, bound_value
    cdef bint within
    for item in items:
        user = (<tuple>item)[0]
        client_id = (<tuple>item)[1]
        value = (<tuple>item)[2]
        now_ms = (<tuple>item)[3] if batch_now_ms is None else batch_now_ms
        clients = fast_paths.get(user)
        entry = None if clients is None else (<dict>clients).get(client_id)
        if entry is None:
            results.append(record_one(sensors_for(user, client_id, now_ms), value, now_ms))
            continue
        quota_sensor = (<tuple>entry)[0]
        metric = (<tuple>entry)[1]
        rate = (<tuple>entry)[2]
        value_sensor = (<tuple>entry)[3]
        if value_sensor is not None:
            value_sensor.last_record_time_ms = now_ms
        quota_sensor.last_record_time_ms = now_ms
        config = metric.config
        quota = config.quota
        if quota is None:
            rate.record(config, value, now_ms)
            results.append(0)
            continue
        measured_obj = _record_and_measure(rate, config, value, now_ms)
        if measured_obj is None:
            measured_obj = record_reference(rate, config, value, now_ms)
        bound = quota.bound
        if type(measured_obj) is float and type(bound) is float:
            measured = PyFloat_AS_DOUBLE(measured_obj)
            bound_value = PyFloat_AS_DOUBLE(bound)
            within = (measured <= bound_value) if quota.upper else (measured >= bound_value)
        else:
            within = (measured_obj <= bound) if quota.upper else (measured_obj >= bound)
        if within:
            results.append(0)
        else:
            results.append(throttle(measured_obj, bound, rate.last_window_ms))
    return results


cdef object _record_and_measure(object rate, object config, object value, object now_ms):
    """``Rate.record_and_measure``'s two fast branches (a recording into the current sample before the deadline
    the last fused call proved), in C; None, having changed nothing, for everything else."""
    cdef object stat = rate.stat
    if stat._epoch is not rate._win_epoch or config is not rate._win_config:
        return None
    if not _in_range(now_ms):
        return None
    cdef long long t = now_ms
    cdef object window_obj = config.time_window_ms
    cdef object samples_obj = config.samples
    if not (type(window_obj) is int and 0 < window_obj < _SMALL_LIMIT):
        return None
    if not (type(samples_obj) is int and 0 < samples_obj < _SMALL_LIMIT):
        return None
    cdef Py_ssize_t i = stat._current
    cdef list counts = stat._counts
    cdef list values = stat._values
    cdef object count = <object>PyList_GET_ITEM(counts, i)
    if not (count < config.event_window):
        return None  # the current sample is full: it rolls over
    cdef object current = <object>PyList_GET_ITEM(values, i)
    cdef double addend
    if type(current) is not float:
        return None
    if type(value) is float:
        addend = PyFloat_AS_DOUBLE(value)
    elif type(value) is int:
        addend = float(value)  # as float + int converts it (validated: it fits a double)
    else:
        return None
    cdef object win_now = rate._win_now
    cdef bint same_ms = _in_range(win_now) and <long long>win_now == t
    cdef object deadline
    cdef long long window_ms, padded_windows, full_windows, oldest_start
    cdef long long elapsed = 0
    cdef double seconds
    if not same_ms:
        deadline = rate._win_deadline
        if not _in_range(deadline) or not (t < <long long>deadline):
            return None  # a time roll or a purge may be due (or the deadline is not an int): the reference
        if not _in_range(stat._oldest_start):
            return None
        window_ms = window_obj
        padded_windows = samples_obj - 1
        oldest_start = stat._oldest_start
        elapsed = t - oldest_start  # _padded_window_ms, written out
        full_windows = elapsed // window_ms
        if full_windows < padded_windows:
            elapsed += (padded_windows - full_windows) * window_ms
        if elapsed < 1:
            elapsed = 1
    if same_ms and type(rate._win_seconds) is not float:
        return None
    # nothing above changed anything: from here on the C path records
    values[i] = PyFloat_AS_DOUBLE(current) + addend  # WindowedSum's fold
    counts[i] = count + 1
    (<list>stat._lasts)[i] = now_ms
    if same_ms:
        seconds = PyFloat_AS_DOUBLE(rate._win_seconds)
    else:
        rate.last_window_ms = elapsed
        rate._win_now = now_ms
        seconds = elapsed / 1000.0
        rate._win_seconds = seconds
    return _java_sum(values) / seconds


cdef double _java_sum(list values) except? -1.0:
    """``sum(values, 0.0)`` over floats: plain double additions, left to right (Java's loop)."""
    cdef double total = 0.0
    cdef Py_ssize_t k
    cdef object v
    for k in range(PyList_GET_SIZE(values)):
        v = <object>PyList_GET_ITEM(values, k)
        if type(v) is float:
            total += PyFloat_AS_DOUBLE(v)
        else:
            total += <double>float(v)
    return total
