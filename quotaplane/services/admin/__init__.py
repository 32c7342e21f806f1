"""The gRPC AdminService: Kafka's admin APIs and the config log's audits, over a config backend.

The servicer (``_servicer``) only translates: protobuf requests into the ``quotaplane.config`` request
types (``_convert``), and results back into Kafka-shaped responses. Validation and the write path belong to
the backend, any :class:`~quotaplane.config.ConfigAdmin`: a ``ConfigStore`` in-process, or the
ConfigController actor through :class:`ControllerBackend` (``_backend``), so every admin door (this
service, the CLI through it, the Kafka-wire frontend) gives the same answers.

Errors follow Kafka's split. A Kafka error about one entity or resource is an entry of the response and
the other entries still apply, exactly as an AdminClient sees it. A request that cannot be processed at
all is a gRPC status with a one-line message, never a traceback: INVALID_ARGUMENT for bad input (an
invalid describe filter, a missing field, a bad time; the Kafka error code rides in the
``x-kafka-error-code`` trailer when there is one), UNAVAILABLE when the log is closed or has failed,
OUT_OF_RANGE / FAILED_PRECONDITION when the events asked about were deleted, INTERNAL otherwise (logged
here, with its traceback, not sent).

The caller's principal is the ``x-quotaplane-principal`` call metadata (default ``User:ANONYMOUS``): it
is recorded in the log with every change it makes, so ``EntityHistory`` says who did what. Who may call at
all is decided before the servicer runs (``services/_security.py``, the ``security`` argument of
:func:`serve`): TLS or mutual TLS on the listener, and, once operator tokens or certificate subjects are
configured, an operator credential on every AdminService RPC (UNAUTHENTICATED / PERMISSION_DENIED
otherwise, nothing changed). The recorded principal is still the caller's own claim, not derived from that
credential.
"""

from ._backend import BackendUnavailableError, ControllerBackend
from ._servicer import (
    ADMIN_ERRORS,
    KAFKA_ERROR_CODE_TRAILER,
    PRINCIPAL_METADATA,
    SERVICE_NAME,
    AdminServicer,
    add_admin_service,
    serve,
)

__all__ = [
    "ADMIN_ERRORS",
    "KAFKA_ERROR_CODE_TRAILER",
    "PRINCIPAL_METADATA",
    "SERVICE_NAME",
    "AdminServicer",
    "BackendUnavailableError",
    "ControllerBackend",
    "add_admin_service",
    "serve",
]
