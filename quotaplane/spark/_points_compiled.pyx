# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The telemetry job's per-point decoding, compiled: an OTLP ``MetricsData`` push's data points into the
column lists of ``_arrow_telemetry._Columns``, read straight from the push's wire bytes.

Why: walking the parsed protobuf objects point by point is most of the Spark telemetry job's own work (some
2 us a point of Python: an object per point, an attribute read per field), against some 0.3 us for parsing.
This module reads the same fields from the bytes the parser has already accepted, without an object per point.

The Python walk (``_Columns._add_points``) is the reference; this module fills the same lists with the same
values, and ``tests/spark/test_points_compiled.py`` holds the two to the same Arrow batches on random pushes and
on hand-made wire shapes. It only ever runs on a body that ``MetricsData.FromString`` parsed without error, so
the bytes are well-formed protobuf (UTF-8 strings included). What protobuf gives a meaning this module does not
re-implement is sent back to the reference, the whole push at once (``add_points`` returns False, and
``_Columns.add`` takes back what it appended of the push before the reference walks it):

- a singular message field given twice in one message (protobuf merges the two), or two members of a message
  oneof (a metric's ``data``; an ``AnyValue``'s array and key-value list values);
- an attribute whose value is an array or a key-value list (its text is protobuf's text format);
- a known field with another wire type than its own, a group (wire types 3 and 4);
- a body that is not ``bytes``.

Built by ``setup.py`` (Cython, at install); without a C compiler the package installs without it and the job
uses the Python walk (``quotaplane.spark.compiled_decoder()`` says which).
"""

from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

# the OTLP field numbers this module reads (tests/spark/test_points_compiled.py checks them against the
# descriptors of opentelemetry-proto)
cdef enum:
    RESOURCE_METRICS = 1  # MetricsData
    SCOPE_METRICS = 2  # ResourceMetrics
    METRICS = 2  # ScopeMetrics
    NAME = 1  # Metric
    GAUGE = 5
    SUM = 7
    HISTOGRAM = 9
    EXPONENTIAL_HISTOGRAM = 10
    SUMMARY = 11
    DATA_POINTS = 1  # Gauge, Sum, Histogram, ExponentialHistogram, Summary
    AGGREGATION_TEMPORALITY = 2  # Sum, Histogram, ExponentialHistogram
    IS_MONOTONIC = 3  # Sum
    START_TIME = 2  # every data point
    TIME = 3
    AS_DOUBLE = 4  # NumberDataPoint
    AS_INT = 6
    NUMBER_ATTRIBUTES = 7
    COUNT = 4  # HistogramDataPoint, ExponentialHistogramDataPoint, SummaryDataPoint
    POINT_SUM = 5
    HISTOGRAM_ATTRIBUTES = 9
    EXPONENTIAL_HISTOGRAM_ATTRIBUTES = 1
    SUMMARY_ATTRIBUTES = 7
    KEY = 1  # KeyValue
    VALUE = 2
    STRING_VALUE = 1  # AnyValue
    BOOL_VALUE = 2
    INT_VALUE = 3
    DOUBLE_VALUE = 4
    ARRAY_VALUE = 5
    KVLIST_VALUE = 6
    BYTES_VALUE = 7

    VARINT = 0
    I64 = 1
    LEN = 2
    I32 = 5

    #: ``add_points`` leaves the push to the reference
    BAIL = 1


cdef dict _KINDS = {
    GAUGE: "gauge",
    SUM: "sum",
    HISTOGRAM: "histogram",
    EXPONENTIAL_HISTOGRAM: "exponential_histogram",
    SUMMARY: "summary",
}

#: the field numbers above by their OTLP names (the tests check them against opentelemetry-proto's descriptors)
FIELD_NUMBERS = {
    "MetricsData.resource_metrics": RESOURCE_METRICS,
    "ResourceMetrics.scope_metrics": SCOPE_METRICS,
    "ScopeMetrics.metrics": METRICS,
    "Metric.name": NAME,
    "Metric.gauge": GAUGE,
    "Metric.sum": SUM,
    "Metric.histogram": HISTOGRAM,
    "Metric.exponential_histogram": EXPONENTIAL_HISTOGRAM,
    "Metric.summary": SUMMARY,
    "Gauge.data_points": DATA_POINTS,
    "Sum.data_points": DATA_POINTS,
    "Histogram.data_points": DATA_POINTS,
    "ExponentialHistogram.data_points": DATA_POINTS,
    "Summary.data_points": DATA_POINTS,
    "Sum.aggregation_temporality": AGGREGATION_TEMPORALITY,
    "Histogram.aggregation_temporality": AGGREGATION_TEMPORALITY,
    "ExponentialHistogram.aggregation_temporality": AGGREGATION_TEMPORALITY,
    "Sum.is_monotonic": IS_MONOTONIC,
    "NumberDataPoint.start_time_unix_nano": START_TIME,
    "NumberDataPoint.time_unix_nano": TIME,
    "NumberDataPoint.as_double": AS_DOUBLE,
    "NumberDataPoint.as_int": AS_INT,
    "NumberDataPoint.attributes": NUMBER_ATTRIBUTES,
    "HistogramDataPoint.start_time_unix_nano": START_TIME,
    "HistogramDataPoint.time_unix_nano": TIME,
    "HistogramDataPoint.count": COUNT,
    "HistogramDataPoint.sum": POINT_SUM,
    "HistogramDataPoint.attributes": HISTOGRAM_ATTRIBUTES,
    "ExponentialHistogramDataPoint.start_time_unix_nano": START_TIME,
    "ExponentialHistogramDataPoint.time_unix_nano": TIME,
    "ExponentialHistogramDataPoint.count": COUNT,
    "ExponentialHistogramDataPoint.sum": POINT_SUM,
    "ExponentialHistogramDataPoint.attributes": EXPONENTIAL_HISTOGRAM_ATTRIBUTES,
    "SummaryDataPoint.start_time_unix_nano": START_TIME,
    "SummaryDataPoint.time_unix_nano": TIME,
    "SummaryDataPoint.count": COUNT,
    "SummaryDataPoint.sum": POINT_SUM,
    "SummaryDataPoint.attributes": SUMMARY_ATTRIBUTES,
    "KeyValue.key": KEY,
    "KeyValue.value": VALUE,
    "AnyValue.string_value": STRING_VALUE,
    "AnyValue.bool_value": BOOL_VALUE,
    "AnyValue.int_value": INT_VALUE,
    "AnyValue.double_value": DOUBLE_VALUE,
    "AnyValue.array_value": ARRAY_VALUE,
    "AnyValue.kvlist_value": KVLIST_VALUE,
    "AnyValue.bytes_value": BYTES_VALUE,
}


cdef class _Sink:
    """The lists of one ``_Columns`` a push's points go into."""

    cdef list metric, time_ms, start_ms, value, count_at, count, attr_counts, attr_keys, attr_values
    cdef dict metric_ids
    cdef object received

    def __init__(self, columns, received):
        self.metric = columns.metric
        self.time_ms = columns.time_ms
        self.start_ms = columns.start_ms
        self.value = columns.value
        self.count_at = columns.count_at
        self.count = columns.count
        self.attr_counts = columns.attr_counts
        self.attr_keys = columns.attr_keys
        self.attr_values = columns.attr_values
        self.metric_ids = columns.metric_ids
        self.received = received


cdef struct Reader:
    const unsigned char* buf
    Py_ssize_t pos
    Py_ssize_t end


cdef inline int _varint(Reader* r, uint64_t* out) noexcept nogil:
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char byte
    while r.pos < r.end and shift < 64:
        byte = r.buf[r.pos]
        r.pos += 1
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            out[0] = result
            return 0
        shift += 7
    return BAIL


cdef inline int _fixed64(Reader* r, uint64_t* out) noexcept nogil:
    cdef uint64_t result = 0
    cdef int i
    if r.end - r.pos < 8:
        return BAIL
    for i in range(8):
        result |= (<uint64_t>r.buf[r.pos + i]) << (8 * i)
    r.pos += 8
    out[0] = result
    return 0


cdef inline double _as_double(uint64_t bits) noexcept nogil:
    cdef double value
    memcpy(&value, &bits, 8)
    return value


cdef inline int _tag(Reader* r, uint64_t* field, int* wire_type) noexcept nogil:
    cdef uint64_t tag
    if _varint(r, &tag):
        return BAIL
    field[0] = tag >> 3
    wire_type[0] = <int>(tag & 7)
    return 0


cdef inline int _length(Reader* r, Reader* inner) noexcept nogil:
    """The length-delimited field at ``r`` as a reader of its own; ``r`` moves past it."""
    cdef uint64_t n
    if _varint(r, &n) or n > <uint64_t>(r.end - r.pos):
        return BAIL
    inner.buf = r.buf
    inner.pos = r.pos
    inner.end = r.pos + <Py_ssize_t>n
    r.pos = inner.end
    return 0


cdef inline int _skip(Reader* r, int wire_type) noexcept nogil:
    cdef uint64_t ignored
    cdef Reader inner
    if wire_type == VARINT:
        return _varint(r, &ignored)
    if wire_type == I64:
        return _fixed64(r, &ignored)
    if wire_type == LEN:
        return _length(r, &inner)
    if wire_type == I32 and r.end - r.pos >= 4:
        r.pos += 4
        return 0
    return BAIL  # groups


cdef inline str _text(Reader* s):
    return PyUnicode_DecodeUTF8(<const char*>(s.buf + s.pos), s.end - s.pos, NULL)


cdef int _attribute(_Sink sink, Reader* r) except -1:
    """One ``KeyValue``: its key and the text of its value appended to the attribute lists."""
    cdef uint64_t field, number = 0
    cdef int wire_type
    cdef int values = 0
    cdef int case = 0
    cdef Reader key, value, any_value
    key.buf = value.buf = any_value.buf = r.buf
    key.pos = key.end = value.pos = value.end = any_value.pos = any_value.end = 0
    while r.pos < r.end:
        if _tag(r, &field, &wire_type):
            return BAIL
        if field == KEY:
            if wire_type != LEN or _length(r, &key):
                return BAIL
        elif field == VALUE:
            values += 1
            if wire_type != LEN or values > 1 or _length(r, &any_value):
                return BAIL
        elif _skip(r, wire_type):
            return BAIL
    text = ""
    if values:
        # the AnyValue's oneof: the last member given wins, as protobuf's parser does
        while any_value.pos < any_value.end:
            if _tag(&any_value, &field, &wire_type):
                return BAIL
            if field == STRING_VALUE or field == BYTES_VALUE:
                if wire_type != LEN or _length(&any_value, &value):
                    return BAIL
                case = <int>field
            elif field == BOOL_VALUE or field == INT_VALUE:
                if wire_type != VARINT or _varint(&any_value, &number):
                    return BAIL
                case = <int>field
            elif field == DOUBLE_VALUE:
                if wire_type != I64 or _fixed64(&any_value, &number):
                    return BAIL
                case = <int>field
            elif field == ARRAY_VALUE or field == KVLIST_VALUE:
                return BAIL  # their text is protobuf's text format: the reference's
            elif _skip(&any_value, wire_type):
                return BAIL
        # any_value_text's texts
        if case == STRING_VALUE:
            text = _text(&value)
        elif case == BYTES_VALUE:
            text = (<const char*>(value.buf + value.pos))[: value.end - value.pos].hex()
        elif case == BOOL_VALUE:
            text = "true" if number != 0 else "false"
        elif case == INT_VALUE:
            text = str(<int64_t>number)
        elif case == DOUBLE_VALUE:
            text = str(_as_double(number))
    sink.attr_keys.append(_text(&key))
    sink.attr_values.append(text)
    return 0


cdef int _point(_Sink sink, Reader* r, int kind, Py_ssize_t metric_id) except -1:
    """One data point of a metric of ``kind`` (its field number in ``Metric``) appended to the columns."""
    cdef uint64_t field, number, start = 0, time = 0, count = 0, value_bits = 0
    cdef int wire_type, value_case = 0
    cdef bint has_sum = False
    cdef uint64_t attributes_field
    cdef Py_ssize_t attributes = 0
    cdef Py_ssize_t first_attribute = len(sink.attr_keys)
    cdef Reader inner
    cdef double value
    if kind == GAUGE or kind == SUM:
        attributes_field = NUMBER_ATTRIBUTES
    elif kind == HISTOGRAM:
        attributes_field = HISTOGRAM_ATTRIBUTES
    elif kind == EXPONENTIAL_HISTOGRAM:
        attributes_field = EXPONENTIAL_HISTOGRAM_ATTRIBUTES
    else:
        attributes_field = SUMMARY_ATTRIBUTES
    while r.pos < r.end:
        if _tag(r, &field, &wire_type):
            return BAIL
        if field == attributes_field:
            if wire_type != LEN or _length(r, &inner) or _attribute(sink, &inner):
                return BAIL
            attributes += 1
        elif field == START_TIME:
            if wire_type != I64 or _fixed64(r, &start):
                return BAIL
        elif field == TIME:
            if wire_type != I64 or _fixed64(r, &time):
                return BAIL
        elif kind == GAUGE or kind == SUM:
            if field == AS_DOUBLE or field == AS_INT:
                # the value's oneof: the last member given wins
                if wire_type != I64 or _fixed64(r, &value_bits):
                    return BAIL
                value_case = <int>field
            elif _skip(r, wire_type):
                return BAIL
        elif field == COUNT:
            if wire_type != I64 or _fixed64(r, &count):
                return BAIL
        elif field == POINT_SUM:
            if wire_type != I64 or _fixed64(r, &value_bits):
                return BAIL
            has_sum = True
        elif _skip(r, wire_type):
            return BAIL
    if attributes > 1:
        # a key given twice keeps its first place and its last value, as the reference's dict does
        keys = sink.attr_keys[first_attribute:]
        if len(set(keys)) != attributes:
            merged = dict(zip(keys, sink.attr_values[first_attribute:]))
            del sink.attr_keys[first_attribute:]
            del sink.attr_values[first_attribute:]
            sink.attr_keys.extend(merged.keys())
            sink.attr_values.extend(merged.values())
            attributes = len(merged)
    sink.metric.append(metric_id)
    if kind != GAUGE and kind != SUM:
        sink.count_at.append(len(sink.time_ms))
        sink.count.append(count)
    sink.time_ms.append(time // 1_000_000 if time >= 1_000_000 else sink.received)
    sink.start_ms.append(start // 1_000_000 if start >= 1_000_000 else None)
    if kind == GAUGE or kind == SUM:
        # the reference: as_double, else float(as_int) if it is not 0 (-0.0 stays -0.0)
        if value_case == AS_DOUBLE:
            value = _as_double(value_bits)
        elif value_case == AS_INT and <int64_t>value_bits != 0:
            value = <double><int64_t>value_bits
        else:
            value = 0.0
        sink.value.append(value)
    elif kind == HISTOGRAM and not has_sum:
        sink.value.append(None)
    else:
        sink.value.append(_as_double(value_bits) if has_sum else 0.0)
    sink.attr_counts.append(attributes)
    return 0


cdef int _metric(_Sink sink, Reader* r) except -1:
    cdef uint64_t field, number
    cdef int wire_type, kind = 0, data_fields = 0
    cdef Reader name, data, scan, points
    cdef Py_ssize_t point_count = 0
    cdef object temporality = None, monotonic = None
    name.buf = data.buf = points.buf = r.buf
    name.pos = name.end = data.pos = data.end = points.pos = points.end = 0
    while r.pos < r.end:
        if _tag(r, &field, &wire_type):
            return BAIL
        if field == NAME:
            if wire_type != LEN or _length(r, &name):
                return BAIL
        elif field == GAUGE or field == SUM or field == HISTOGRAM or field == EXPONENTIAL_HISTOGRAM or field == SUMMARY:
            data_fields += 1
            if wire_type != LEN or data_fields > 1 or _length(r, &data):
                return BAIL
            kind = <int>field
        elif _skip(r, wire_type):
            return BAIL
    if not kind:
        return 0
    # one pass for the number of points and the metric's own fields, a second for the points
    scan = data
    while scan.pos < scan.end:
        if _tag(&scan, &field, &wire_type):
            return BAIL
        if field == DATA_POINTS:
            if wire_type != LEN or _length(&scan, &points):
                return BAIL
            point_count += 1
        elif field == AGGREGATION_TEMPORALITY and kind != GAUGE and kind != SUMMARY:
            if wire_type != VARINT or _varint(&scan, &number):
                return BAIL
            temporality = <int32_t>number
        elif field == IS_MONOTONIC and kind == SUM:
            if wire_type != VARINT or _varint(&scan, &number):
                return BAIL
            monotonic = number != 0
        elif _skip(&scan, wire_type):
            return BAIL
    if not point_count:
        return 0
    if kind == SUM:
        key = (_text(&name), "sum", 0 if temporality is None else temporality, False if monotonic is None else monotonic)
    elif kind == GAUGE or kind == SUMMARY:
        key = (_text(&name), _KINDS[kind], None, None)
    else:
        key = (_text(&name), _KINDS[kind], 0 if temporality is None else temporality, None)
    metric_id = sink.metric_ids.get(key)
    if metric_id is None:
        metric_id = sink.metric_ids[key] = len(sink.metric_ids)
    scan = data
    while scan.pos < scan.end:
        _tag(&scan, &field, &wire_type)
        if field == DATA_POINTS:
            _length(&scan, &points)
            if _point(sink, &points, kind, metric_id):
                return BAIL
        else:
            _skip(&scan, wire_type)
    return 0


cdef int _walk(_Sink sink, Reader* r, int depth) except -1:
    """``MetricsData`` (depth 0), ``ResourceMetrics`` (1), ``ScopeMetrics`` (2): down to each metric."""
    cdef uint64_t field
    cdef int wire_type
    cdef Reader inner
    cdef uint64_t wanted = RESOURCE_METRICS if depth == 0 else SCOPE_METRICS if depth == 1 else METRICS
    while r.pos < r.end:
        if _tag(r, &field, &wire_type):
            return BAIL
        if field == wanted:
            if wire_type != LEN or _length(r, &inner):
                return BAIL
            if (_metric(sink, &inner) if depth == 2 else _walk(sink, &inner, depth + 1)):
                return BAIL
        elif _skip(r, wire_type):
            return BAIL
    return 0


def add_points(columns, received, body):
    """Appends the data points of ``body`` (an OTLP ``MetricsData`` that ``MetricsData.FromString`` accepts)
    to ``columns`` (a ``_Columns``), a point without a time taking ``received``. Returns False for what it
    leaves to the reference (the module's docstring lists it): the lists may then hold part of the push, which
    the caller takes back (``_Columns.add``) before the reference walks it."""
    if type(body) is not bytes:
        return False
    cdef _Sink sink = _Sink(columns, received)
    cdef Reader r
    cdef bytes data = <bytes>body
    r.buf = <const unsigned char*>data
    r.pos = 0
    r.end = len(data)
    try:
        return _walk(sink, &r, 0) == 0
    except UnicodeDecodeError:
        return False
