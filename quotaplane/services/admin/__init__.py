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

Who may call at all is decided before the servicer runs (``services/_security.py``, the ``security``
argument of :func:`serve`): TLS or mutual TLS on the listener, and, once operator tokens or certificate
subjects are configured, an operator credential on every AdminService RPC (UNAUTHENTICATED /
PERMISSION_DENIED otherwise, nothing changed). The principal recorded in the log with every change (so
``EntityHistory`` says who did what) is derived from that credential: a bearer token's name
(``User:<name>``), else, under mutual TLS, the client certificate's subject through Kafka's
``ssl.principal.mapping.rules`` (DEFAULT: ``User:<subject DN>``). A caller's ``x-quotaplane-principal``
claim (or ``x-quotaplane-principal-bin``, its UTF-8 bytes, for a principal plain metadata cannot carry, e.g.
``User:jörg``: :func:`principal_metadata`) is ignored, except from a Kafka frontend's token (it forwards the
requests of SASL-authenticated Kafka clients, and asserts their principal), or when the call presents no
credential this server knows and none is needed (no operator authentication, no mutual TLS: the claim is all
there is; default ``User:ANONYMOUS``).

Every answer carries the cluster's id in its trailing metadata (``x-quotaplane-cluster-id``, when
:func:`serve` is given one: ``quotaplane up`` gives its data directory's), refusals included, so a client
told which cluster it expects notices when it reached another instance on the same port.
"""

from ._backend import BackendUnavailableError, ControllerBackend
from ._servicer import (
    ADMIN_ERRORS,
    CLUSTER_ID_TRAILER,
    KAFKA_ERROR_CODE_TRAILER,
    PRINCIPAL_BIN_METADATA,
    PRINCIPAL_METADATA,
    SERVICE_NAME,
    AdminServicer,
    add_admin_service,
    principal_metadata,
    serve,
)

__all__ = [
    "ADMIN_ERRORS",
    "CLUSTER_ID_TRAILER",
    "KAFKA_ERROR_CODE_TRAILER",
    "PRINCIPAL_BIN_METADATA",
    "PRINCIPAL_METADATA",
    "SERVICE_NAME",
    "AdminServicer",
    "BackendUnavailableError",
    "ControllerBackend",
    "add_admin_service",
    "principal_metadata",
    "serve",
]
