"""The one rule for peer addresses and listener names, shared by ``ConnectionQuotas``, the shard's connection
host and the gRPC connection service.

The cases are those the core and the actor host each checked before they shared the rule, plus the two
places they disagreed: an address padded with spaces (now refused, as Java's ``InetAddress.getByName``
treats it as a host name) and listener names outside ``[A-Za-z0-9_-]{1,64}`` (now refused by the core
too, as the config keys ``listener.name.<listener>.*`` cannot name them).
"""

from __future__ import annotations

import ipaddress

import pytest

from quotaplane.quota import (
    ConnectionQuotas,
    ConnectionQuotasConfig,
    check_listener_name,
    host_address,
    ip_literal,
    normalise_listener,
    peer_address,
)

NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("ip", "expected"),
    [
        ("10.0.0.1", ipaddress.IPv4Address("10.0.0.1")),
        ("::1", ipaddress.IPv6Address("::1")),
        ("0:0:0:0:0:0:0:1", ipaddress.IPv6Address("::1")),
        # an IPv4-mapped IPv6 address is its IPv4 address, as Java's InetAddress makes it
        ("::ffff:10.0.0.1", ipaddress.IPv4Address("10.0.0.1")),
        ("::FFFF:192.168.1.1", ipaddress.IPv4Address("192.168.1.1")),
        # ... unless it carries a zone
        ("::ffff:10.0.0.1%1", ipaddress.IPv6Address("::ffff:10.0.0.1%1")),
        ("fe80::1%eth0", ipaddress.IPv6Address("fe80::1%eth0")),
        # address objects are InetAddress values too
        (ipaddress.IPv4Address("10.0.0.2"), ipaddress.IPv4Address("10.0.0.2")),
        (ipaddress.IPv6Address("::ffff:10.0.0.3"), ipaddress.IPv4Address("10.0.0.3")),
    ],
)
def test_peer_addresses(ip: object, expected: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    assert peer_address(ip) == expected
    assert ip_literal(ip) == expected


@pytest.mark.parametrize(
    "ip",
    ["300.1.1.1", "10.0.0", "10.0.0.300", "not-an-ip", "broker-1.example.com", "", "::1::2", " 10.0.0.1", "10.0.0.1 "],
)
def test_strings_that_are_not_ip_literals_are_refused(ip: str) -> None:
    """Host names are never peer addresses; padded literals are host names to Java, so refused too."""
    assert ip_literal(ip) is None
    with pytest.raises(ValueError, match=r"^ip .* is not an IP address: not an IPv4 or IPv6 literal$"):
        peer_address(ip)


@pytest.mark.parametrize("ip", [None, 17, True, b"10.0.0.1", 10.5])
def test_non_strings_are_refused(ip: object) -> None:
    assert ip_literal(ip) is None
    with pytest.raises(ValueError, match=r"^ip .* is not an IP address: expected an IPv4 or IPv6 literal string"):
        peer_address(ip)


@pytest.mark.parametrize(
    ("ip", "text"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("::1", "0:0:0:0:0:0:0:1"),
        ("2001:db8::1", "2001:db8:0:0:0:0:0:1"),
        ("::ffff:10.0.0.1", "10.0.0.1"),
        ("fe80::1%2", "fe80:0:0:0:0:0:0:1%2"),
    ],
)
def test_host_address_is_javas(ip: str, text: str) -> None:
    assert host_address(peer_address(ip)) == text


@pytest.mark.parametrize(
    ("name", "normalised"),
    [("EXTERNAL", "EXTERNAL"), ("client_2", "CLIENT_2"), ("Client-2", "CLIENT-2"), ("a" * 64, "A" * 64), ("1", "1")],
)
def test_listener_names(name: str, normalised: str) -> None:
    """Kafka's ``ListenerName.normalised`` upper-cases; the core keys a listener by the name it is given."""
    assert normalise_listener(name) == normalised
    assert check_listener_name(name) == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("EXT.ERNAL", "1-64 characters"),
        ("", "1-64 characters"),
        (" EXTERNAL", "1-64 characters"),
        ("EXTERNAL ", "1-64 characters"),
        ("EXT ERNAL", "1-64 characters"),
        ("a" * 65, "1-64 characters"),
        ("ÉXTERNAL", "1-64 characters"),
        (None, "1-64 characters"),
        (5, "1-64 characters"),
        ("10.0.0.1", "cannot be an IP address"),
        ("::1", "cannot be an IP address"),
    ],
)
def test_bad_listener_names_are_refused_everywhere(name: object, message: str) -> None:
    """The gateway and the host (``normalise_listener``), the core (``add_listener``) and its config refuse alike."""
    with pytest.raises(ValueError, match=message):
        normalise_listener(name)
    with pytest.raises(ValueError, match=message):
        check_listener_name(name)
    quotas = ConnectionQuotas(now_ms=NOW)
    with pytest.raises(ValueError, match=message):
        quotas.add_listener(name, now_ms=NOW)  # type: ignore[arg-type]
    assert quotas.listeners == []
    if name is not None:  # None is "no inter-broker listener"
        with pytest.raises(ValueError, match=message):
            ConnectionQuotasConfig(inter_broker_listener=name)  # type: ignore[arg-type]


def test_the_core_counts_a_peer_under_one_address() -> None:
    """A mapped IPv6 peer and its IPv4 form share one count; a padded literal is refused before anything counts."""
    quotas = ConnectionQuotas(ConnectionQuotasConfig(max_connections_per_ip=2), now_ms=NOW)
    quotas.add_listener("EXTERNAL", now_ms=NOW)
    assert quotas.inc("EXTERNAL", "::ffff:10.0.0.1", NOW).admitted
    assert quotas.inc("EXTERNAL", ipaddress.IPv4Address("10.0.0.1"), NOW).admitted
    decision = quotas.inc("EXTERNAL", "10.0.0.1", NOW)
    assert (decision.rejected, decision.ip) == (True, "10.0.0.1")
    assert quotas.get("::ffff:10.0.0.1") == 3
    with pytest.raises(ValueError, match="is not an IP address"):
        quotas.inc("EXTERNAL", " 10.0.0.1", NOW)
    assert quotas.total_count == 3
