"""A process that resolves names through a hosts file of the test's own: a mount
namespace (`unshare --mount`, root) in which the file is bind-mounted over /etc/hosts.
The machine's /etc/hosts is never touched, and getaddrinfo (glibc's `files` source,
first in nsswitch.conf) answers from it: a real resolution, not a stub, which is what
the SSRF guard's send-time check must see (tests/integration/test_notify_ssrf.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def hosts_wrap(path: Path, names: Mapping[str, str]) -> list[str]:
    """Writes `names` (name -> address) to `path`; the argv prefix that runs a command
    with them as its /etc/hosts."""
    path.write_text("".join(f"{address} {name}\n" for name, address in names.items()))
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(path)]
