"""The SSRF guard of every outbound POST: an endpoint's URL must not lead the notifier
into the network it runs in (docs/notifications.md#where-webhooks-may-go).

Checked twice:
- when an endpoint is added: the scheme (https, or http when the operator allows it for
  development), a literal address, and every address its name resolves to then;
- at every delivery: the sender's resolver (`GuardedResolver`) resolves the name, drops
  the refused addresses and hands aiohttp only the checked ones, so the connection is made
  to an address that was checked (a name that re-binds to 127.0.0.1 after it was added
  is refused at send time); a literal address never reaches a resolver and is checked
  before the POST. Redirects are never followed (delivery.py).

Refused: loopback, private (RFC 1918, unique local), link-local (the cloud metadata
address 169.254.169.254 among them), multicast, CGNAT (100.64/10), unspecified,
reserved and documentation ranges (whatever Python's `ipaddress` does not call global),
and an IPv6 address carrying an IPv4 one (mapped, NAT64, 6to4) judged by the address it
carries. The operator's allow-list (`PAYSTREAM_NOTIFY_ALLOWED_CIDRS`) admits ranges
anyway: local development and the test suite's receivers on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Not "global" by Python's table, but named here so a refusal says what the range is.
_NAMED: tuple[tuple[IpNetwork, str], ...] = (
    (ipaddress.IPv4Network("169.254.169.254/32"), "the cloud metadata address"),
    (ipaddress.IPv6Network("fd00:ec2::254/128"), "the cloud metadata address"),
    (ipaddress.IPv4Network("100.64.0.0/10"), "carrier-grade NAT (100.64.0.0/10)"),
)


class AddressRefused(ValueError):  # noqa: N818 - a refusal, the message says why
    """The URL or an address it resolves to is one the notifier must not reach."""


class ResolvedInside(OSError):  # noqa: N818 - a refusal, the message says why
    """At send time, every address a name resolved to was refused (an OSError, as a
    resolver's failures are: aiohttp wraps it in ClientConnectorDNSError)."""


def _carried_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, NAT64, 6to4), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    return ip.sixtofour


def refusal(ip: IpAddress) -> str | None:
    """Why `ip` must not be reached (None: it may)."""
    if isinstance(ip, ipaddress.IPv6Address):
        carried = _carried_ipv4(ip)
        if carried is not None:
            why = refusal(carried)
            return None if why is None else f"{why} (it carries {carried})"
    for network, name in _NAMED:
        if ip in network:
            return name
    for flag, name in (("is_loopback", "loopback"), ("is_link_local", "link-local"),
                       ("is_multicast", "multicast"), ("is_unspecified", "unspecified"),
                       ("is_private", "a private range"), ("is_reserved", "reserved")):
        if getattr(ip, flag):
            return name
    return None if ip.is_global else "not a global address"


@dataclass(frozen=True)
class AddressGuard:
    """What outbound POSTs may reach: `allowed` ranges are admitted whatever they are;
    `allow_http` admits plain http (development only)."""

    allowed: tuple[IpNetwork, ...] = ()
    allow_http: bool = False

    @classmethod
    def of(cls, cidrs: Iterable[str], *, allow_http: bool) -> AddressGuard:
        return cls(tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs
                         if c.strip()), allow_http)

    def address_refusal(self, ip: IpAddress) -> str | None:
        if any(ip.version == n.version and ip in n for n in self.allowed):
            return None
        return refusal(ip)

    def check_scheme_and_literal(self, url: str) -> str:
        """The URL's host (lower case) once its scheme and, when it is an address
        literal, the address pass; AddressRefused says why not. No DNS."""
        parts = urlsplit(url)
        if parts.scheme != "https" and not (parts.scheme == "http" and self.allow_http):
            raise AddressRefused(f"{parts.scheme}:// is refused: endpoints must use https://"
                                 " (PAYSTREAM_NOTIFY_ALLOW_HTTP=1 admits http for "
                                 "development)")
        host = (parts.hostname or "").lower()
        literal = _literal(host)
        if literal is not None:
            self._refuse(host, literal)
        return host

    def check_at_creation(self, url: str) -> None:
        """The scheme, a literal address, and every address the name resolves to now (a
        name that does not resolve yet is admitted: the send-time check still holds)."""
        host = self.check_scheme_and_literal(url)
        if _literal(host) is not None:
            return
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError):
            return
        for info in infos:
            self._refuse(host, ipaddress.ip_address(str(info[4][0]).split("%")[0]))

    def _refuse(self, host: str, ip: IpAddress) -> None:
        why = self.address_refusal(ip)
        if why is not None:
            shown = host if host == str(ip) else f"{host} ({ip})"
            raise AddressRefused(f"{shown} is {why}: the notifier does not POST inside its "
                                 "own network (PAYSTREAM_NOTIFY_ALLOWED_CIDRS admits a range)")


def _literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return None


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver for the sender: the system's answer (getaddrinfo in a thread,
    as aiohttp's default), every refused address dropped; none left is an error naming
    why, so the attempt fails and is recorded with that reason."""

    def __init__(self, guard: AddressGuard, inner: AbstractResolver | None = None) -> None:
        self._guard = guard
        self._inner = inner or ThreadedResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        kept, refused = [], []
        for result in found:
            ip = ipaddress.ip_address(result["host"].split("%")[0])
            why = self._guard.address_refusal(ip)
            if why is None:
                kept.append(result)
            else:
                refused.append(f"{ip} is {why}")
        if not kept:
            raise ResolvedInside(f"{host} resolves only to refused addresses "
                                 f"({'; '.join(refused)}): not sent (SSRF guard)")
        return kept

    async def close(self) -> None:
        await self._inner.close()

