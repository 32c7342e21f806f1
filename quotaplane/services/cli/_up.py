"""``quotaplane up``: its options, and running the embedded default until SIGINT / SIGTERM.

A thin shell over :func:`quotaplane.services.launcher.launch`: numbers, resource flags and files are parsed
here or by the launcher (not by argparse) so a bad value is one ``Error:`` line and exit 1, as documented;
the console shows one line per endpoint, ``ready``, then a line each time a shard's applied offset moves.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from quotaplane.services.launcher import (
    DASHBOARD_HOST,
    DEFAULT_ADMIN_PORT,
    DEFAULT_DASHBOARD_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_FRONTEND_PORT,
    DEFAULT_GATEWAY_PORT,
    DEFAULT_HOST,
    DEFAULT_METRICS_PORT,
    DEFAULT_SHARDS,
    LaunchError,
    launch,
    parse_resource_flags,
    port_is_free,
)

if TYPE_CHECKING:
    from quotaplane.services._security import ClientSecurity, ServerSecurity
    from quotaplane.services.frontend import KafkaListener
    from quotaplane.services.launcher import Cluster

__all__ = ["add_up_command", "run_up"]


def add_up_command(commands: argparse._SubParsersAction) -> None:
    up = commands.add_parser(
        "up", help="run quotaplane on this machine (Ray, controller, shards, admin gRPC, usage gateway)"
    )
    up.add_argument(
        "--data-dir", default=f"./{DEFAULT_DATA_DIR}", help=f"where everything is kept (default ./{DEFAULT_DATA_DIR})"
    )
    # numbers are checked by the launcher, not argparse, so a bad value is one `Error:` line as documented
    up.add_argument(
        "--shards",
        help=f"shard actors: a new cluster starts with them (default {DEFAULT_SHARDS}); a running one is resharded "
        "to them (default: the count in the config log)",
    )
    up.add_argument(
        "--admin-port",
        default=str(DEFAULT_ADMIN_PORT),
        help=f"AdminService port (default {DEFAULT_ADMIN_PORT}; 0: a free one)",
    )
    up.add_argument(
        "--gateway-port",
        default=str(DEFAULT_GATEWAY_PORT),
        help=f"usage gateway port: QuotaService, ProducerIdService (default {DEFAULT_GATEWAY_PORT}; 0: a free one)",
    )
    up.add_argument(
        "--metrics-port",
        default=str(DEFAULT_METRICS_PORT),
        help=f"Prometheus metrics endpoint port (default {DEFAULT_METRICS_PORT}; 0: a free one; -1: none)",
    )
    up.add_argument(
        "--ray-dashboard-port",
        help=f"the private Ray's dashboard, on {DASHBOARD_HOST} only (default {DEFAULT_DASHBOARD_PORT}, or a free port "
        "when that one is taken; 0: a free one; -1: none)",
    )
    up.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; beyond loopback, configure "
        "operator credentials)",
    )
    up.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="join this running Ray cluster (its GCS address, or 'auto') instead of starting a private one; "
        "the controller and shards are then detached and keep running after up stops",
    )
    # NAME[=AMOUNT] is parsed by the launcher, not argparse, so bad syntax is one `Error:` line
    up.add_argument(
        "--shard-resource",
        action="append",
        metavar="NAME[=AMOUNT]",
        help="Ray custom resource each shard asks for (repeatable; amount default 1): shards run, and are "
        "restarted, only on raylets offering it",
    )
    up.add_argument(
        "--controller-resource",
        action="append",
        metavar="NAME[=AMOUNT]",
        help="Ray custom resource the controller asks for (repeatable; amount default 1): it runs, and is "
        "restarted, only on raylets offering it (those with its data volume)",
    )
    up.add_argument(
        "--spread-shards", action="store_true", help="spread the shards over the Ray nodes (Ray's SPREAD strategy)"
    )
    up.add_argument(
        "--shard-standby",
        choices=("auto", "on", "off"),
        default="auto",
        help="a warm standby per shard, on another node, serving its keys while Ray restarts it after a node loss "
        "(auto, the default: where two raylets offer the shard resources)",
    )
    up.add_argument("--tls-cert", metavar="PEM", help="server certificate chain: TLS on the gRPC listeners")
    up.add_argument("--tls-key", metavar="PEM", help="the server certificate's private key (unencrypted)")
    up.add_argument(
        "--tls-client-ca", metavar="PEM", help="mutual TLS: clients must present a certificate signed by this CA"
    )
    up.add_argument(
        "--operator-tokens-file",
        metavar="FILE",
        help="operator bearer tokens, one a line as NAME:TOKEN (changes are recorded as User:NAME; a bare TOKEN "
        "is User:admin): every AdminService call must carry one (or an operator subject)",
    )
    up.add_argument(
        "--operator-subjects",
        metavar="CN,...",
        help="client-certificate common names that are operators (needs --tls-client-ca)",
    )
    up.add_argument(
        "--admin-ssl-principal-mapping-rules",
        metavar="RULES",
        help="Kafka's ssl.principal.mapping.rules for the AdminService's client certificates (needs "
        "--tls-client-ca): the principal recorded with a change made with one, e.g. "
        "'RULE:^CN=([^,]*).*$/$1/L,DEFAULT' (default DEFAULT: User:<subject DN>; a subject no rule maps is refused)",
    )
    _add_frontend_options(up)


def _add_frontend_options(up: argparse.ArgumentParser) -> None:
    """The Kafka-facing frontend's flags (``services/frontend/server.py``)."""
    kafka = up.add_argument_group("Kafka frontend")
    kafka.add_argument(
        "--frontend-port",
        default=str(DEFAULT_FRONTEND_PORT),
        help=f"Kafka protocol port for Kafka clients (default {DEFAULT_FRONTEND_PORT}; 0: a free one; -1: none)",
    )
    kafka.add_argument("--advertised-host", help="host Metadata tells Kafka clients to connect to (default --host)")
    kafka.add_argument("--advertised-port", help="port Metadata tells Kafka clients (default the listening port)")
    kafka.add_argument(
        "--kafka-node-id", default="0", help="broker id the frontend presents; its connection quotas' node (default 0)"
    )
    kafka.add_argument(
        "--sasl-credentials-file",
        metavar="FILE",
        help="SASL/PLAIN on the Kafka listener: 'user:password' one a line (principals User:<user>)",
    )
    kafka.add_argument(
        "--sasl-scram-credentials-file",
        metavar="FILE",
        help="SASL/SCRAM-SHA-256 and -512 on the Kafka listener: 'user:MECHANISM:salt=...,stored_key=...,"
        "server_key=...,iterations=N' one a line (Kafka's stored form; no passwords)",
    )
    kafka.add_argument(
        "--kafka-operators",
        metavar="PRINCIPAL,...",
        help="principals allowed the Kafka admin APIs (quotas, configs), e.g. User:admin. No list: open when the "
        "Kafka listener authenticates no one, refused to everyone (CLUSTER_AUTHORIZATION_FAILED) once it "
        "authenticates clients by SASL or by client certificate (--kafka-tls-client-ca)",
    )
    kafka.add_argument("--kafka-tls-cert", metavar="PEM", help="server certificate chain: TLS on the Kafka listener")
    kafka.add_argument("--kafka-tls-key", metavar="PEM", help="its private key (unencrypted)")
    kafka.add_argument(
        "--kafka-tls-client-ca",
        metavar="PEM",
        help="mutual TLS on the Kafka listener (ssl.client.auth=required): without SASL, a client certificate's "
        "subject is the principal",
    )
    kafka.add_argument(
        "--kafka-ssl-principal-mapping-rules",
        metavar="RULES",
        default="DEFAULT",
        help="Kafka's ssl.principal.mapping.rules for those subjects, e.g. 'RULE:^CN=([^,]*).*$/$1/L,DEFAULT'",
    )
    kafka.add_argument(
        "--frontend-tls-ca",
        metavar="PEM",
        help="CA the frontend trusts for the TLS gRPC listeners (default: --tls-client-ca, then --tls-cert's chain)",
    )
    kafka.add_argument(
        "--frontend-tls-cert",
        metavar="PEM",
        help="the frontend's client certificate for mutual TLS gRPC listeners (default: --tls-cert, when it "
        "allows client authentication)",
    )
    kafka.add_argument("--frontend-tls-key", metavar="PEM", help="its private key (unencrypted)")
    kafka.add_argument(
        "--frontend-tls-server-name", metavar="NAME", help="name the gRPC listeners' certificate holds (default --host)"
    )
    proxy = up.add_argument_group("Kafka proxy (the frontend in front of real brokers)")
    proxy.add_argument(
        "--upstream-bootstrap",
        metavar="HOST:PORT[,...]",
        help="proxy mode: forward Kafka clients to this cluster, enforcing quotaplane's quotas on the way",
    )
    # no default here: ProxyConfig's apply, and the proxy package (the Kafka protocol's tables) is imported only
    # when up runs in proxy mode, so every other command starts without it
    proxy.add_argument(
        "--upstream-broker-port-base", help="upstream broker N is served on this port + N (default 19092)"
    )
    proxy.add_argument("--upstream-max-brokers", help="node ids 0..N-1 get a proxy port (default 1000)")
    proxy.add_argument(
        "--upstream-sasl-username", metavar="USER", help="SASL/PLAIN user the proxy authenticates to the upstream as"
    )
    proxy.add_argument(
        "--upstream-sasl-password-file", metavar="FILE", help="file whose first line is that user's password"
    )
    proxy.add_argument(
        "--upstream-fail-closed",
        action="store_true",
        help="close client connections while the gateway is unreachable (default: forward unthrottled)",
    )


def _kafka_listener(args: argparse.Namespace) -> tuple[int | None, KafkaListener | None]:
    """The frontend's port (None: none) and ``KafkaListener`` from ``up``'s flags; bad values and files are
    a LaunchError / ValueError with one line."""
    from quotaplane.services._security import PrincipalMapper
    from quotaplane.services.frontend import KafkaListener, PlainCredentials, ScramCredentials, tls_context
    from quotaplane.services.proxy import ProxyConfig, UpstreamSasl

    port = _int_option("--frontend-port", args.frontend_port)
    if port == -1:
        return None, None
    if (args.kafka_tls_cert is None) != (args.kafka_tls_key is None):
        raise ValueError("--kafka-tls-cert needs --kafka-tls-key, and a key its certificate")
    if args.kafka_tls_client_ca is not None and args.kafka_tls_cert is None:
        raise ValueError("--kafka-tls-client-ca (mutual TLS) needs --kafka-tls-cert and --kafka-tls-key")
    operators = None
    if args.kafka_operators is not None:
        operators = frozenset(p.strip() for p in args.kafka_operators.split(",") if p.strip())
        for principal in operators:
            if ":" not in principal:
                raise ValueError(f"--kafka-operators: {principal!r} is not a principal such as User:admin")
    advertised_port = args.advertised_port
    credentials = args.sasl_credentials_file
    scram = args.sasl_scram_credentials_file
    upstream = None
    if (args.upstream_sasl_username is None) != (args.upstream_sasl_password_file is None):
        raise ValueError("--upstream-sasl-username needs --upstream-sasl-password-file, and a password file a user")
    if args.upstream_bootstrap is not None:
        given = {
            field: _int_option(flag, text)
            for field, flag, text in (
                ("broker_port_base", "--upstream-broker-port-base", args.upstream_broker_port_base),
                ("max_brokers", "--upstream-max-brokers", args.upstream_max_brokers),
            )
            if text is not None
        }
        upstream = ProxyConfig(
            bootstrap=args.upstream_bootstrap,
            **given,
            fail_closed=args.upstream_fail_closed,
            sasl=None
            if args.upstream_sasl_username is None
            else UpstreamSasl.from_file(args.upstream_sasl_username, args.upstream_sasl_password_file),
        )
    listener = KafkaListener(
        advertised_host=args.advertised_host,
        advertised_port=None if advertised_port is None else _int_option("--advertised-port", advertised_port),
        node_id=_int_option("--kafka-node-id", args.kafka_node_id),
        sasl_credentials=None if credentials is None else PlainCredentials.load(credentials),
        scram_credentials=None if scram is None else ScramCredentials.load(scram),
        operators=operators,
        ssl_context=None
        if args.kafka_tls_cert is None
        else tls_context(args.kafka_tls_cert, args.kafka_tls_key, args.kafka_tls_client_ca),
        principal_mapper=PrincipalMapper.parse(args.kafka_ssl_principal_mapping_rules),
        upstream=upstream,
    )
    return port, listener


def _frontend_client(args: argparse.Namespace) -> ClientSecurity | None:
    """The frontend's own TLS client material for the gRPC listeners (None: the defaults, see
    ``launcher/_frontend_tls.py``); a bad file is a ValueError naming it."""
    from quotaplane.services._security import ClientSecurity

    if (args.frontend_tls_cert is None) != (args.frontend_tls_key is None):
        raise ValueError("--frontend-tls-cert needs --frontend-tls-key, and a key its certificate")
    if args.frontend_tls_ca is None and args.frontend_tls_cert is None:
        return None
    return ClientSecurity.load(
        ca_file=args.frontend_tls_ca, cert_file=args.frontend_tls_cert, key_file=args.frontend_tls_key
    )


def _int_option(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LaunchError(f"{name} must be an integer, got {text!r}") from None


def _dashboard_port(text: str | None) -> int | None:
    """``--ray-dashboard-port``: Ray's usual port unless another Ray on this machine has it (then any free one),
    a given port, or None for ``-1`` (no dashboard)."""
    if text is None:
        return DEFAULT_DASHBOARD_PORT if port_is_free(DASHBOARD_HOST, DEFAULT_DASHBOARD_PORT) else 0
    port = _int_option("--ray-dashboard-port", text)
    return None if port == -1 else port


def _what_runs(cluster: Cluster) -> list[str]:
    """Where ``up``'s pieces run, where the data lives and how to stop it, in plain lines (after the endpoints)."""
    if cluster.ray_address is None:
        dashboard = (
            f"its dashboard on {cluster.ray_dashboard_url} (this machine only; it asks for the token in "
            f"{cluster.ray_dashboard_token_file})"
            if cluster.ray_dashboard_url
            else "no dashboard (--ray-dashboard-port)"
        )
        ray_line = f"a private Ray for this process: session in {cluster.ray_temp_dir}, {dashboard}"
        stop_line = (
            f"stop: Ctrl-C here, or SIGTERM to pid {os.getpid()}: the servers, the shards, the controller and this Ray "
            f"stop; the data stays in {cluster.data_dir}, and `quotaplane up --data-dir {cluster.data_dir}` resumes it"
        )
    else:
        ray_line = (
            f"joined the Ray cluster at {cluster.ray_address} (its dashboard is that cluster's): the controller "
            "and the shards run there as detached actors"
        )
        stop_line = (
            f"stop: Ctrl-C here, or SIGTERM to pid {os.getpid()}: this host's servers stop; the controller and the "
            "shards keep running in the Ray cluster"
        )
    data_line = (
        f"data: the config log in {cluster.config_dir}, each shard's usage checkpoint and archives in "
        f"{cluster.data_dir / 'shards'}/<id>"
        + ("" if cluster.ray_address is None else " (on the Ray nodes that run them)")
    )
    return [ray_line, data_line, stop_line]


def _server_security(args: argparse.Namespace) -> ServerSecurity | None:
    """The listeners' security from ``up``'s flags (None: none given); a bad file or rule is a ValueError."""
    from quotaplane.services._security import PrincipalMapper, ServerSecurity

    subjects = [s for s in (args.operator_subjects or "").split(",") if s.strip()]
    rules = args.admin_ssl_principal_mapping_rules
    given = (args.tls_cert, args.tls_key, args.tls_client_ca, args.operator_tokens_file, rules)
    if all(value is None for value in given) and not subjects:
        return None
    if rules is not None:
        # only client certificates are mapped: without mutual TLS the rules would silently change nothing
        if args.tls_client_ca is None:
            raise ValueError("--admin-ssl-principal-mapping-rules maps client certificates: it needs --tls-client-ca")
        try:
            PrincipalMapper.parse(rules)
        except ValueError as e:
            raise ValueError(f"--admin-ssl-principal-mapping-rules: {e}") from None
    return ServerSecurity.load(
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        client_ca_file=args.tls_client_ca,
        tokens_file=args.operator_tokens_file,
        operator_subjects=subjects,
        principal_mapping_rules="DEFAULT" if rules is None else rules,
    )


def run_up(args: argparse.Namespace) -> int:
    """Start, print the endpoints and ``ready``, run until SIGINT / SIGTERM, stop. Errors: one line."""
    import signal
    import threading

    from quotaplane.gc_pause import ready_to_serve
    from quotaplane.services._security import exposure_warning

    def say(line: str) -> None:
        print(f"quotaplane up: {line}", flush=True)

    try:
        security = _server_security(args)
        frontend_port, kafka_listener = _kafka_listener(args)
        frontend_client = _frontend_client(args)
        shard_resources = parse_resource_flags("--shard-resource", args.shard_resource)
        controller_resources = parse_resource_flags("--controller-resource", args.controller_resource)
    except (ValueError, LaunchError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    warning = exposure_warning(args.host, security)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    try:
        cluster = launch(
            args.data_dir,
            shards=None if args.shards is None else _int_option("--shards", args.shards),
            admin_port=_int_option("--admin-port", args.admin_port),
            gateway_port=_int_option("--gateway-port", args.gateway_port),
            metrics_port=None if (metrics := _int_option("--metrics-port", args.metrics_port)) == -1 else metrics,
            host=args.host,
            say=say,
            security=security,
            ray_address=args.ray_address,
            frontend_port=frontend_port,
            kafka_listener=kafka_listener,
            frontend_client=frontend_client,
            frontend_server_name=args.frontend_tls_server_name,
            ray_dashboard_port=_dashboard_port(args.ray_dashboard_port),
            shard_resources=shard_resources,
            controller_resources=controller_resources,
            spread_shards=args.spread_shards,
            shard_standby={"auto": None, "on": True, "off": False}[args.shard_standby],
        )
    except LaunchError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Error: interrupted while starting", file=sys.stderr)
        return 1
    stop = threading.Event()
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        shards = f"{len(cluster.shards)} shard{'' if len(cluster.shards) == 1 else 's'}"
        say(f"admin gRPC on {cluster.admin_address}, {shards}, data in {cluster.data_dir}")
        # what a client checks (--cluster-id / $QUOTAPLANE_CLUSTER_ID) to be sure it reached this instance
        say(f"cluster id {cluster.cluster_id} (data directory {cluster.data_dir})")
        say(f"usage gateway gRPC on {cluster.gateway_address}")
        if cluster.frontend is not None:
            host, port = cluster.frontend.advertised
            listener = cluster.frontend.config.listener_name
            say(f"Kafka frontend on {cluster.frontend_address} ({listener}; advertised as {host}:{port})")
            proxy = cluster.frontend.proxy
            if proxy is not None:
                ports = ", ".join(f"{n} on {host}:{proxy.brokers.proxy_port(n)}" for n in proxy.brokers.nodes)
                say(f"Kafka proxy in front of {proxy.config.bootstrap}: upstream brokers {ports or 'none yet'}")
        if cluster.metrics_url is not None:
            say(f"metrics on {cluster.metrics_url}")
        for line in _what_runs(cluster):
            say(line)
        if security is not None:
            say(f"security: {security.describe()}")
        shown = cluster.status()
        say(shown.line())
        # the gateway, the frontend and what they imported live as long as this process: out of its full
        # collections, which otherwise walk them between requests; and the young generation collected less often,
        # since what a request allocates lives until it is answered (``ready_to_serve``)
        ready_to_serve()
        print("ready", flush=True)
        watcher = threading.Thread(
            target=cluster.watch,
            args=(lambda status: say(status.line()), stop),
            kwargs={"last": shown},
            name="up-status",
            daemon=True,
        )
        watcher.start()
        while not stop.wait(0.5):
            pass
        watcher.join(timeout=5)
    except Exception as e:
        print(f"Error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        cluster.close()
        return 1
    say("stopping")
    cluster.close()
    say("stopped")
    return 0
