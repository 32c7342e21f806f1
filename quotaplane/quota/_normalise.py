"""Peer addresses and listener names, checked and normalised once for every connection-quota caller.

A connection is named by the listener it arrived on and the peer's IP address. The same two values
reach ``ConnectionQuotas`` from the gRPC connection service, from the shard's connection host and from
tests and tools calling the core directly; if each read them its own way, one of them would admit a
name or an address another refuses, and one connection could be counted under two keys. So the rules
live here, with Kafka's semantics:

* **Peer addresses** are ``InetAddress`` values: an IPv4 or IPv6 literal (or an ``ipaddress`` object),
  never a host name, never padded with spaces (``InetAddress.getByName(" 10.0.0.1")`` is a host-name
  lookup that fails). An IPv4-mapped IPv6 address is its IPv4 address, as Java makes it, so
  ``::ffff:10.0.0.1`` and ``10.0.0.1`` share one count. :func:`host_address` prints an address as
  Java's ``getHostAddress`` does, which is how Kafka names an IP's sensor.
* **Listener names** are 1-64 of ``[A-Za-z0-9_-]``: what the ``listener.name.<listener>.*`` config keys
  can name, and never an IP literal (a listener's sensor, ``Connection-Accept-Rate-<listener>``, would
  be named like an IP's). :func:`normalise_listener` is Kafka's ``ListenerName.normalised`` (upper
  case), for names that come from outside; ``ConnectionQuotas`` itself, like Kafka's, keys listeners
  by the name it is given (:func:`check_listener_name`).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Callable

__all__ = [
    "Address",
    "Resolver",
    "check_listener_name",
    "default_resolver",
    "host_address",
    "ip_literal",
    "normalise_listener",
    "peer_address",
]

#: A peer address (Java's ``InetAddress``).
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Turns a host name into one IP address literal (Java's ``InetAddress.getByName``). Raise OSError
#: (or ValueError) when the name does not resolve.
Resolver = Callable[[str], str]

_LISTENER_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")


def default_resolver(host: str) -> str:
    """The first address ``socket.getaddrinfo`` gives for ``host`` (Java's ``InetAddress.getByName``)."""
    return socket.getaddrinfo(host, None)[0][4][0]


def _unmapped(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None and not address.scope_id:
        return address.ipv4_mapped
    return address


@functools.lru_cache(maxsize=65_536)
def _parse_literal(text: str) -> Address | None:
    """Parsed once per distinct string (``ipaddress`` costs ~8 us; a fleet's peers repeat)."""
    try:
        return _unmapped(ipaddress.ip_address(text))
    except ValueError:
        return None


def ip_literal(value: object) -> Address | None:
    """``value`` as an address if it is an IP literal (or an address object), else None.

    >>> ip_literal("::ffff:10.0.0.1"), ip_literal("broker-1"), ip_literal(" 10.0.0.1")
    (IPv4Address('10.0.0.1'), None, None)
    """
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return _unmapped(value)
    if isinstance(value, str):
        return _parse_literal(value)
    return None


def peer_address(ip: object) -> Address:
    """The peer address of a connection (Kafka's ``InetAddress``); ValueError for anything but an IP literal.

    >>> peer_address("::ffff:192.168.1.1")
    IPv4Address('192.168.1.1')
    >>> peer_address("broker-1.example.com")
    Traceback (most recent call last):
    ...
    ValueError: ip 'broker-1.example.com' is not an IP address: not an IPv4 or IPv6 literal
    """
    address = ip_literal(ip)
    if address is not None:
        return address
    if isinstance(ip, str):
        raise ValueError(f"ip {ip!r} is not an IP address: not an IPv4 or IPv6 literal")
    raise ValueError(
        f"ip {ip!r} is not an IP address: expected an IPv4 or IPv6 literal string, got {type(ip).__name__}"
    )


def host_address(address: Address) -> str:
    """Java's ``InetAddress.getHostAddress``: IPv6 as eight uncompressed hex groups (``0:0:0:0:0:0:0:1``).

    >>> host_address(peer_address("::1")), host_address(peer_address("10.0.0.1"))
    ('0:0:0:0:0:0:0:1', '10.0.0.1')
    """
    if address.version == 4:
        return str(address)
    packed = address.packed
    text = ":".join(f"{int.from_bytes(packed[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    return f"{text}%{address.scope_id}" if address.scope_id else text


def check_listener_name(listener: object) -> str:
    """``listener`` if it is a valid listener name (kept as given, as Kafka's ``ConnectionQuotas`` keys it)."""
    if isinstance(listener, str) and _LISTENER_NAME.fullmatch(listener):
        return listener
    if ip_literal(listener) is not None:
        # its sensor would be named like an IP's (Connection-Accept-Rate-<name>)
        raise ValueError(f"a listener name cannot be an IP address, got {listener!r}")
    raise ValueError(f"listener must be 1-64 characters of [A-Za-z0-9_-], got {listener!r}")


def normalise_listener(listener: object) -> str:
    """Kafka's ``ListenerName.normalised`` (upper case) of a valid listener name; ValueError otherwise.

    >>> normalise_listener("client_2")
    'CLIENT_2'
    """
    return check_listener_name(listener).upper()
