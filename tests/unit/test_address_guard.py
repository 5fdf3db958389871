"""The SSRF guard's rules (notify/address_guard.py); the real notifier and CLI are in
tests/integration/test_notify_ssrf.py."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from paystream.env import SettingsError
from paystream.notify.address_guard import (
    AddressGuard,
    AddressRefused,
    GuardedResolver,
    ResolvedInside,
    refusal,
)
from paystream.notify.settings import NotifySettings

REFUSED = {
    "127.0.0.1": "loopback", "127.255.0.9": "loopback", "10.1.2.3": "a private range",
    "172.31.255.1": "a private range", "192.168.0.1": "a private range",
    "169.254.169.254": "the cloud metadata address", "169.254.3.3": "link-local",
    "100.64.0.1": "carrier-grade NAT", "100.127.255.254": "carrier-grade NAT",
    "224.0.0.251": "multicast", "239.255.255.250": "multicast", "0.0.0.0": "unspecified",
    "255.255.255.255": "a private range", "192.0.2.10": "a private range",
    "::1": "loopback", "::": "unspecified", "fe80::1": "link-local", "fc00::1": "a private",
    "fd00:ec2::254": "the cloud metadata address", "ff02::1": "multicast",
    "::ffff:127.0.0.1": "loopback (it carries 127.0.0.1)",
    "::ffff:169.254.169.254": "the cloud metadata address (it carries 169.254.169.254)",
    "64:ff9b::a00:1": "a private range (it carries 10.0.0.1)",
    "2002:c0a8:1::": "a private range (it carries 192.168.0.1)",
}
ADMITTED = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "100.128.0.1", "2606:4700::1111",
            "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::"]


@pytest.mark.parametrize(("address", "reason"), sorted(REFUSED.items()))
def test_every_inside_range_is_refused_with_its_name(address: str, reason: str) -> None:
    why = refusal(ipaddress.ip_address(address))
    assert why is not None and why.startswith(reason), (address, why)


@pytest.mark.parametrize("address", ADMITTED)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_the_allow_list_admits_its_ranges_only() -> None:
    guard = AddressGuard.of(["127.0.0.1/32", " 10.9.0.0/16 "], allow_http=True)
    assert guard.address_refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert guard.address_refusal(ipaddress.ip_address("10.9.200.1")) is None
    assert guard.address_refusal(ipaddress.ip_address("127.0.0.2")) == "loopback"
    assert guard.address_refusal(ipaddress.ip_address("10.8.0.1")) == "a private range"
    # An IPv4 range does not admit the mapped IPv6 form of its addresses by accident.
    assert guard.address_refusal(ipaddress.ip_address("::ffff:10.8.0.1")) is not None


@pytest.mark.parametrize(("url", "message"), [
    ("http://example.com/h", "http:// is refused"),
    ("ftp://example.com/h", "ftp:// is refused"),
    ("https://127.0.0.1/h", "127.0.0.1 is loopback"),
    ("https://[::1]:8443/h", "::1 is loopback"),
    ("https://[fe80::1%25eth0]/h", "link-local"),
    ("https://169.254.169.254/latest/meta-data", "cloud metadata"),
])
def test_scheme_and_literal_addresses_are_checked_without_dns(url: str, message: str) -> None:
    with pytest.raises(AddressRefused, match=message):
        AddressGuard().check_scheme_and_literal(url)


def test_http_is_admitted_only_when_the_operator_says_so() -> None:
    assert AddressGuard(allow_http=True).check_scheme_and_literal("http://Example.COM/x") \
        == "example.com"
    assert AddressGuard().check_scheme_and_literal("https://example.com/x") == "example.com"


def test_a_name_is_judged_by_what_it_resolves_to_at_creation() -> None:
    # localhost resolves (the machine's own /etc/hosts) to loopback addresses.
    with pytest.raises(AddressRefused, match=r"localhost \((127\.0\.0\.1|::1)\) is loopback"):
        AddressGuard().check_at_creation("https://localhost/hook")
    # A name that does not resolve yet passes: the send-time check still holds.
    AddressGuard().check_at_creation("https://nothing-here.invalid/hook")
    AddressGuard.of(["127.0.0.0/8", "::1/128"], allow_http=False).check_at_creation(
        "https://localhost/hook")


class _Answers(AbstractResolver):
    """What a DNS server answered, fixed: the guard's filtering is under test."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        return [ResolveResult(hostname=host, host=a, port=port, family=family, proto=0,
                              flags=0) for a in self.addresses]

    async def close(self) -> None:
        return None


def test_the_resolver_hands_on_only_checked_addresses() -> None:
    resolver = GuardedResolver(AddressGuard(), _Answers("10.0.0.1", "93.184.216.34"))
    kept = asyncio.run(resolver.resolve("mixed.example", 443))
    assert [r["host"] for r in kept] == ["93.184.216.34"]
    only_inside = GuardedResolver(AddressGuard(), _Answers("127.0.0.1", "::ffff:10.0.0.1"))
    with pytest.raises(ResolvedInside, match=r"127\.0\.0\.1 is loopback; ::ffff:a00:1 is a "
                                             r"private range \(it carries 10\.0\.0\.1\)"):
        asyncio.run(only_inside.resolve("rebound.example", 443))


def test_a_bad_allow_list_refuses_to_start() -> None:
    with pytest.raises(SettingsError, match="PAYSTREAM_NOTIFY_ALLOWED_CIDRS"):
        NotifySettings.from_env({"PAYSTREAM_NOTIFY_ALLOWED_CIDRS": "10.0.0.0/33"})
    settings = NotifySettings.from_env({"PAYSTREAM_NOTIFY_ALLOWED_CIDRS": "127.0.0.0/8,::1"})
    assert settings.guard().address_refusal(ipaddress.ip_address("::1")) is None
