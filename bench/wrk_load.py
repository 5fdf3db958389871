"""Closed-loop load from wrk (C, epoll): the saturation phases of bench/ingest_bench.py.

Why wrk and not the aiohttp generator: this machine has 2 cores, shared by the load
generator, the server and (for the ingest) Postgres, Kafka and Connect. aiohttp spent
85-125 us of CPU per request, as much as the bare endpoint itself, so the generator,
not the server, decided much of what "saturation" meant. wrk spends a few us.

Every request is sent once (bench/wrk_requests.lua): they are distinct signed
deliveries, each a real write. wrk is Debian's package `wrk` (`make bench-ingest`
installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

SCRIPT = Path(__file__).with_name("wrk_requests.lua")
SUMMARY = re.compile(r"^PAYSTREAM_WRK (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class WrkResult:
    answered: int     # responses received
    ok: int           # of them, status < 400
    errors: int       # status >= 400, and connect/read/write/timeout errors
    seconds: float
    p50_ms: float
    p99_ms: float
    wraps: int        # times the request list ran out (requests sent twice)


def raw_request(url: str, body: bytes, headers: dict[str, str], method: str = "POST"
                ) -> bytes:
    """One complete HTTP/1.1 request (a POST unless told), as wrk sends it."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}",
             f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    head = "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n"
    if b"\0" in head or b"\0" in body:
        raise ValueError("a NUL byte separates requests in the wrk file")
    return head + body


def run_wrk(url: str, reqs: list[tuple[bytes, dict[str, str]]], connections: int,
            duration_s: float, threads: int = 1, method: str = "POST") -> WrkResult:
    """Send `reqs` (body, headers) in order on `connections` keep-alive connections
    (GETs for bench/api_bench.py, where a repeat is no different request)."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise RuntimeError("wrk is not installed: `apt-get install wrk` "
                           "(make bench-ingest does it)")
    with tempfile.NamedTemporaryFile(prefix="paystream-wrk-", suffix=".req") as file:
        file.write(b"\0".join(raw_request(url, body, headers, method)
                              for body, headers in reqs))
        file.flush()
        done = subprocess.run(
            [wrk, f"-t{threads}", f"-c{connections}", f"-d{duration_s:.0f}s",
             "--timeout", "10s", "-s", str(SCRIPT), url, "--", file.name],
            capture_output=True, text=True, timeout=duration_s + 120, check=False)
    found = SUMMARY.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout[-1000:]}"
                           f"{done.stderr[-1000:]}")
    fields = {k: int(v) for k, v in (kv.split("=") for kv in found.group(1).split())}
    transport = fields["connect"] + fields["read"] + fields["write"] + fields["timeout"]
    return WrkResult(answered=fields["requests"],
                     ok=fields["requests"] - fields["status_errors"],
                     errors=fields["status_errors"] + transport,
                     seconds=fields["duration_us"] / 1e6,
                     p50_ms=fields["p50_us"] / 1000, p99_ms=fields["p99_us"] / 1000,
                     wraps=fields["wraps"])
