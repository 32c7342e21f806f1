"""Kafka's protocol error codes and the exceptions that carry them.

Every request path of quotaplane answers bad input with the error code a Kafka broker would use, so a
handler raises one of these and the adapter (Kafka wire, gRPC) maps ``exc.error`` to its protocol.
Codes and names are Kafka's (``org.apache.kafka.common.protocol.Errors``).

>>> InvalidRequestError("no").error
<Errors.INVALID_REQUEST: 42>
>>> Errors.TELEMETRY_TOO_LARGE.value
118
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

__all__ = [
    "ApiError",
    "ClusterAuthorizationFailedError",
    "Errors",
    "InvalidConfigurationError",
    "InvalidRecordError",
    "InvalidRequestError",
    "InvalidTopicError",
    "TelemetryTooLargeError",
    "ThrottlingQuotaExceededError",
    "UnknownSubscriptionIdError",
    "UnsupportedCompressionTypeError",
    "UnsupportedVersionError",
]


class Errors(IntEnum):
    """The Kafka error codes quotaplane answers with (a subset of Kafka's ``Errors``)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    INVALID_TOPIC_EXCEPTION = 17
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    SASL_AUTHENTICATION_FAILED = 58
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    UNKNOWN_TOPIC_ID = 100
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118


class ApiError(Exception):
    """An error a client is told about: ``error`` is the Kafka code, ``str(exc)`` the message."""

    error: ClassVar[Errors] = Errors.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False

    @property
    def errno(self) -> int:
        """The numeric Kafka error code (what goes on the wire)."""
        return int(self.error)


class ClusterAuthorizationFailedError(ApiError):
    error = Errors.CLUSTER_AUTHORIZATION_FAILED


class InvalidTopicError(ApiError):
    """INVALID_TOPIC_EXCEPTION (17): a topic name Kafka's ``Topic.validate`` refuses."""

    error = Errors.INVALID_TOPIC_EXCEPTION


class UnsupportedVersionError(ApiError):
    """UNSUPPORTED_VERSION (35): also what Kafka answers for a describe filter on an unknown entity type."""

    error = Errors.UNSUPPORTED_VERSION


class InvalidConfigurationError(ApiError):
    """Kafka's InvalidConfigurationException (INVALID_CONFIG, 40): a config value is not acceptable."""

    error = Errors.INVALID_CONFIG


class InvalidRequestError(ApiError):
    error = Errors.INVALID_REQUEST


class UnsupportedCompressionTypeError(ApiError):
    error = Errors.UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(ApiError):
    error = Errors.INVALID_RECORD


class ThrottlingQuotaExceededError(ApiError):
    """THROTTLING_QUOTA_EXCEEDED (89): retriable; ``throttle_time_ms`` says when to come back, if known."""

    error = Errors.THROTTLING_QUOTA_EXCEEDED
    retriable = True

    def __init__(self, message: str, throttle_time_ms: int = 0) -> None:
        super().__init__(message)
        self.throttle_time_ms = throttle_time_ms


class UnknownSubscriptionIdError(ApiError):
    error = Errors.UNKNOWN_SUBSCRIPTION_ID
    retriable = True


class TelemetryTooLargeError(ApiError):
    error = Errors.TELEMETRY_TOO_LARGE
    retriable = True
