# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=False
"""The client quota managers' batch hot path, compiled: ``_plain_width`` and ``_record_plain_batch``, and the
throttle-time recordings of ``throttle_batch`` (a shard's answered throttles, a tenth of a batch's items under load);
and the copy of the quota sensors' samples a shard's usage checkpoint takes under its serving lock
(``copy_quota_sensors``; ``_usage_state._copy_sensors`` is its reference).

The pure-Python functions in ``_client.py`` (and ``Rate.record_and_measure`` in ``metrics/_rate.py``) are
the reference; this module does the same work per item without the interpreter's bytecode dispatch, without a
frame for the fused record-and-measure and without a float object per intermediate result. That includes what
happens once a window per client (a sample rolling over) and after a silence (obsolete samples purged): in
bench/cluster_quota.py's workload, one item in six. It reads and writes exactly the Python attributes
the reference reads and writes (``Rate``'s and ``WindowedSum``'s slots), so a
manager can switch between the two paths between batches, and ``tests/quota/test_record_compiled.py`` holds
both to the same throttle times and the same sensor state on random workloads, bit for bit.

Whatever the C arithmetic could do differently from Python's is sent back to the reference: a time outside
``[0, 2**62)`` (a C ``long long`` could overflow where Python's ints do not), a sample value that is not a
``float``, a bound that is not a ``float``, a stat that is not exactly a ``WindowedSum`` per second. Those items
go through the same Python methods the pure loop calls.

Built by ``setup.py`` (Cython, at install); without a C compiler the package installs without it and
``_client.py`` uses the pure path (``quotaplane.quota.compiled_core()`` says which).
"""

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow

cimport cpython.array as carray
from cpython.object cimport Py_SIZE, Py_TYPE, PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

from types import MemberDescriptorType

from quotaplane.metrics._config import MetricConfig, Quota, TimeUnit
from quotaplane.metrics._rate import Rate
from quotaplane.metrics._registry import KafkaMetric, MetricName
from quotaplane.metrics._sensor import Sensor
from quotaplane.metrics._stats import Avg, WindowedSum, _epochs


# --- slots read by their offset ----------------------------------------------------------------------------
# Every object the hot path touches has ``__slots__``: a slot is a pointer at a fixed offset in its object, but a
# read through ``getattr`` looks the name up in the type (and its bases), finds the member descriptor and calls
# it (~25 ns; the loop reads about 25 of them an item, the largest share of its time by ``perf``). Here each slot
# the loop reads is looked up once, at import, and read by its offset, for objects of exactly the type the offset
# was taken from; an object of any other type (a subclass may have a property of that name) or a slot not set is
# read through ``getattr``, as the reference does.

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member

cdef extern from "structmember.h":
    enum: T_OBJECT_EX  # a slot of ``__slots__``: an object pointer, NULL while unset


cdef struct Slot:
    PyTypeObject *owner
    Py_ssize_t offset
    PyObject *name


#: the slots' names and types, kept alive for the ``Slot`` structs that point at them
_SLOT_OWNERS = []


cdef Slot _slot(type owner, str name) except *:
    """``owner``'s slot ``name`` (its own or a base class's) as a ``Slot``."""
    descriptor = getattr(owner, name)
    if type(descriptor) is not MemberDescriptorType:
        raise TypeError(f"{owner.__name__}.{name} is not a slot")
    if (<PyMemberDescrObject*><PyObject*>descriptor).d_member.type != T_OBJECT_EX:
        raise TypeError(f"{owner.__name__}.{name} is not an object slot")
    _SLOT_OWNERS.append((owner, name))
    cdef Slot slot
    slot.owner = <PyTypeObject*>owner
    slot.offset = (<PyMemberDescrObject*><PyObject*>descriptor).d_member.offset
    slot.name = <PyObject*>name
    return slot


cdef inline object _get(object obj, Slot *slot):
    """``getattr(obj, slot name)``."""
    cdef PyObject *value
    if Py_TYPE(obj) is slot.owner:
        value = (<PyObject**>((<char*><PyObject*>obj) + slot.offset))[0]
        if value is not NULL:
            return <object>value
    return getattr(obj, <str>slot.name)


cdef inline int _set(object obj, Slot *slot, object value) except -1:
    """``setattr(obj, slot name, value)``."""
    cdef PyObject **field
    cdef PyObject *old
    if Py_TYPE(obj) is slot.owner:
        field = <PyObject**>((<char*><PyObject*>obj) + slot.offset)
        old = field[0]
        Py_INCREF(value)
        field[0] = <PyObject*>value
        Py_XDECREF(old)
        return 0
    setattr(obj, <str>slot.name, value)
    return 0


cdef Slot RATE_STAT = _slot(Rate, "stat")
cdef Slot RATE_UNIT = _slot(Rate, "_unit")
cdef Slot RATE_WIN_CONFIG = _slot(Rate, "_win_config")
cdef Slot RATE_WIN_DEADLINE = _slot(Rate, "_win_deadline")
cdef Slot RATE_WIN_EPOCH = _slot(Rate, "_win_epoch")
cdef Slot RATE_WIN_NOW = _slot(Rate, "_win_now")
cdef Slot RATE_WIN_SECONDS = _slot(Rate, "_win_seconds")
cdef Slot RATE_LAST_WINDOW_MS = _slot(Rate, "last_window_ms")
cdef Slot STAT_COUNTS = _slot(WindowedSum, "_counts")
cdef Slot STAT_CURRENT = _slot(WindowedSum, "_current")
cdef Slot STAT_EPOCH = _slot(WindowedSum, "_epoch")
cdef Slot STAT_INITIAL_VALUE = _slot(WindowedSum, "_initial_value")
cdef Slot STAT_LASTS = _slot(WindowedSum, "_lasts")
cdef Slot STAT_OLDEST_START = _slot(WindowedSum, "_oldest_start")
cdef Slot STAT_OTHERS_LAST = _slot(WindowedSum, "_others_last")
cdef Slot STAT_STARTS = _slot(WindowedSum, "_starts")
cdef Slot STAT_VALUES = _slot(WindowedSum, "_values")
cdef Slot CONFIG_EVENT_WINDOW = _slot(MetricConfig, "event_window")
cdef Slot CONFIG_QUOTA = _slot(MetricConfig, "quota")
cdef Slot CONFIG_SAMPLES = _slot(MetricConfig, "samples")
cdef Slot CONFIG_TIME_WINDOW_MS = _slot(MetricConfig, "time_window_ms")
cdef Slot QUOTA_BOUND = _slot(Quota, "bound")
cdef Slot QUOTA_UPPER = _slot(Quota, "upper")
cdef Slot METRIC_CONFIG = _slot(KafkaMetric, "config")
cdef Slot SENSOR_LAST_RECORD_TIME_MS = _slot(Sensor, "last_record_time_ms")
cdef Slot SENSOR_SHOULD_RECORD = _slot(Sensor, "_should_record")
cdef Slot SENSOR_RECORDERS = _slot(Sensor, "_recorders")
cdef Slot SENSOR_PARENTS = _slot(Sensor, "parents")
cdef Slot METRIC_STAT = _slot(KafkaMetric, "stat")
cdef Slot METRIC_METRIC_NAME = _slot(KafkaMetric, "metric_name")
cdef Slot SENSOR_METRICS = _slot(Sensor, "_metrics")
cdef Slot NAME_NAME = _slot(MetricName, "name")
cdef Slot NAME_GROUP = _slot(MetricName, "group")
cdef Slot AVG_COUNTS = _slot(Avg, "_counts")
cdef Slot AVG_CURRENT = _slot(Avg, "_current")
cdef Slot AVG_LASTS = _slot(Avg, "_lasts")
cdef Slot AVG_STARTS = _slot(Avg, "_starts")
cdef Slot AVG_VALUES = _slot(Avg, "_values")

cdef object _SECONDS = TimeUnit.SECONDS
cdef object _WindowedSum = WindowedSum
cdef object _Avg = Avg
cdef object _Sensor = Sensor
cdef object _KafkaMetric = KafkaMetric
#: the sampled stats' epoch numbers (``SampledStat._restructured`` takes the next one at each structural change)
cdef object _EPOCHS = _epochs

cdef object _INF = float("inf")
cdef long long _TIME_LIMIT = 1LL << 62
#: window lengths and sample counts below this keep ``(samples - 1) * window_ms`` far from overflowing
cdef long long _SMALL_LIMIT = 1LL << 30


cdef inline bint _small_window(object config, long long *window_ms, long long *samples):
    """The config's window length and sample count into ``window_ms`` and ``samples`` when both are exact ints in
    ``(0, 2**30)``: the padding arithmetic on them (``(samples - 1) * window_ms``, ``samples * window_ms``) cannot
    overflow a C long long. False otherwise."""
    cdef object window_obj = _get(config, &CONFIG_TIME_WINDOW_MS)
    cdef object samples_obj = _get(config, &CONFIG_SAMPLES)
    if not (type(window_obj) is int and 0 < window_obj < _SMALL_LIMIT
            and type(samples_obj) is int and 0 < samples_obj < _SMALL_LIMIT):
        return False
    window_ms[0] = window_obj
    samples[0] = samples_obj
    return True


cdef inline bint _as_addend(object value, double *addend):
    """A recorded value as the double ``float + value`` adds (an int converted as ``float(value)``: validated, it
    fits a double); False for any other type."""
    if type(value) is float:
        addend[0] = PyFloat_AS_DOUBLE(value)
    elif type(value) is int:
        addend[0] = float(value)
    else:
        return False
    return True


cdef inline bint _in_range(object number):
    """``number`` an exact int in [0, 2**62): C arithmetic on it and on its differences cannot overflow (read
    as a C long long, without a Python int made for the comparison)."""
    cdef int overflow = 0
    cdef long long v
    if type(number) is not int:
        return False
    v = PyLong_AsLongLongAndOverflow(number, &overflow)
    return overflow == 0 and 0 <= v < _TIME_LIMIT


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
            _set(value_sensor, &SENSOR_LAST_RECORD_TIME_MS, now_ms)
        _set(quota_sensor, &SENSOR_LAST_RECORD_TIME_MS, now_ms)
        config = _get(metric, &METRIC_CONFIG)
        quota = _get(config, &CONFIG_QUOTA)
        if quota is None:
            rate.record(config, value, now_ms)
            results.append(0)
            continue
        measured_obj = _record_and_measure(rate, config, value, now_ms)
        if measured_obj is None:
            measured_obj = _record_and_measure_anew(rate, config, value, now_ms)
        if measured_obj is None:
            measured_obj = record_reference(rate, config, value, now_ms)
        bound = _get(quota, &QUOTA_BOUND)
        if type(measured_obj) is float and type(bound) is float:
            measured = PyFloat_AS_DOUBLE(measured_obj)
            bound_value = PyFloat_AS_DOUBLE(bound)
            within = (measured <= bound_value) if _get(quota, &QUOTA_UPPER) else (measured >= bound_value)
        else:
            within = (measured_obj <= bound) if _get(quota, &QUOTA_UPPER) else (measured_obj >= bound)
        if within:
            results.append(0)
        else:
            results.append(throttle(measured_obj, bound, _get(rate, &RATE_LAST_WINDOW_MS)))
    return results


cdef object _record_and_measure(object rate, object config, object value, object now_ms):
    """``Rate.record_and_measure``'s two fast branches (a recording into the current sample before the deadline
    the last fused call proved), in C; None, having changed nothing, for everything else."""
    cdef object stat = _get(rate, &RATE_STAT)
    if _get(stat, &STAT_EPOCH) is not _get(rate, &RATE_WIN_EPOCH) or config is not _get(rate, &RATE_WIN_CONFIG):
        return None
    if not _in_range(now_ms):
        return None
    cdef long long t = now_ms
    cdef long long window_ms = 0, samples = 0
    if not _small_window(config, &window_ms, &samples):
        return None
    cdef Py_ssize_t i = _get(stat, &STAT_CURRENT)
    cdef list counts = _get(stat, &STAT_COUNTS)
    cdef list values = _get(stat, &STAT_VALUES)
    cdef object count = <object>PyList_GET_ITEM(counts, i)
    if not (count < _get(config, &CONFIG_EVENT_WINDOW)):
        return None  # the current sample is full: it rolls over
    cdef object current = <object>PyList_GET_ITEM(values, i)
    cdef double addend = 0.0
    if type(current) is not float or not _as_addend(value, &addend):
        return None
    cdef object win_now = _get(rate, &RATE_WIN_NOW)
    cdef bint same_ms = _in_range(win_now) and <long long>win_now == t
    cdef object deadline, oldest_start_obj
    cdef long long padded_windows, full_windows, oldest_start
    cdef long long elapsed = 0
    cdef double seconds
    if not same_ms:
        deadline = _get(rate, &RATE_WIN_DEADLINE)
        if not _in_range(deadline) or not (t < <long long>deadline):
            return None  # a time roll or a purge may be due (or the deadline is not an int): the reference
        oldest_start_obj = _get(stat, &STAT_OLDEST_START)
        if not _in_range(oldest_start_obj):
            return None
        padded_windows = samples - 1
        oldest_start = oldest_start_obj
        elapsed = t - oldest_start  # _padded_window_ms, written out
        full_windows = elapsed // window_ms
        if full_windows < padded_windows:
            elapsed += (padded_windows - full_windows) * window_ms
        if elapsed < 1:
            elapsed = 1
    if same_ms and type(_get(rate, &RATE_WIN_SECONDS)) is not float:
        return None
    # nothing above changed anything: from here on the C path records
    values[i] = PyFloat_AS_DOUBLE(current) + addend  # WindowedSum's fold
    counts[i] = count + 1
    (<list>_get(stat, &STAT_LASTS))[i] = now_ms
    if same_ms:
        seconds = PyFloat_AS_DOUBLE(_get(rate, &RATE_WIN_SECONDS))
    else:
        _set(rate, &RATE_LAST_WINDOW_MS, elapsed)
        _set(rate, &RATE_WIN_NOW, now_ms)
        seconds = elapsed / 1000.0
        _set(rate, &RATE_WIN_SECONDS, seconds)
    return _java_sum(values) / seconds


cdef object _record_and_measure_anew(object rate, object config, object value, object now_ms):
    """``Rate._record_and_measure_anew`` in C (the sample roll-over, the purge of obsolete samples, what the next
    fused call may rely on); None, having changed nothing, where the reference must run.

    The reference's recording, roll-over (``SampledStat._advance``: the next slot of ``samples + 1``, appended or
    reset) and purge (``purge_obsolete_samples``: every other sample whose last event is ``samples * window`` old)
    are written out over the stat's lists. Every number read is checked first (exact ints in ``[0, 2**62)``, float
    values, window and samples below 2**30), so nothing is changed unless the whole call can run here. The stat's
    derived state is then rebuilt as ``_restructured`` rebuilds it, once per roll-over or purge: the reference
    rebuilds it after each reset, and it is a function of the samples alone (with a fresh epoch).
    """
    cdef object stat = _get(rate, &RATE_STAT)
    if type(stat) is not _WindowedSum or _get(rate, &RATE_UNIT) is not _SECONDS:
        return None
    cdef long long window_ms = 0, samples = 0
    if not _in_range(now_ms) or not _small_window(config, &window_ms, &samples):
        return None
    cdef object current_obj = _get(stat, &STAT_CURRENT)
    cdef object starts_obj = _get(stat, &STAT_STARTS)
    cdef object lasts_obj = _get(stat, &STAT_LASTS)
    cdef object values_obj = _get(stat, &STAT_VALUES)
    cdef object counts_obj = _get(stat, &STAT_COUNTS)
    if not (type(starts_obj) is list and type(lasts_obj) is list and type(values_obj) is list
            and type(counts_obj) is list and type(current_obj) is int):
        return None
    cdef list starts = starts_obj
    cdef list lasts = lasts_obj
    cdef list values = values_obj
    cdef list counts = counts_obj
    cdef Py_ssize_t size = PyList_GET_SIZE(starts)
    if size == 0 or not (PyList_GET_SIZE(lasts) == PyList_GET_SIZE(values) == PyList_GET_SIZE(counts) == size):
        return None
    cdef long long t = now_ms
    cdef long long expire_ms = samples * window_ms
    if not (0 <= current_obj < size):
        return None
    cdef Py_ssize_t i = current_obj
    cdef Py_ssize_t k
    # every start and last event an exact int in range, every value a float: the C arithmetic below holds
    for k in range(size):
        if not _in_range(<object>PyList_GET_ITEM(starts, k)) or not _in_range(<object>PyList_GET_ITEM(lasts, k)):
            return None
        if type(<object>PyList_GET_ITEM(values, k)) is not float:
            return None
        if type(<object>PyList_GET_ITEM(counts, k)) is not int:
            return None
    cdef double addend = 0.0
    if not _as_addend(value, &addend):
        return None
    cdef object initial = _get(stat, &STAT_INITIAL_VALUE)
    if type(initial) is not float:
        return None
    # what the last restructuring derived: an oldest start in range, the others' earliest event in range or none
    cdef object others_last = _get(stat, &STAT_OTHERS_LAST)
    if not _in_range(_get(stat, &STAT_OLDEST_START)):
        return None
    if not (_in_range(others_last) or (type(others_last) is float and others_last == _INF)):
        return None
    cdef bint roll = (t - <long long>(<object>PyList_GET_ITEM(starts, i)) >= window_ms
                      or <object>PyList_GET_ITEM(counts, i) >= _get(config, &CONFIG_EVENT_WINDOW))
    # nothing above changed anything: from here on the C path records
    if roll:  # SampledStat._advance
        i = (i + 1) % (samples + 1)
        _set(stat, &STAT_CURRENT, i)
        if i >= size:
            starts.append(now_ms)
            lasts.append(now_ms)
            values.append(initial)
            counts.append(0)
            size += 1
        else:
            starts[i] = now_ms
            lasts[i] = now_ms
            values[i] = initial
            counts[i] = 0
        _restructured(stat, starts, lasts, i)
    values[i] = PyFloat_AS_DOUBLE(<object>PyList_GET_ITEM(values, i)) + addend  # WindowedSum's fold
    counts[i] = <object>PyList_GET_ITEM(counts, i) + 1
    lasts[i] = now_ms
    # the current sample's last event is now: only another sample can be obsolete
    others_last = _get(stat, &STAT_OTHERS_LAST)
    if type(others_last) is int and t - <long long>others_last >= expire_ms:  # purge_obsolete_samples
        for k in range(size):
            if t - <long long>(<object>PyList_GET_ITEM(lasts, k)) >= expire_ms:
                starts[k] = now_ms
                lasts[k] = now_ms
                values[k] = initial
                counts[k] = 0
        _restructured(stat, starts, lasts, i)
    cdef long long oldest_start = _get(stat, &STAT_OLDEST_START)
    cdef long long elapsed = t - oldest_start  # _padded_window_ms, written out
    cdef long long full_windows = elapsed // window_ms
    if full_windows < samples - 1:
        elapsed += (samples - 1 - full_windows) * window_ms
    if elapsed < 1:
        elapsed = 1
    _set(rate, &RATE_LAST_WINDOW_MS, elapsed)
    # the deadline before which neither a roll-over nor a purge can happen (see Rate._record_and_measure_anew)
    # i: the current sample, its start in range (checked, or the roll's time): the sum fits a long long
    cdef object roll_at = <long long>(<object>PyList_GET_ITEM(starts, i)) + window_ms
    others_last = _get(stat, &STAT_OTHERS_LAST)
    _set(rate, &RATE_WIN_DEADLINE, roll_at if type(others_last) is not int else min(roll_at, others_last + expire_ms))
    _set(rate, &RATE_WIN_EPOCH, _get(stat, &STAT_EPOCH))
    _set(rate, &RATE_WIN_CONFIG, config)
    _set(rate, &RATE_WIN_NOW, now_ms)
    cdef double seconds = elapsed / 1000.0
    _set(rate, &RATE_WIN_SECONDS, seconds)
    return _java_sum(values) / seconds


cdef int _restructured(object stat, list starts, list lasts, Py_ssize_t current) except -1:
    """``SampledStat._restructured`` over one or more samples whose starts and last events are all ints in range
    (checked by the caller): a fresh epoch, the oldest start (the first of equal ones, as ``min``) and the earliest
    last event of the samples other than the current one (``math.inf`` where there is none)."""
    cdef Py_ssize_t size = PyList_GET_SIZE(starts)
    cdef Py_ssize_t k, oldest = 0, earliest = -1
    _set(stat, &STAT_EPOCH, next(_EPOCHS))
    for k in range(1, size):
        if <long long>(<object>PyList_GET_ITEM(starts, k)) < <long long>(<object>PyList_GET_ITEM(starts, oldest)):
            oldest = k
    for k in range(size):
        if k == current:
            continue
        if earliest < 0 or (<long long>(<object>PyList_GET_ITEM(lasts, k))
                            < <long long>(<object>PyList_GET_ITEM(lasts, earliest))):
            earliest = k
    _set(stat, &STAT_OLDEST_START, <object>PyList_GET_ITEM(starts, oldest))
    _set(stat, &STAT_OTHERS_LAST, <object>PyList_GET_ITEM(lasts, earliest) if earliest >= 0 else _INF)
    return 0


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


# --- the throttle-time metric ------------------------------------------------------------------------------------
def record_throttle_times(object cached_get, object items, object throttle):
    """``ClientQuotaManager.throttle_batch``'s loop: for each ``(user, client_id, throttle_time_ms, now_ms)``, the
    throttle recorded in the client's ``throttle-time`` sensor (Kafka's broker records each throttle it applies).

    ``cached_get`` finds a client's cached ``ClientSensors`` by ``(user, client_id)``; an item without them, or with
    anything but an int >= 0 as its time, goes to ``throttle`` (the checked call), as in the reference. A
    recording that stays in the sensor's current sample (the common case: one roll-over a window per client) is
    done here; any other (a new or rolled sample, a sensor of another shape) goes to ``Sensor.record``."""
    cdef object user, client_id, throttle_ms, now_ms, sensors
    for user, client_id, throttle_ms, now_ms in items:
        sensors = cached_get((user, client_id))
        if sensors is None or type(throttle_ms) is not int or type(now_ms) is not int or throttle_ms < 0:
            throttle(user, client_id, throttle_ms, now_ms)
        elif throttle_ms > 0:
            sensor = sensors.throttle_time_sensor
            value = float(throttle_ms)
            if not _record_in_current_sample(sensor, value, now_ms):
                sensor.record(value, now_ms)
    return None


cdef bint _record_in_current_sample(object sensor, object value, object now_ms) except -1:
    """``sensor.record(value, now_ms)`` for a sensor of one ``Avg`` metric without a quota and without parents,
    whose current sample takes the value (within its time and event windows): the sensor's last recording time,
    and the sample's value, count and last event, as ``Sensor.record`` and ``SampledStat.record`` set them. False,
    with nothing changed, for anything else."""
    cdef object recorders, metric, stat, config, starts, counts, values, lasts, current, count
    if type(sensor) is not _Sensor or _get(sensor, &SENSOR_SHOULD_RECORD) is not True or _get(sensor, &SENSOR_PARENTS):
        return False
    recorders = _get(sensor, &SENSOR_RECORDERS)
    if type(recorders) is not tuple or len(recorders) != 1:
        return False
    metric = (<tuple>recorders)[0][0]
    if type(metric) is not _KafkaMetric:
        return False
    stat = _get(metric, &METRIC_STAT)
    config = _get(metric, &METRIC_CONFIG)
    if type(stat) is not _Avg or type(config) is not MetricConfig or _get(config, &CONFIG_QUOTA) is not None:
        return False
    starts = _get(stat, &AVG_STARTS)
    counts = _get(stat, &AVG_COUNTS)
    values = _get(stat, &AVG_VALUES)
    lasts = _get(stat, &AVG_LASTS)
    current = _get(stat, &AVG_CURRENT)
    if not (type(starts) is list and type(counts) is list and type(values) is list and type(lasts) is list):
        return False
    if type(current) is not int or not 0 <= current < len(starts) or len(starts) != len(counts):
        return False
    count = counts[current]
    if (
        now_ms - starts[current] >= _get(config, &CONFIG_TIME_WINDOW_MS)
        or count >= _get(config, &CONFIG_EVENT_WINDOW)
    ):
        return False  # the sample rolls over: the reference's ``_advance``
    _set(sensor, &SENSOR_LAST_RECORD_TIME_MS, now_ms)
    values[current] = values[current] + value
    counts[current] = count + 1
    lasts[current] = now_ms
    return True


# --- the usage checkpoint's copy ---------------------------------------------------------------------------------
def copy_quota_sensors(object names, dict registry, dict kinds, object copy_reference):
    """``_usage_state._copy_sensors`` without a routing filter (a checkpoint's copy): each quota sensor that
    ``registry`` (the metrics' sensors by name) holds under one of ``names`` appended to its manager's columns.

    ``kinds`` maps a sensor name's prefix (a quota type name) to ``(metric name, names, last_records, currents,
    sizes, starts, lasts, values, counts)``: the manager's quota metric name and its ``UsageColumns``' list and
    arrays. A sensor of exactly the shape the managers build (a ``Sensor`` whose metrics are ``KafkaMetric``s of a
    ``Rate`` over a ``WindowedSum``, with ``int`` times and counts a C ``long long`` holds and ``float`` values) is
    copied here, reading the slots the reference reads; any other goes whole to ``copy_reference([name])`` (the
    reference), after what the C copy had appended of it is taken back, so nothing is appended twice. Why
    compiled: the reference spent ~6 us a quota sensor (a property call, isinstance checks, four ``fromlist``
    calls), the largest share of a checkpoint's hold on the serving thread; this copy ~1.3 us."""
    cdef object name, sensor, group, kind
    cdef Py_ssize_t dash
    for name in names:
        if type(name) is not str:
            copy_reference([name])
            continue
        dash = (<str>name).find("-")
        group = name if dash < 0 else (<str>name)[:dash]
        kind = kinds.get(group)
        if kind is None:
            continue
        sensor = registry.get(name)
        if sensor is not None and not _copy_sensor(<tuple>kind, group, sensor):
            copy_reference([name])
    return None


cdef bint _copy_sensor(tuple kind, object group, object sensor) except -1:
    """One sensor's quota metrics appended to ``kind``'s columns; False, with the columns as they were, for a sensor
    of any other shape than ``copy_quota_sensors`` names."""
    cdef object metrics, metric, rate, stat, metric_name, starts, lasts, values, counts, current
    cdef list names = kind[1]
    cdef carray.array last_records = kind[2], currents = kind[3], sizes = kind[4]
    cdef carray.array starts_to = kind[5], lasts_to = kind[6], values_to = kind[7], counts_to = kind[8]
    cdef Py_ssize_t had_names = len(names), had_sensors = Py_SIZE(sizes), had_samples = Py_SIZE(starts_to), n
    if type(sensor) is not _Sensor:
        return False
    metrics = _get(sensor, &SENSOR_METRICS)
    if type(metrics) is not dict:
        return False
    for metric in (<dict>metrics).values():
        if type(metric) is not _KafkaMetric:
            break
        metric_name = _get(metric, &METRIC_METRIC_NAME)
        rate = _get(metric, &METRIC_STAT)
        if type(metric_name) is not MetricName or type(rate) is not Rate:
            break
        stat = _get(rate, &RATE_STAT)
        if type(stat) is not _WindowedSum:
            break
        if _get(metric_name, &NAME_NAME) != kind[0] or _get(metric_name, &NAME_GROUP) != group:
            continue
        starts = _get(stat, &STAT_STARTS)
        lasts = _get(stat, &STAT_LASTS)
        values = _get(stat, &STAT_VALUES)
        counts = _get(stat, &STAT_COUNTS)
        current = _get(stat, &STAT_CURRENT)
        if not (type(starts) is list and type(lasts) is list and type(values) is list and type(counts) is list):
            break
        n = len(<list>starts)
        if not (len(<list>lasts) == n and len(<list>values) == n and len(<list>counts) == n):
            break
        if not (
            _append_long(last_records, _get(sensor, &SENSOR_LAST_RECORD_TIME_MS))
            and _append_long(currents, current)
            and _append_long(sizes, n)
            and _extend_long(starts_to, <list>starts)
            and _extend_long(lasts_to, <list>lasts)
            and _extend_float(values_to, <list>values)
            and _extend_long(counts_to, <list>counts)
        ):
            break
        names.append(metric_name)
    else:
        return True
    del names[had_names:]  # a metric of another shape: the sensor is the reference's, and the columns as they were
    for column in (last_records, currents, sizes):
        carray.resize(column, had_sensors)
    for column in (starts_to, lasts_to, values_to, counts_to):
        carray.resize(column, had_samples)
    return False


cdef bint _append_long(carray.array into, object value) except -1:
    """``into.append(value)`` for an ``array('q')`` and an exact ``int`` it holds; False otherwise (nothing
    appended)."""
    cdef int overflow = 0
    cdef long long number
    cdef Py_ssize_t at = Py_SIZE(into)
    if type(value) is not int:
        return False
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow:
        return False
    carray.resize_smart(into, at + 1)
    into.data.as_longlongs[at] = number
    return True


cdef bint _extend_long(carray.array into, list values) except -1:
    """``into.fromlist(values)`` for an ``array('q')``, when every value is an exact ``int`` it holds; False
    otherwise (the array may then hold some of them: the caller takes them back)."""
    cdef int overflow = 0
    cdef Py_ssize_t at = Py_SIZE(into), n = len(values), i
    cdef PyObject *value
    carray.resize_smart(into, at + n)
    for i in range(n):
        value = PyList_GET_ITEM(values, i)
        if Py_TYPE(<object>value) is not <PyTypeObject*>int:
            return False
        into.data.as_longlongs[at + i] = PyLong_AsLongLongAndOverflow(<object>value, &overflow)
        if overflow:
            return False
    return True


cdef bint _extend_float(carray.array into, list values) except -1:
    """``into.fromlist(values)`` for an ``array('d')``, when every value is a ``float``; False otherwise."""
    cdef Py_ssize_t at = Py_SIZE(into), n = len(values), i
    cdef PyObject *value
    carray.resize_smart(into, at + n)
    for i in range(n):
        value = PyList_GET_ITEM(values, i)
        if Py_TYPE(<object>value) is not <PyTypeObject*>float:
            return False
        into.data.as_doubles[at + i] = PyFloat_AS_DOUBLE(<object>value)
    return True
