"""The SSRF guard (notify/address_guard.py) on the real notifier and CLI.

At creation: `paystream endpoints add` refuses plain http, a literal address in a refused
range, and a name that resolves to one. At send time: names added while they resolved
nowhere (as a rebinding attacker's would) resolve, in the notifier's own namespace, to an
address of every refused range; each attempt is refused and recorded with the reason,
and the receiver, the independent witness, gets nothing from them, while a name the
operator's allow-list admits is delivered through the same resolver."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from paystream.chaos.receiver import LOOPBACK_ENV, receiver
from paystream.launch import paystream_argv
from paystream.notify import endpoints
from paystream.notify.address_guard import AddressGuard
from paystream.schema.db import Connection
from tests.integration.test_notify_delivery import PORT
from tests.support.consumers import ProcessPool, create_topic, create_users, produce
from tests.support.hosts import hosts_wrap
from tests.support.ids import unique
from tests.support.notify import FAST, intents, messages
from tests.support.waiting import wait_until

# A name per refused range, each resolving (in the notifier's namespace only) to an
# address of it. 127.0.0.3: loopback, but not the allow-listed 127.0.0.1.
REFUSED = {"loopback": "127.0.0.3", "rfc1918-10": "10.0.0.7", "rfc1918-172": "172.16.5.4",
           "rfc1918-192": "192.168.1.9", "metadata": "169.254.169.254",
           "link-local": "169.254.7.7", "cgnat": "100.64.0.9", "multicast": "224.0.0.251",
           "unspecified": "0.0.0.0", "loopback6": "::1", "link-local6": "fe80::1",
           "unique-local6": "fd12::1", "metadata6": "fd00:ec2::254",
           "mapped6": "::ffff:127.0.0.1", "nat64": "64:ff9b::a00:7"}
# Literal addresses stored before the guard existed: checked before the POST.
LITERALS = {"literal-loopback6": "[::1]", "literal-metadata": "169.254.169.254"}
STRICT_ENV = {k: v for k, v in os.environ.items() if k not in LOOPBACK_ENV}


def _add_cli(url: str, user: str, wrap: list[str], env: dict[str, str]
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*wrap, *paystream_argv("endpoints", "add", "--url", url, "--user",
                                                  user)],
                          capture_output=True, text=True, timeout=60, env=env)


def test_endpoint_creation_refuses_http_refused_addresses_and_names_resolving_to_them(
        db: Connection, tmp_path: Path) -> None:
    user = unique("ssrf-add")
    with db.cursor() as cur:
        create_users(cur, [user])
    wrap = hosts_wrap(tmp_path / "hosts", {"rebind.ssrf.test": "10.0.0.7"})
    http = _add_cli("http://example.com/hook", user, [], STRICT_ENV)
    assert http.returncode == 2 and "must use https://" in http.stderr, http
    mapped = _add_cli("https://[::ffff:169.254.169.254]/hook", user, [], STRICT_ENV)
    assert mapped.returncode == 2, mapped
    assert "the cloud metadata address (it carries 169.254.169.254)" in mapped.stderr
    named = _add_cli("https://rebind.ssrf.test/hook", user, wrap, STRICT_ENV)
    assert named.returncode == 2, named
    assert "rebind.ssrf.test (10.0.0.7) is a private range" in named.stderr
    # In-process, the CLI's own function, every range as a literal.
    strict = AddressGuard()
    for name, address in REFUSED.items():
        host = f"[{address}]" if ":" in address else address
        try:
            with db.cursor() as cur:
                endpoints.add(cur, f"https://{host}/hook", user, [], guard=strict)
        except endpoints.EndpointRefused as exc:
            assert "does not POST inside its own network" in str(exc), (name, exc)
        else:
            raise AssertionError(f"{name} ({address}) was admitted")
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM notification_endpoints WHERE user_id = %s", (user,))
        assert cur.fetchone() == (0,)


def test_send_time_resolution_to_a_refused_range_is_never_sent(
        db: Connection, pool: ProcessPool, tmp_path: Path) -> None:
    user = unique("ssrf-send")
    topic, dlq = unique("notify-ssrf"), unique("notify-ssrf-dlq")
    create_topic(topic, partitions=1)
    create_topic(dlq, partitions=1)
    names = {f"{k}.ssrf.test": a for k, a in REFUSED.items()} | {"ok.ssrf.test": "127.0.0.1"}
    creation = AddressGuard(allow_http=True)  # strict: the names resolve nowhere here
    legacy = AddressGuard.of(["0.0.0.0/0", "::/0"], allow_http=True)
    made: dict[str, str] = {}  # path -> endpoint id
    with receiver(PORT) as hooks:
        with db.cursor() as cur:
            create_users(cur, [user])
            for name in names:
                path = f"/ok/{user}-{name}"
                made[path], hooks.secrets[path] = endpoints.add(
                    cur, f"http://{name}:{PORT}{path}", user, [], guard=creation)
            for label, host in LITERALS.items():
                path = f"/ok/{user}-{label}"
                made[path], _ = endpoints.add(cur, f"http://{host}:{PORT}{path}", user, [],
                                              guard=legacy)
        try:
            proc = pool.start("notifier", topic=topic, group=unique("notifier-ssrf"),
                              dlq_topic=dlq, wrap=hosts_wrap(tmp_path / "hosts", names),
                              env={**FAST, "PAYSTREAM_NOTIFY_ALLOW_HTTP": "1",
                                   "PAYSTREAM_NOTIFY_ALLOWED_CIDRS": "127.0.0.1/32"})
            batch = intents(unique("src"), user, 2)
            produce(topic, messages(batch))
            good = f"/ok/{user}-ok.ssrf.test"
            refused = {p: e for p, e in made.items() if p != good}

            def errors() -> dict[str, list[str]]:
                with db.cursor() as cur:
                    cur.execute("SELECT endpoint_id, error FROM notification_attempts"
                                " WHERE endpoint_id = ANY(%s)", (list(refused.values()),))
                    out: dict[str, list[str]] = {}
                    for endpoint_id, error in cur.fetchall():
                        out.setdefault(endpoint_id, []).append(error or "")
                    return out

            wait_until(lambda: len(hooks.ids(good)) == 2 and len(errors()) == len(refused),
                       60, "the allowed name delivered and every refused one attempted",
                       interval_s=0.5)
            assert proc.terminate() == 0, proc.tail()
        finally:
            with db.cursor() as cur:
                cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                            " WHERE endpoint_id = ANY(%s)", (list(made.values()),))
    assert sorted(hooks.ids(good)) == sorted(i.id for i in batch)
    for path, endpoint_id in refused.items():
        assert hooks.ids(path) == [], path  # nothing reached the receiver
        for error in errors()[endpoint_id]:
            assert "SSRF guard" in error, (path, error)
    by_path = {p: errors()[e][0] for p, e in refused.items()}
    assert "127.0.0.3 is loopback" in by_path[f"/ok/{user}-loopback.ssrf.test"]
    assert "loopback (it carries 127.0.0.1)" in by_path[f"/ok/{user}-mapped6.ssrf.test"]
    assert "cloud metadata" in by_path[f"/ok/{user}-literal-metadata"]
