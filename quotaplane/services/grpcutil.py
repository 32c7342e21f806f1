"""The gRPC plumbing every quotaplane server shares: exceptions to status codes, and server construction.

**Errors.** A servicer never lets a traceback reach its client. An exception that stops a request becomes a
gRPC status with a one-line message and, where the service defines one, trailing metadata (the gateway's
``retry-after-ms``, the AdminService's ``x-kafka-error-code``); anything the service did not expect is
INTERNAL, logged with its traceback on the server and named only by its type to the client. Each service
states its own table once, as :class:`StatusRule` entries of an :class:`ErrorStatus`, and decorates its
handlers with :meth:`ErrorStatus.unary` (or :meth:`ErrorStatus.stream`); the translation lives here.

**Servers.** :func:`start_server` builds every gRPC server the same way: a thread pool, ``SO_REUSEPORT``
off (gRPC turns it on by default on Linux: a second server on the same port would bind without error and
share the connections with the first), gRPC health (SERVING for ``""`` and every registered service) and
reflection, TLS / mutual TLS from a :class:`~quotaplane.services._security.ServerSecurity`, and, for the
services that ask for it, the operator-credential check.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ._security import ServerSecurity, bind_port, wrap_rpc_handler

__all__ = [
    "HEALTH_SERVICE_NAME",
    "ErrorStatus",
    "Register",
    "RunningServer",
    "Status",
    "StatusRule",
    "Trailers",
    "start_server",
]

#: Trailing metadata: ``(key, value)`` pairs.
Trailers = tuple[tuple[str, str], ...]
#: Registers servicers on a server and returns their full service names (for health and reflection).
Register = Callable[[grpc.Server], Sequence[str]]

HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name

_F = TypeVar("_F", bound=Callable[..., Any])


def _no_trailers(exc: Any) -> Trailers:
    return ()


@dataclass(frozen=True, slots=True)
class Status:
    """What a client is told of a request that could not be served."""

    code: grpc.StatusCode
    message: str
    trailers: Trailers = ()

    @property
    def details(self) -> str:
        """The message's first line (the code's name when there is none): never a traceback."""
        return self.message.splitlines()[0] if self.message else self.code.name


@dataclass(frozen=True, slots=True)
class StatusRule:
    """Exceptions of ``types`` become ``code``, with ``message(exc)`` and ``trailers(exc)``."""

    types: type[BaseException] | tuple[type[BaseException], ...]
    code: grpc.StatusCode
    message: Callable[[Any], str] = str
    trailers: Callable[[Any], Trailers] = _no_trailers


class ErrorStatus:
    """One service's mapping of exceptions to gRPC statuses: the first rule whose types match decides;
    anything else is INTERNAL ("internal error (<type>); see <server>'s log"), logged to ``log``."""

    def __init__(self, rules: Sequence[StatusRule], *, log: logging.Logger, server: str) -> None:
        self.rules = tuple(rules)
        self.log = log
        self.server = server

    def of(self, exc: BaseException) -> Status:
        """The status of an exception that stopped a request (or, for a stream, one of its batches)."""
        for rule in self.rules:
            if isinstance(exc, rule.types):
                return Status(rule.code, rule.message(exc), rule.trailers(exc))
        return Status(grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see {self.server}'s log")

    def abort(self, context: grpc.ServicerContext, exc: Exception, where: str) -> NoReturn:
        """End the call with the status of ``exc`` (logged with its traceback when it is INTERNAL)."""
        status = self.of(exc)
        if status.code is grpc.StatusCode.INTERNAL:
            self.log.exception("%s failed", where)
        if status.trailers:  # after the ones already set (the service's own, e.g. the AdminService's cluster id)
            context.set_trailing_metadata((*(context.trailing_metadata() or ()), *status.trailers))
        context.abort(status.code, status.details)
        raise AssertionError("context.abort returned")  # pragma: no cover: it always raises

    def unary(self, method: _F) -> _F:
        """Decorate a unary-response handler: an exception that escapes it becomes its status."""

        @functools.wraps(method)
        def handler(servicer: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return method(servicer, request, context)
            except Exception as exc:
                self.abort(context, exc, f"{type(servicer).__name__}.{method.__name__}")

        return handler  # type: ignore[return-value]

    def stream(self, method: _F) -> _F:
        """Decorate a response-streaming handler (a generator): an exception that escapes it ends the stream
        with its status, after the answers already yielded."""

        @functools.wraps(method)
        def handler(servicer: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                yield from method(servicer, request, context)
            except Exception as exc:
                self.abort(context, exc, f"{type(servicer).__name__}.{method.__name__}")

        return handler  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A started server, the port it listens on, and its health (``set_serving`` flips every service)."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    services: tuple[str, ...]

    def set_serving(self, serving: bool) -> None:
        _set_health(self.health, self.services, serving)


def _set_health(servicer: health.HealthServicer, services: Sequence[str], serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for service in ("", *services):
        servicer.set(service, status)


def _with_trailers(behavior: Callable[..., Any], trailers: Trailers) -> Callable[..., Any]:
    def with_trailers(request_or_iterator: Any, context: grpc.ServicerContext) -> Any:
        context.set_trailing_metadata(trailers)
        return behavior(request_or_iterator, context)

    return with_trailers


class _TrailersInterceptor(grpc.ServerInterceptor):
    """Sets a service's fixed trailing metadata before anything else runs, so that every answer carries it:
    the replies, the errors (:meth:`ErrorStatus.abort` adds its trailers after these) and the operator
    check's refusals (this interceptor is the outermost)."""

    def __init__(self, trailers: Mapping[str, Trailers]) -> None:
        self._trailers = {f"/{service}/": tuple(t) for service, t in trailers.items()}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        trailers = self._trailers.get(method[: method.rfind("/") + 1])
        if handler is None or not trailers:
            return handler
        return wrap_rpc_handler(handler, lambda behavior: _with_trailers(behavior, trailers))


def start_server(
    register: Sequence[Register],
    address: str,
    *,
    max_workers: int,
    thread_name_prefix: str,
    security: ServerSecurity | None = None,
    operator_services: Sequence[str] = (),
    options: Sequence[tuple[str, Any]] = (),
    service_trailers: Mapping[str, Trailers] | None = None,
) -> RunningServer:
    """Build a server with the services ``register`` adds, health (all SERVING) and reflection, bind it to
    ``address`` (TLS / mutual TLS when ``security`` says) and start it.

    ``operator_services``: full names of the services whose every RPC needs an operator credential once
    ``security`` configures operators (health and reflection stay open). ``options``: further gRPC server
    options. ``service_trailers``: trailing metadata every answer of a service carries (full name -> pairs),
    its refusals included. An address that cannot be bound raises OSError (nothing was started).
    """
    interceptors: list[grpc.ServerInterceptor] = []
    if service_trailers:
        interceptors.append(_TrailersInterceptor(service_trailers))
    if operator_services and security is not None and security.operator_auth:
        interceptors.append(security.operator_interceptor(*operator_services))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix),
        options=[("grpc.so_reuseport", 0), *options],
        interceptors=interceptors or None,
    )
    services = tuple(name for add in register for name in add(server))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*services, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME), server)
    _set_health(health_servicer, services, True)
    port = bind_port(server, address, security)
    server.start()
    return RunningServer(server, port, health_servicer, services)
